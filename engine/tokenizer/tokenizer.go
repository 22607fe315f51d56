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

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// GPT2Pattern is the ByteLevel pre-tokenizer's split pattern (use_regex: true).
const GPT2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

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

// Tokenizer is a loaded byte-level BPE tokenizer. It is safe for concurrent use.
type Tokenizer struct {
	vocab    map[string]int32
	inv      []string
	ranks    map[[2]string]int
	added    []AddedToken // longest content first
	addedID  map[int32]bool
	splits   []*regexp2.Regexp
	cacheMu  sync.Mutex
	cache    map[string][]int32
	byteEnc  [256]rune
	byteDec  map[rune]byte
	prefixSp bool
	nfc      bool // normalizer NFC, applied to the text between added tokens
	// ignoreMerges (model.ignore_merges, as in Llama 3): a pre-token that is itself in
	// the vocabulary becomes that token without applying merges.
	ignoreMerges bool

	boundOnce     sync.Once
	maxTokenBytes int // MaxTokenBytes, computed once
}

type rawTokenizer struct {
	AddedTokens  []AddedToken    `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        struct {
		Type         string           `json:"type"`
		Vocab        map[string]int32 `json:"vocab"`
		Merges       json.RawMessage  `json:"merges"`
		IgnoreMerges bool             `json:"ignore_merges"`
	} `json:"model"`
}

type preTok struct {
	Type           string          `json:"type"`
	AddPrefixSpace bool            `json:"add_prefix_space"`
	UseRegex       *bool           `json:"use_regex"`
	Pattern        json.RawMessage `json:"pattern"`
	Behavior       string          `json:"behavior"`
	Invert         bool            `json:"invert"`
	PreTokenizers  []preTok        `json:"pretokenizers"`
}

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
		return nil, fmt.Errorf("tokenizer model %q is not supported (byte-level BPE only)", r.Model.Type)
	}
	if len(r.Normalizer) > 0 && string(r.Normalizer) != "null" {
		var n struct{ Type string }
		_ = json.Unmarshal(r.Normalizer, &n)
		if n.Type != "NFC" {
			return nil, fmt.Errorf("normalizer %q is not supported", n.Type)
		}
	}
	t := &Tokenizer{vocab: r.Model.Vocab, ranks: map[[2]string]int{}, addedID: map[int32]bool{}, cache: map[string][]int32{}, byteDec: map[rune]byte{}}
	t.nfc = len(r.Normalizer) > 0 && string(r.Normalizer) != "null"
	t.ignoreMerges = r.Model.IgnoreMerges
	if t.vocab == nil {
		t.vocab = map[string]int32{}
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
	if err := t.parsePre(r.PreTokenizer); err != nil {
		return nil, err
	}
	return t, nil
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

func (t *Tokenizer) parsePre(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var p preTok
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	var walk func(p preTok) error
	walk = func(p preTok) error {
		switch p.Type {
		case "Sequence":
			for _, c := range p.PreTokenizers {
				if err := walk(c); err != nil {
					return err
				}
			}
		case "ByteLevel":
			t.prefixSp = t.prefixSp || p.AddPrefixSpace
			if p.UseRegex == nil || *p.UseRegex {
				t.splits = append(t.splits, regexp2.MustCompile(GPT2Pattern, regexp2.Unicode))
			}
		case "Split":
			var pat struct{ Regex, String string }
			if err := json.Unmarshal(p.Pattern, &pat); err != nil {
				return fmt.Errorf("pre_tokenizer Split pattern: %w", err)
			}
			if p.Invert || (p.Behavior != "Isolated" && p.Behavior != "") {
				return fmt.Errorf("pre_tokenizer Split with behavior %q invert %v is not supported", p.Behavior, p.Invert)
			}
			expr := pat.Regex
			if expr == "" {
				expr = regexp2.Escape(pat.String)
			}
			re, err := regexp2.Compile(expr, regexp2.Unicode)
			if err != nil {
				return fmt.Errorf("pre_tokenizer Split pattern %q: %w", expr, err)
			}
			t.splits = append(t.splits, re)
		case "Digits", "Punctuation", "Whitespace", "Metaspace":
			return fmt.Errorf("pre_tokenizer %s is not supported", p.Type)
		default:
			return fmt.Errorf("pre_tokenizer %q is not supported", p.Type)
		}
		return nil
	}
	return walk(p)
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
		if t.nfc {
			seg = norm.NFC.String(seg)
		}
		room := -1
		if maxTokens > 0 {
			room = maxTokens - len(out)
		}
		ids, err := t.encodeSegment(ctx, seg, room)
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

// encodeSegment encodes text without added tokens; room ≥ 0 bounds its tokens
// (ErrTooManyTokens past it), and it stops once ctx ends.
func (t *Tokenizer) encodeSegment(ctx context.Context, s string, room int) ([]int32, error) {
	if s == "" {
		return nil, nil
	}
	words := []string{s}
	for _, re := range t.splits {
		var next []string
		for _, w := range words {
			ws, err := splitIsolated(ctx, re, w)
			if err != nil {
				return nil, err
			}
			next = append(next, ws...)
		}
		words = next
	}
	var out []int32
	for i, w := range words {
		if i%1024 == 1023 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		ids, err := t.bpe(w)
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

// splitIsolated splits s into the regex's matches and the text between them.
func splitIsolated(ctx context.Context, re *regexp2.Regexp, s string) ([]string, error) {
	rs := []rune(s)
	var out []string
	last := 0
	m, err := re.FindRunesMatch(rs)
	for n := 1; m != nil && err == nil; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if m.Index > last {
			out = append(out, string(rs[last:m.Index]))
		}
		if m.Length > 0 {
			out = append(out, string(rs[m.Index:m.Index+m.Length]))
		}
		last = m.Index + m.Length
		m, err = re.FindNextMatch(m)
	}
	if err != nil {
		return nil, fmt.Errorf("pre-tokenize: %w", err)
	}
	if last < len(rs) {
		out = append(out, string(rs[last:]))
	}
	return out, nil
}

// bpe encodes one pre-token.
func (t *Tokenizer) bpe(word string) ([]int32, error) {
	t.cacheMu.Lock()
	if ids, ok := t.cache[word]; ok {
		t.cacheMu.Unlock()
		return ids, nil
	}
	t.cacheMu.Unlock()
	syms := make([]string, 0, len(word))
	for i := 0; i < len(word); i++ {
		syms = append(syms, string(t.byteEnc[word[i]]))
	}
	if t.ignoreMerges {
		if _, ok := t.vocab[strings.Join(syms, "")]; ok {
			syms = []string{strings.Join(syms, "")}
		}
	}
	for len(syms) > 1 {
		best, at := -1, -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := t.ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		// Merging the leftmost best pair one at a time equals HF's left-to-right
		// non-overlapping merge of every occurrence: the pair stays the best until done.
		out := append(syms[:at:at], syms[at]+syms[at+1])
		out = append(out, syms[at+2:]...)
		syms = out
	}
	ids := make([]int32, 0, len(syms))
	for _, s := range syms {
		id, ok := t.vocab[s]
		if !ok {
			return nil, fmt.Errorf("token %q is not in the vocabulary (incomplete byte-level vocab?)", s)
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

// Decode turns ids back into text; byte sequences that are not valid UTF-8 are kept
// as they are.
func (t *Tokenizer) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.inv) {
			continue
		}
		s := t.inv[id]
		if t.addedID[id] {
			b.WriteString(s)
			continue
		}
		for _, r := range s {
			if by, ok := t.byteDec[r]; ok {
				b.WriteByte(by)
			} else {
				b.WriteRune(r)
			}
		}
	}
	return b.String()
}
