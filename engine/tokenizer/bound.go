package tokenizer

// MaxTokenBytes bounds the text one token stands for: a text of n bytes has at least
// n / MaxTokenBytes() tokens, so a caller can tell from a text's length alone that it
// cannot fit a context, before tokenizing it (a chat template's output, issue 22). It is
// 0 where no such bound holds: added tokens that strip the whitespace beside them let
// any amount of text become no token at all, and where the normalizer or pre-tokenizer
// drops text or the vocabulary drops characters (Tokenizer.shrink). Normalization can
// shrink a text up to 3× (NFC: Hangul jamo into syllables), which the bound includes.
func (t *Tokenizer) MaxTokenBytes() int {
	t.boundOnce.Do(func() {
		longest := 0
		for _, a := range t.added {
			if a.LStrip || a.RStrip {
				return
			}
			longest = max(longest, len(a.Content))
		}
		if t.shrink == 0 {
			return // the normalizer or pre-tokenizer can drop text, or the vocabulary characters
		}
		for id, s := range t.inv {
			// A token's own string is at least as long as the text it stands for ("Ġ"
			// and "▁" for a space); its decoding can be shorter (Metaspace drops a
			// leading "▁").
			longest = max(longest, len(t.Decode([]int32{int32(id)})), len(s))
		}
		t.maxTokenBytes = longest * t.shrink
	})
	return t.maxTokenBytes
}
