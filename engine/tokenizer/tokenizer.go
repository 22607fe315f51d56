package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"unicode"
)

// GPT2Pattern is the ByteLevel pre-tokenizer's split pattern (use_regex: true).
const GPT2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// Llama3Pattern is the Split pattern of Llama 3's tokenizer.json (digits in runs of up
// to three).
const Llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// Qwen2Pattern is the Split pattern of Qwen2's tokenizer.json (one digit per pre-token).
const Qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// AddedToken is an entry of added_tokens.
type AddedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	Special    bool   `json:"special"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	SingleWord bool   `json:"single_word"`
	Normalized bool   `json:"normalized"`
}

// Tokenizer is a loaded BPE tokenizer (byte-level as GPT-2, Llama 3 and Qwen2, or
// SentencePiece-style with byte fallback as Llama 2 and Mistral). It is safe for
// concurrent use.
type Tokenizer struct {
	vocab   map[string]int32
	inv     []string
	ranks   map[[2]string]int
	added   []AddedToken // longest content first
	addedID map[int32]bool
	cacheMu sync.Mutex
	cache   map[string][]int32
	byteEnc [256]rune
	byteDec map[rune]byte

	normalize normalizer   // nil: none
	pre       preTokenizer // nil: the whole segment is one piece
	decode    decoder      // nil: tokens joined with spaces (as HF without a decoder)
	// ignoreMerges (model.ignore_merges, as in Llama 3): a pre-token that is itself in
	// the vocabulary becomes that token without applying merges.
	ignoreMerges bool
	byteFallback bool  // a character outside the vocabulary becomes its <0xXX> byte tokens
	unk          int32 // model.unk_token's id, -1 when none
	fuseUnk      bool
	// shrink bounds how many times shorter the normalizer and pre-tokenizer can make a
	// text (NFC composes up to 3 bytes into 1); 0 when nothing bounds it (text they drop,
	// characters the vocabulary drops). MaxTokenBytes uses it.
	shrink int
	// byteLevel: a ByteLevel pre-tokenizer maps bytes to GPT-2's printable runes; drops:
	// a pre-tokenizer removes text (whitespace, or delimiters with behavior Removed).
	byteLevel, drops bool

	boundOnce     sync.Once
	maxTokenBytes int // MaxTokenBytes, computed once
}

type rawTokenizer struct {
	AddedTokens  []AddedToken    `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        struct {
		Type                    string           `json:"type"`
		Vocab                   map[string]int32 `json:"vocab"`
		Merges                  json.RawMessage  `json:"merges"`
		IgnoreMerges            bool             `json:"ignore_merges"`
		ByteFallback            bool             `json:"byte_fallback"`
		UnkToken                *string          `json:"unk_token"`
		FuseUnk                 bool             `json:"fuse_unk"`
		Dropout                 *float64         `json:"dropout"`
		ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	} `json:"model"`
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// Load reads tokenizer.json.
func Load(path string) (*Tokenizer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse decodes tokenizer.json bytes.
func Parse(data []byte) (*Tokenizer, error) {
	var r rawTokenizer
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("tokenizer.json is not valid JSON: %w", err)
	}
	if r.Model.Type != "BPE" {
		return nil, fmt.Errorf("tokenizer model %q is not supported (BPE only)", r.Model.Type)
	}
	if r.Model.Dropout != nil && *r.Model.Dropout > 0 {
		return nil, fmt.Errorf("model.dropout %g is not supported (BPE dropout is for training)", *r.Model.Dropout)
	}
	if p := r.Model.ContinuingSubwordPrefix; p != nil && *p != "" {
		return nil, fmt.Errorf("model.continuing_subword_prefix %q is not supported", *p)
	}
	if p := r.Model.EndOfWordSuffix; p != nil && *p != "" {
		return nil, fmt.Errorf("model.end_of_word_suffix %q is not supported", *p)
	}
	t := &Tokenizer{vocab: r.Model.Vocab, ranks: map[[2]string]int{}, addedID: map[int32]bool{}, cache: map[string][]int32{}, byteDec: map[rune]byte{}, unk: -1}
	t.ignoreMerges = r.Model.IgnoreMerges
	t.byteFallback, t.fuseUnk = r.Model.ByteFallback, r.Model.FuseUnk
	if t.vocab == nil {
		t.vocab = map[string]int32{}
	}
	if r.Model.UnkToken != nil {
		id, ok := t.vocab[*r.Model.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model.unk_token %q is not in the vocabulary", *r.Model.UnkToken)
		}
		t.unk = id
	}
	if !isNull(r.Normalizer) {
		var n normJSON
		if err := json.Unmarshal(r.Normalizer, &n); err != nil {
			return nil, fmt.Errorf("normalizer: %w", err)
		}
		var err error
		if t.normalize, err = parseNormalizer(n); err != nil {
			return nil, err
		}
	}
	assignAddedIDs(r.AddedTokens, t.vocab)
	t.byteEnc = bytesToUnicode()
	for b, ru := range t.byteEnc {
		t.byteDec[ru] = byte(b)
	}
	maxID := int32(-1)
	for _, id := range t.vocab {
		maxID = max(maxID, id)
	}
	for _, a := range r.AddedTokens {
		maxID = max(maxID, a.ID)
	}
	t.inv = make([]string, maxID+1)
	for s, id := range t.vocab {
		if id < 0 {
			return nil, fmt.Errorf("vocab entry %q has negative id %d", s, id)
		}
		t.inv[id] = s
	}
	for _, a := range r.AddedTokens {
		if a.Content == "" {
			return nil, fmt.Errorf("added token %d has empty content", a.ID)
		}
		t.inv[a.ID] = a.Content
		t.addedID[a.ID] = true
		t.added = append(t.added, a)
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].Content) > len(t.added[j].Content) })
	if err := t.parseMerges(r.Model.Merges); err != nil {
		return nil, err
	}
	t.shrink = 1
	if t.normalize != nil {
		var n normJSON
		_ = json.Unmarshal(r.Normalizer, &n)
		t.shrink = shrinkOf(n)
	}
	if !isNull(r.PreTokenizer) {
		var p preTokJSON
		if err := json.Unmarshal(r.PreTokenizer, &p); err != nil {
			return nil, fmt.Errorf("pre_tokenizer: %w", err)
		}
		var err error
		if t.pre, err = t.parsePreTokenizer(p); err != nil {
			return nil, err
		}
	}
	if t.drops || !t.coversEveryCharacter() {
		t.shrink = 0
	}
	if !isNull(r.Decoder) {
		var d decJSON
		if err := json.Unmarshal(r.Decoder, &d); err != nil {
			return nil, fmt.Errorf("decoder: %w", err)
		}
		var err error
		if t.decode, err = t.parseDecoder(d); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// coversEveryCharacter reports whether every character becomes at least one token of
// its own: all 256 byte symbols are in a byte-level vocabulary, or all 256 <0xXX> tokens
// with byte_fallback, or an unknown token that is not fused. Otherwise characters can
// vanish (HF drops one outside the vocabulary when there is no unk_token; SmolLM2's
// vocabulary has no symbol for byte 0x1D) or merge into one unknown token.
func (t *Tokenizer) coversEveryCharacter() bool {
	all := func(name func(b int) string) bool {
		for b := 0; b < 256; b++ {
			if _, ok := t.vocab[name(b)]; !ok {
				return false
			}
		}
		return true
	}
	switch {
	case t.byteLevel:
		return all(func(b int) string { return string(t.byteEnc[b]) }) || (t.unk >= 0 && !t.fuseUnk)
	case t.byteFallback && all(func(b int) string { return fmt.Sprintf("<0x%02X>", b) }):
		return true
	}
	return t.unk >= 0 && !t.fuseUnk
}

// assignAddedIDs gives added tokens the ids HuggingFace tokenizers gives them on load,
// whatever their "id" field says: the vocabulary's id when the content is a vocabulary
// token, otherwise the next id after the vocabulary (its entry count) and the added
// tokens so far. Files written by tokenizers itself always agree with this.
func assignAddedIDs(added []AddedToken, vocab map[string]int32) {
	size := int32(len(vocab))
	seen := map[string]int32{}
	maxID := int32(-1)
	for i := range added {
		a := &added[i]
		if id, ok := vocab[a.Content]; ok {
			a.ID = id
		} else if id, ok := seen[a.Content]; ok {
			a.ID = id
		} else if maxID >= size || size == 0 {
			a.ID = maxID + 1
		} else {
			a.ID = size
		}
		seen[a.Content] = a.ID
		maxID = max(maxID, a.ID)
	}
}

func (t *Tokenizer) parseMerges(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		for i, m := range strs {
			a, b, ok := strings.Cut(m, " ")
			if !ok {
				return fmt.Errorf("merge %d %q is not two symbols", i, m)
			}
			t.ranks[[2]string{a, b}] = i
		}
		return nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return fmt.Errorf("model.merges must be a list of \"a b\" strings or [a, b] pairs: %w", err)
	}
	for i, p := range pairs {
		t.ranks[p] = i
	}
	return nil
}

// bytesToUnicode is GPT-2's reversible map from bytes to printable runes.
func bytesToUnicode() [256]rune {
	var m [256]rune
	var bs []int
	for b := '!'; b <= '~'; b++ {
		bs = append(bs, int(b))
	}
	for b := 0xA1; b <= 0xAC; b++ {
		bs = append(bs, b)
	}
	for b := 0xAE; b <= 0xFF; b++ {
		bs = append(bs, b)
	}
	in := map[int]bool{}
	for _, b := range bs {
		in[b] = true
		m[b] = rune(b)
	}
	n := 0
	for b := 0; b < 256; b++ {
		if !in[b] {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}

// VocabSize is the number of token ids (highest id + 1).
func (t *Tokenizer) VocabSize() int { return len(t.inv) }

// TokenID looks up a token string.
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	for _, a := range t.added {
		if a.Content == s {
			return a.ID, true
		}
	}
	id, ok := t.vocab[s]
	return id, ok
}

// IDToken returns a token's string (byte-level form for vocabulary tokens).
func (t *Tokenizer) IDToken(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.inv) || t.inv[id] == "" {
		return "", false
	}
	return t.inv[id], true
}

// Encode tokenizes text, recognising added and special tokens.
func (t *Tokenizer) Encode(text string) ([]int32, error) {
	return t.encode(context.Background(), text, true, 0)
}

// EncodeOrdinary tokenizes text treating special tokens as plain text.
func (t *Tokenizer) EncodeOrdinary(text string) ([]int32, error) {
	return t.encode(context.Background(), text, false, 0)
}

// ErrTooManyTokens is returned (wrapped) by EncodeContext when the text has more tokens
// than its limit.
var ErrTooManyTokens = errors.New("tokenizer: more tokens than the limit")

// EncodeContext is Encode for text from a request: it stops with ctx's error once ctx
// ends, and with ErrTooManyTokens as soon as the text is known to have more than
// maxTokens tokens (maxTokens ≤ 0: no limit), so that a prompt longer than a model's
// context costs the tokens up to the context, not the whole text.
func (t *Tokenizer) EncodeContext(ctx context.Context, text string, maxTokens int) ([]int32, error) {
	return t.encode(ctx, text, true, maxTokens)
}

// encode splits text at added tokens and encodes the segments between them. Each added
// token's next occurrence is remembered and only searched for again once the text
// before it is consumed, so the cost is linear in the text: searching the whole rest of
// the text for every token at every occurrence of another one (a conversation of many
// short messages) was quadratic (issue 22).
func (t *Tokenizer) encode(ctx context.Context, text string, special bool, maxTokens int) ([]int32, error) {
	var out []int32
	next := make([]int, len(t.added)) // per added token: its next occurrence at or after cur, -1: none left
	for i := range next {
		next[i] = -2 // not searched yet
	}
	cur := 0
	for cur < len(text) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		pos, tok := len(text), AddedToken{}
		if special {
			for i, a := range t.added {
				if next[i] == -2 || (next[i] >= 0 && next[i] < cur) {
					next[i] = -1
					if j := strings.Index(text[cur:], a.Content); j >= 0 {
						next[i] = cur + j
					}
				}
				if next[i] >= 0 && next[i] < pos {
					pos, tok = next[i], a
				}
			}
		}
		seg := text[cur:pos]
		if tok.LStrip {
			seg = strings.TrimRightFunc(seg, unicode.IsSpace)
		}
		room := -1
		if maxTokens > 0 {
			room = maxTokens - len(out)
		}
		ids, err := t.encodeSegment(ctx, seg, cur == 0, room)
		if errors.Is(err, ErrTooManyTokens) {
			return nil, fmt.Errorf("%w (%d)", ErrTooManyTokens, maxTokens)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ids...)
		if tok.Content == "" {
			break
		}
		out = append(out, tok.ID)
		if maxTokens > 0 && len(out) > maxTokens {
			return nil, fmt.Errorf("%w (%d)", ErrTooManyTokens, maxTokens)
		}
		cur = pos + len(tok.Content)
		if tok.RStrip {
			cur = len(text) - len(strings.TrimLeftFunc(text[cur:], unicode.IsSpace))
		}
	}
	return out, nil
}

// encodeSegment encodes text between added tokens: normalizer, pre-tokenizer, model.
// start says whether the segment begins the input; room ≥ 0 bounds its tokens
// (ErrTooManyTokens past it), and it stops once ctx ends.
func (t *Tokenizer) encodeSegment(ctx context.Context, s string, start bool, room int) ([]int32, error) {
	if s == "" {
		return nil, nil
	}
	if t.normalize != nil {
		var err error
		if s, err = t.normalize(s); err != nil {
			return nil, err
		}
		if s == "" {
			return nil, nil
		}
	}
	pieces := []piece{{s, start}}
	if t.pre != nil {
		var err error
		if pieces, err = t.pre(ctx, pieces); err != nil {
			return nil, err
		}
	}
	var out []int32
	for i, p := range pieces {
		if i%1024 == 1023 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		ids, err := t.bpe(p.s)
		if err != nil {
			return nil, err
		}
		out = append(out, ids...)
		if room >= 0 && len(out) > room {
			return nil, ErrTooManyTokens
		}
	}
	return out, nil
}

// byteMap writes s's bytes as GPT-2's printable runes.
func (t *Tokenizer) byteMap(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteRune(t.byteEnc[s[i]])
	}
	return b.String()
}

// byteUnmap is byteMap's inverse; a token with a rune outside the map stays as it is
// (as HF's ByteLevel decoder).
func (t *Tokenizer) byteUnmap(s string) string {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		by, ok := t.byteDec[r]
		if !ok {
			return s
		}
		b = append(b, by)
	}
	return string(b)
}

// sym is a symbol during merging; unk marks a character the vocabulary lacks (it
// becomes model.unk_token and merges with nothing).
type sym struct {
	s   string
	unk bool
}

// bpe encodes one pre-token.
func (t *Tokenizer) bpe(word string) ([]int32, error) {
	t.cacheMu.Lock()
	if ids, ok := t.cache[word]; ok {
		t.cacheMu.Unlock()
		return ids, nil
	}
	t.cacheMu.Unlock()
	var syms []sym
	if _, ok := t.vocab[word]; ok && t.ignoreMerges {
		syms = []sym{{s: word}}
	} else {
		var err error
		if syms, err = t.symbols(word); err != nil {
			return nil, err
		}
	}
	for len(syms) > 1 {
		best, at := -1, -1
		for i := 0; i+1 < len(syms); i++ {
			if syms[i].unk || syms[i+1].unk {
				continue
			}
			if r, ok := t.ranks[[2]string{syms[i].s, syms[i+1].s}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		// Merging the leftmost best pair one at a time equals HF's left-to-right
		// non-overlapping merge of every occurrence: the pair stays the best until done.
		out := append(syms[:at:at], sym{s: syms[at].s + syms[at+1].s})
		out = append(out, syms[at+2:]...)
		syms = out
	}
	ids := make([]int32, 0, len(syms))
	for _, s := range syms {
		if s.unk {
			ids = append(ids, t.unk)
			continue
		}
		id, ok := t.vocab[s.s]
		if !ok {
			return nil, fmt.Errorf("merged token %q is not in the vocabulary", s.s)
		}
		ids = append(ids, id)
	}
	t.cacheMu.Lock()
	if len(t.cache) > 100000 {
		t.cache = map[string][]int32{}
	}
	t.cache[word] = ids
	t.cacheMu.Unlock()
	return ids, nil
}

// symbols splits a pre-token into its characters; one outside the vocabulary becomes its
// <0xXX> byte tokens (byte_fallback), or the unknown token (consecutive ones fused with
// fuse_unk), or nothing when there is no unknown token, as HF's BPE does.
func (t *Tokenizer) symbols(word string) ([]sym, error) {
	syms := make([]sym, 0, len(word))
	for _, r := range word {
		c := string(r)
		if _, ok := t.vocab[c]; ok {
			syms = append(syms, sym{s: c})
			continue
		}
		if t.byteFallback {
			all := true
			var bs []sym
			for i := 0; i < len(c); i++ {
				b := fmt.Sprintf("<0x%02X>", c[i])
				if _, ok := t.vocab[b]; !ok {
					all = false
					break
				}
				bs = append(bs, sym{s: b})
			}
			if all {
				syms = append(syms, bs...)
				continue
			}
		}
		if t.unk < 0 {
			// HF drops it (SmolLM2's byte-level vocabulary lacks byte 0x1D, so "\x1d"
			// encodes to nothing there too).
			continue
		}
		if t.fuseUnk && len(syms) > 0 && syms[len(syms)-1].unk {
			continue
		}
		syms = append(syms, sym{s: c, unk: true})
	}
	return syms, nil
}

// Decode turns ids back into text through the tokenizer's decoder (ids outside the
// vocabulary are skipped); byte sequences that are not valid UTF-8 are kept as they are.
func (t *Tokenizer) Decode(ids []int32) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.inv) || t.inv[id] == "" {
			continue
		}
		toks = append(toks, t.inv[id])
	}
	if t.decode == nil {
		return strings.Join(toks, " ")
	}
	return strings.Join(t.decode(toks), "")
}
