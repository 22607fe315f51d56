package tokenizer

import (
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
)

// checkStream feeds ids through a Stream and checks, after every token, that what Next
// returned so far is Decode of the prefix, that NextText's is that less an incomplete
// trailing character (and with Flush, all of it), and that Peek foretold Next.
func checkStream(t *testing.T, tok *Tokenizer, ids []int32) {
	t.Helper()
	raw, text := NewStream(tok), NewStream(tok)
	var got, shown strings.Builder
	for i, id := range ids {
		peek := raw.Peek(id)
		d := raw.Next(id)
		if d != peek {
			t.Fatalf("%v: Peek(%d) = %q, Next gave %q", ids[:i+1], id, peek, d)
		}
		got.WriteString(d)
		shown.WriteString(text.NextText(id))
		want := tok.Decode(ids[:i+1])
		if got.String() != want {
			t.Fatalf("after %v the deltas make %q, Decode gives %q", ids[:i+1], got.String(), want)
		}
		if w := want[:completeUTF8(want)]; shown.String() != w {
			t.Fatalf("after %v NextText made %q, want %q", ids[:i+1], shown.String(), w)
		}
	}
	shown.WriteString(text.Flush())
	if want := tok.Decode(ids); shown.String() != want {
		t.Fatalf("NextText and Flush made %q, Decode gives %q", shown.String(), want)
	}
}

func fixtureTokenizers(t *testing.T) map[string]*Tokenizer {
	paths, err := filepath.Glob("testdata/tokenizer_*.json")
	if err != nil || len(paths) < 4 {
		t.Fatalf("tokenizer fixtures: %v %v", paths, err)
	}
	out := map[string]*Tokenizer{}
	for _, p := range paths {
		tok, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "tokenizer_"), ".json")] = tok
	}
	return out
}

// Streaming the corpus's encodings (with and without special tokens) and random token
// sequences (byte-fallback and special tokens included) through every fixture gives,
// at every prefix, exactly Decode of that prefix.
func TestStreamMatchesDecodeOfEveryPrefix(t *testing.T) {
	t.Parallel()
	var corpus []string
	readJSON(t, "testdata/corpus.json", &corpus)
	for name, tok := range fixtureTokenizers(t) {
		t.Run(name, func(t *testing.T) {
			for _, text := range corpus {
				for _, enc := range []func(string) ([]int32, error){tok.Encode, tok.EncodeOrdinary} {
					ids, err := enc(text)
					if err != nil {
						t.Fatal(err)
					}
					checkStream(t, tok, ids)
				}
			}
			rng := rand.New(rand.NewSource(1))
			for range 300 {
				ids := make([]int32, 1+rng.Intn(40))
				for i := range ids {
					// A few ids outside the vocabulary, which decode to nothing.
					ids[i] = int32(rng.Intn(tok.VocabSize() + 3))
				}
				checkStream(t, tok, ids)
			}
		})
	}
}

// With a Llama-2-style tokenizer a lone "▁world" decodes to "world": the stream gives
// it its space, and holds a character of byte-fallback tokens until it is whole.
func TestStreamKeepsSentencePieceSpaces(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"spm_legacy", "spm_metaspace"} {
		tok, err := Load(filepath.Join("testdata", "tokenizer_"+name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := tok.EncodeOrdinary("Hello world, the end")
		if err != nil {
			t.Fatal(err)
		}
		var lone, streamed strings.Builder
		s := NewStream(tok)
		for _, id := range ids {
			lone.WriteString(tok.Decode([]int32{id}))
			streamed.WriteString(s.NextText(id))
		}
		if streamed.String() != "Hello world, the end" {
			t.Errorf("%s: streamed %q", name, streamed.String())
		}
		if lone.String() == streamed.String() {
			t.Errorf("%s: lone tokens decode to %q too: the test shows nothing", name, lone.String())
		}
		if name != "spm_legacy" {
			continue // its decoder has no ByteFallback: "<0xE2>" is text
		}
		// "€" is three byte-fallback tokens.
		var bytes []int32
		for _, b := range []string{"<0xE2>", "<0x82>", "<0xAC>"} {
			id, ok := tok.TokenID(b)
			if !ok {
				t.Fatalf("%s: no %s", name, b)
			}
			bytes = append(bytes, id)
		}
		s = NewStream(tok)
		var got []string
		for _, id := range append(ids[:2:2], bytes...) {
			got = append(got, s.NextText(id))
		}
		if want := []string{"Hello", " world", "", "", "€"}; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s: NextText gave %q, want %q", name, got, want)
		}
	}
}

// A Stream's window stays short however long the sequence: each token costs the same.
func TestStreamWindowStaysShort(t *testing.T) {
	t.Parallel()
	tok, err := Load(filepath.Join("testdata", "tokenizer_spm_legacy.json"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.EncodeOrdinary(strings.Repeat("Hello world,  spaces   and €uro ", 200))
	if err != nil {
		t.Fatal(err)
	}
	sp, _ := tok.TokenID("▁")
	oov := int32(tok.VocabSize() + 1)
	for range 100 {
		ids = append(ids, sp, oov)
	}
	s := NewStream(tok)
	for _, id := range ids {
		s.Next(id)
		if len(s.ids) > streamScan+1 {
			t.Fatalf("window of %d tokens", len(s.ids))
		}
	}
}

func FuzzStream(f *testing.F) {
	f.Add([]byte("Hello world"), uint8(0))
	f.Add([]byte{0xe2, 0x82, 0xac, ' ', 'a'}, uint8(1))
	toks := map[uint8]*Tokenizer{}
	for i, name := range []string{"spm_legacy", "spm_metaspace", "smollm"} {
		tok, err := Load(filepath.Join("testdata", "tokenizer_"+name+".json"))
		if err != nil {
			f.Fatal(err)
		}
		toks[uint8(i)] = tok
	}
	f.Fuzz(func(t *testing.T, b []byte, which uint8) {
		tok := toks[which%3]
		// The bytes pick token ids, two bytes each.
		var ids []int32
		for i := 0; i+1 < len(b) && len(ids) < 64; i += 2 {
			ids = append(ids, int32(int(b[i])<<8|int(b[i+1]))%int32(tok.VocabSize()+2))
		}
		checkStream(t, tok, ids)
	})
}

// BenchmarkStreamNext: the cost of a token, against decoding it alone.
func BenchmarkStreamNext(b *testing.B) {
	tok, err := Load(filepath.Join("testdata", "tokenizer_spm_legacy.json"))
	if err != nil {
		b.Fatal(err)
	}
	ids, err := tok.EncodeOrdinary(strings.Repeat("Hello world,  spaces   and €uro ", 100))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("stream", func(b *testing.B) {
		s := NewStream(tok)
		for i := 0; b.Loop(); i++ {
			s.NextText(ids[i%len(ids)])
		}
	})
	b.Run("lone", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			tok.Decode(ids[i%len(ids) : i%len(ids)+1])
		}
	})
}
