package tokenizer

import (
	"context"
	"os"
	"testing"
	"unicode/utf8"
)

var tricky = []string{
	"Hello, world!", "  double  spaces  ", "trailing space ", "\n\n  foo", "it's they're we'll I'M",
	"digits 1234567 and 3.14159", "中文字符 and emoji 🎉🚀", "e\u0301 combining", "tabs\tand\rreturns",
	"<|im_start|>user\nhi<|im_end|>", "", "a", "   ", "ñandú über",
}

func presetTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	b, _, err := Train(TrainSpec{Corpus: "the quick brown fox jumps over the lazy dog the the the quick", Merges: 20, Special: []string{"<|im_start|>", "<|im_end|>"}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	tok := presetTokenizer(t)
	for _, s := range tricky {
		ids, err := tok.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Decode(ids); got != s {
			t.Errorf("%q → %v → %q", s, ids, got)
		}
	}
}

func TestSpecialTokensAndMerges(t *testing.T) {
	t.Parallel()
	tok := presetTokenizer(t)
	ids, _ := tok.Encode("<|im_start|>the<|im_end|>")
	start, _ := tok.TokenID("<|im_start|>")
	end, _ := tok.TokenID("<|im_end|>")
	if len(ids) < 3 || ids[0] != start || ids[len(ids)-1] != end {
		t.Fatalf("special tokens: %v", ids)
	}
	the, _ := tok.Encode("the")
	if len(the) != 1 {
		t.Fatalf("learned merge not applied: %v", the)
	}
	ord, _ := tok.EncodeOrdinary("<|im_start|>")
	if len(ord) < 2 {
		t.Fatalf("ordinary encoding used the special token: %v", ord)
	}
}

func TestQwenStyleSplitPattern(t *testing.T) {
	t.Parallel()
	js := `{"model":{"type":"BPE","vocab":{},"merges":[]},"added_tokens":[],
"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]}}`
	base, _, _ := Train(TrainSpec{Corpus: "x", Merges: 0})
	_ = base
	tok, err := Parse([]byte(js))
	if err == nil {
		// An empty vocabulary and no unk_token: HF drops every character.
		if ids, err := tok.Encode("a"); err != nil || len(ids) != 0 {
			t.Fatalf("empty vocabulary: %v, %v", ids, err)
		}
	} else {
		t.Fatalf("Qwen2 split pattern: %v", err)
	}
	pieces, err := tok.pre(context.Background(), []piece{{s: "Hello  world's 123\n\n"}})
	if err != nil {
		t.Fatal(err)
	}
	var words []string
	for _, p := range pieces {
		words = append(words, tok.byteUnmap(p.s))
	}
	want := []string{"Hello", " ", " world", "'s", " ", "1", "2", "3", "\n\n"}
	if len(words) != len(want) {
		t.Fatalf("split %q", words)
	}
	for i := range want {
		if words[i] != want[i] {
			t.Fatalf("split %q, want %q", words, want)
		}
	}
}

func FuzzRoundTrip(f *testing.F) {
	for _, s := range tricky {
		f.Add(s)
	}
	tok := presetTokenizer(f)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		ids, err := tok.EncodeOrdinary(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Decode(ids); got != s {
			t.Fatalf("%q → %q", s, got)
		}
	})
}

func FuzzParse(f *testing.F) {
	b, _, _ := Train(TrainSpec{Corpus: "abc abc", Merges: 2})
	f.Add(b)
	// The other pipelines: normalizers, every pre-tokenizer, byte fallback, decoders.
	if misc, err := os.ReadFile("testdata/tokenizer_misc_b.json"); err == nil {
		f.Add(misc)
	}
	f.Add([]byte(`{"model":{"type":"BPE","byte_fallback":true,"unk_token":"<unk>","fuse_unk":true,"vocab":{"<unk>":0,"▁":1,"a":2,"<0x41>":3},"merges":[["▁","a"]]},
"normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},
"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},
"decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data)
		if err == nil {
			ids, _ := tok.Encode("hello wörld 12 ▁x<unk>")
			_ = tok.Decode(ids)
			_ = tok.MaxTokenBytes()
		}
	})
}
