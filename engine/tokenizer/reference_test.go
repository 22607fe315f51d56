package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// refFixture is written by tools/tokref/reference.py from HuggingFace tokenizers.
type refFixture struct {
	Tokenizer string `json:"tokenizer"`
	File      string `json:"file"`
	Cases     []struct {
		Text        string  `json:"text"`
		IDs         []int32 `json:"ids"`
		OrdinaryIDs []int32 `json:"ordinary_ids"`
		Decoded     string  `json:"decoded"`
		OrdDecoded  *string `json:"ordinary_decoded"`
	} `json:"cases"`
}

// TestHuggingFaceReference compares Encode, EncodeOrdinary and Decode with HuggingFace
// tokenizers on testdata/corpus.json for every testdata/ref_*.json fixture.
func TestHuggingFaceReference(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("testdata/ref_*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 4 {
		t.Fatalf("expected at least 4 reference fixtures, found %v", paths)
	}
	var corpus []string
	readJSON(t, "testdata/corpus.json", &corpus)
	for _, p := range paths {
		var fx refFixture
		readJSON(t, p, &fx)
		t.Run(fx.Tokenizer, func(t *testing.T) {
			tok, err := Load(filepath.Join("testdata", fx.File))
			if err != nil {
				t.Fatal(err)
			}
			if len(fx.Cases) != len(corpus) {
				t.Errorf("%d cases, corpus has %d strings: regenerate the fixtures", len(fx.Cases), len(corpus))
			}
			for i, c := range fx.Cases {
				if i < len(corpus) && corpus[i] != c.Text {
					t.Errorf("case %d text %q differs from corpus %q: regenerate the fixtures", i, c.Text, corpus[i])
				}
				ids, err := tok.Encode(c.Text)
				if err != nil {
					t.Errorf("Encode(%q): %v", c.Text, err)
					continue
				}
				if !slices.Equal(ids, c.IDs) {
					t.Errorf("Encode(%q)\n  got  %v\n  want %v (HF)", c.Text, ids, c.IDs)
				}
				ord, err := tok.EncodeOrdinary(c.Text)
				if err != nil {
					t.Errorf("EncodeOrdinary(%q): %v", c.Text, err)
				} else if !slices.Equal(ord, c.OrdinaryIDs) {
					t.Errorf("EncodeOrdinary(%q)\n  got  %v\n  want %v (HF)", c.Text, ord, c.OrdinaryIDs)
				}
				if got := tok.Decode(c.IDs); got != c.Decoded {
					t.Errorf("Decode(%v) = %q, HF gives %q", c.IDs, got, c.Decoded)
				}
				// Lossless round trip except where HF itself is lossy (NFC, lstrip).
				if c.Decoded == c.Text {
					if got := tok.Decode(ids); got != c.Text {
						t.Errorf("Decode(Encode(%q)) = %q", c.Text, got)
					}
				}
				if c.OrdDecoded == nil {
					t.Errorf("case %d has no ordinary_decoded: regenerate the fixtures", i)
				} else if got := tok.Decode(c.OrdinaryIDs); got != *c.OrdDecoded {
					t.Errorf("Decode(%v) = %q, HF gives %q", c.OrdinaryIDs, got, *c.OrdDecoded)
				}
			}
		})
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestAddedTokenIDsLikeHuggingFace: tokenizers ignores an added token's "id" field on
// load. Expected ids from tokenizers 0.20.3 on this file: <x> 3 (the vocabulary's entry
// count), b 1 (its vocabulary id), <y> 4.
func TestAddedTokenIDsLikeHuggingFace(t *testing.T) {
	t.Parallel()
	const doc = `{"added_tokens":[
	 {"id":9,"content":"<x>","special":true},
	 {"id":7,"content":"b","special":true},
	 {"id":2,"content":"<y>","special":true}],
	 "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},
	 "model":{"type":"BPE","vocab":{"a":0,"b":1,"c":5},"merges":[]}}`
	tok, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode("a<x>cb<y>")
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{0, 3, 5, 1, 4}; !slices.Equal(ids, want) {
		t.Errorf("Encode = %v, want %v", ids, want)
	}
	// Without a decoder HF joins the tokens with spaces (tokenizers 0.20.3 gives this).
	if got := tok.Decode(ids); got != "a <x> c b <y>" {
		t.Errorf("Decode = %q", got)
	}
	for s, want := range map[string]int32{"<x>": 3, "b": 1, "<y>": 4} {
		if id, ok := tok.TokenID(s); !ok || id != want {
			t.Errorf("TokenID(%q) = %d, %v; want %d", s, id, ok, want)
		}
	}
}
