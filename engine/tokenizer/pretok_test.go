package tokenizer

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestSplitBehaviors: every Split behavior, with and without invert, gives the pieces
// HuggingFace tokenizers 0.20.3 gives (pre_tokenize_str on the same input).
func TestSplitBehaviors(t *testing.T) {
	t.Parallel()
	const in = "-the-final--countdown-"
	cases := []struct {
		behavior string
		invert   bool
		want     string // pieces joined by |
	}{
		{"Removed", false, "the|final|countdown"},
		{"Removed", true, "-|-|-|-|-"},
		{"Isolated", false, "-|the|-|final|-|-|countdown|-"},
		{"Isolated", true, "-|the|-|final|-|-|countdown|-"},
		{"MergedWithPrevious", false, "-|the-|final-|-|countdown-"},
		{"MergedWithPrevious", true, "-the|-final|-|-countdown|-"},
		{"MergedWithNext", false, "-the|-final|-|-countdown|-"},
		{"MergedWithNext", true, "-|the-|final-|-|countdown-"},
		{"Contiguous", false, "-|the|-|final|--|countdown|-"},
		{"Contiguous", true, "-|the|-|final|--|countdown|-"},
	}
	for _, c := range cases {
		inv := "false"
		if c.invert {
			inv = "true"
		}
		got := preTokenize(t, `{"type":"Split","pattern":{"String":"-"},"behavior":"`+c.behavior+`","invert":`+inv+`}`, in)
		if got != c.want {
			t.Errorf("%s invert=%v: %q, HF gives %q", c.behavior, c.invert, got, c.want)
		}
	}
	for _, c := range []struct{ json, in, want string }{
		{`{"type":"Digits","individual_digits":false}`, "ab123c45", "ab|123|c|45"},
		{`{"type":"Digits","individual_digits":true}`, "ab123", "ab|1|2|3"},
		{`{"type":"Punctuation"}`, "Hey!! you?..", "Hey|!|!| you|?|.|."},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}`, "Hey you  there", "▁Hey|▁you|▁|▁there"},
		{`{"type":"WhitespaceSplit"}`, " a \t b\n", "a|b"},
	} {
		if got := preTokenize(t, c.json, c.in); got != c.want {
			t.Errorf("%s on %q: %q, HF gives %q", c.json, c.in, got, c.want)
		}
	}
}

func preTokenize(t *testing.T, js, in string) string {
	t.Helper()
	tok, err := Parse([]byte(`{"model":{"type":"BPE","vocab":{},"merges":[]},"pre_tokenizer":` + js + `}`))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := tok.pre(context.Background(), []piece{{in, true}})
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, p := range ps {
		s = append(s, p.s)
	}
	return strings.Join(s, "|")
}

// TestUnsupportedPartsAreNamed: a component this package does not implement is refused
// with its name, never silently skipped.
func TestUnsupportedPartsAreNamed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ field, json, want string }{
		{"pre_tokenizer", `{"type":"BertPreTokenizer"}`, `pre_tokenizer "BertPreTokenizer" is not supported`},
		{"pre_tokenizer", `{"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},{"type":"UnicodeScripts"}]}`, `pretokenizers[1]: pre_tokenizer "UnicodeScripts"`},
		{"pre_tokenizer", `{"type":"Split","pattern":{"String":"x"},"behavior":"Sideways"}`, `split behavior "Sideways"`},
		{"normalizer", `{"type":"Precompiled"}`, `normalizer "Precompiled" is not supported`},
		{"decoder", `{"type":"WordPiece"}`, `decoder "WordPiece" is not supported`},
	} {
		_, err := Parse([]byte(`{"model":{"type":"BPE","vocab":{},"merges":[]},"` + c.field + `":` + c.json + `}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: err %v, want %q", c.field, c.json, err, c.want)
		}
	}
	for _, c := range []struct{ model, want string }{
		{`"type":"Unigram"`, `tokenizer model "Unigram"`},
		{`"type":"BPE","dropout":0.1`, "model.dropout"},
		{`"type":"BPE","unk_token":"<nope>"`, `model.unk_token "<nope>"`},
	} {
		_, err := Parse([]byte(`{"model":{` + c.model + `,"vocab":{"a":0},"merges":[]}}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("model %s: err %v, want %q", c.model, err, c.want)
		}
	}
}

// TestByteFallbackAndUnknown: a character outside the vocabulary becomes its byte
// tokens with byte_fallback, otherwise unk_token (consecutive ones fused with fuse_unk).
func TestByteFallbackAndUnknown(t *testing.T) {
	t.Parallel()
	vocab := `{"<unk>":0,"a":1,"<0xC3>":2,"<0xA9>":3}`
	tok, err := Parse([]byte(`{"model":{"type":"BPE","byte_fallback":true,"unk_token":"<unk>","vocab":` + vocab + `,"merges":[]},
		"decoder":{"type":"Sequence","decoders":[{"type":"ByteFallback"},{"type":"Fuse"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode("aéxy")
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{1, 2, 3, 0, 0}; !slices.Equal(ids, want) {
		t.Errorf("byte fallback: %v, want %v", ids, want)
	}
	if got := tok.Decode(ids); got != "aé<unk><unk>" {
		t.Errorf("Decode = %q", got)
	}
	fused, err := Parse([]byte(`{"model":{"type":"BPE","fuse_unk":true,"unk_token":"<unk>","vocab":` + vocab + `,"merges":[]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := fused.Encode("axya"); !slices.Equal(ids, []int32{1, 0, 1}) {
		t.Errorf("fuse_unk: %v", ids)
	}
}

// TestMaxTokenBytesAcrossPipelines: the bound holds on the whole corpus for every
// reference tokenizer that has one, and is 0 (none) where the pipeline can drop text:
// Whitespace/WhitespaceSplit or Removed splits, Strip or a Regex Replace, lstrip tokens.
func TestMaxTokenBytesAcrossPipelines(t *testing.T) {
	t.Parallel()
	var corpus []string
	readJSON(t, "testdata/corpus.json", &corpus)
	// gpt2 has a "<mask>" that strips the whitespace before it: no bound either.
	want := map[string]bool{"tiny": true, "gpt2": false, "qwen2": true, "llama3": true, "smollm": true,
		"spm_legacy": true, "spm_metaspace": true, "misc_a": false, "misc_b": false}
	for name, bounded := range want {
		tok, err := Load("testdata/tokenizer_" + name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		m := tok.MaxTokenBytes()
		if (m > 0) != bounded {
			t.Errorf("%s: MaxTokenBytes %d, want bounded=%v", name, m, bounded)
			continue
		}
		for _, s := range corpus {
			ids, err := tok.Encode(s)
			if err != nil {
				t.Fatal(err)
			}
			if m > 0 && len(s) > len(ids)*m {
				t.Errorf("%s: %q is %d bytes in %d tokens, more than %d per token", name, s, len(s), len(ids), m)
			}
		}
	}
}
