package tokenizer

// MaxTokenBytes bounds the text one token stands for: a text of n bytes has at least
// n / MaxTokenBytes() tokens, so a caller can tell from a text's length alone that it
// cannot fit a context, before tokenizing it (a chat template's output, issue 22). It is
// 0 where no such bound holds: added tokens that strip the whitespace beside them let
// any amount of text become no token at all. NFC normalization can shrink a text up to
// 3× (Hangul jamo into syllables), which the bound includes.
func (t *Tokenizer) MaxTokenBytes() int {
	t.boundOnce.Do(func() {
		longest := 0
		for _, a := range t.added {
			if a.LStrip || a.RStrip {
				return
			}
			longest = max(longest, len(a.Content))
		}
		for id := range t.inv {
			longest = max(longest, len(t.Decode([]int32{int32(id)})))
		}
		if t.nfc {
			longest *= 3
		}
		t.maxTokenBytes = longest
	})
	return t.maxTokenBytes
}
