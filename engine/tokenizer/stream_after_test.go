package tokenizer

import (
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// continuation is the text a Stream primed with ids[:at] gives for ids[at:] (NextText
// and Flush), and what Next gives.
func continuation(tok *Tokenizer, ids []int32, at int) (shown, raw string) {
	text, next := NewStreamAfter(tok, ids[:at]), NewStreamAfter(tok, ids[:at])
	var a, b strings.Builder
	for _, id := range ids[at:] {
		a.WriteString(text.NextText(id))
		b.WriteString(next.Next(id))
	}
	a.WriteString(text.Flush())
	return a.String(), b.String()
}

// For every fixture and every split of the corpus's encodings (and of random ids), a
// Stream primed with the first part gives the bytes by which Decode(all) extends
// Decode(first part): the prompt's text and the continuation's make the whole.
func TestStreamAfterIsTheContinuation(t *testing.T) {
	t.Parallel()
	var corpus []string
	readJSON(t, "testdata/corpus.json", &corpus)
	for name, tok := range fixtureTokenizers(t) {
		t.Run(name, func(t *testing.T) {
			var seqs [][]int32
			for _, text := range corpus {
				ids, err := tok.EncodeOrdinary(text)
				if err != nil {
					t.Fatal(err)
				}
				seqs = append(seqs, ids)
			}
			rng := rand.New(rand.NewSource(2))
			for range 100 {
				ids := make([]int32, 1+rng.Intn(30))
				for i := range ids {
					ids[i] = int32(rng.Intn(tok.VocabSize() + 3))
				}
				seqs = append(seqs, ids)
			}
			checked := 0
			for _, ids := range seqs {
				for at := 0; at <= len(ids); at++ {
					whole, head := tok.Decode(ids), tok.Decode(ids[:at])
					if !strings.HasPrefix(whole, head) {
						continue // a decoder that rewrites the prompt's end (a trailing Strip)
					}
					shown, raw := continuation(tok, ids, at)
					if raw != whole[len(head):] || (utf8.ValidString(head) && shown != raw) {
						t.Fatalf("%v after %v: Next gave %q, NextText %q; the sequence adds %q", ids[at:], ids[:at], raw, shown, whole[len(head):])
					}
					checked++
				}
			}
			if checked == 0 {
				t.Fatal("no split checked")
			}
		})
	}
}

// A byte-level tokenizer's continuation reads the same whether or not the Stream is
// primed with the prompt (SmolLM2, Qwen, Llama 3 are unchanged); a SentencePiece one's
// first token keeps its space.
func TestStreamAfterPrompt(t *testing.T) {
	t.Parallel()
	var corpus []string
	readJSON(t, "testdata/corpus.json", &corpus)
	for name, tok := range fixtureTokenizers(t) {
		if strings.HasPrefix(name, "spm") {
			continue
		}
		for _, text := range corpus {
			ids, err := tok.EncodeOrdinary(text)
			if err != nil {
				t.Fatal(err)
			}
			for at := 0; at <= len(ids); at++ {
				if !utf8.ValidString(tok.Decode(ids[:at])) {
					continue // a character split across the prompt's end
				}
				alone := NewStream(tok)
				var want strings.Builder
				for _, id := range ids[at:] {
					want.WriteString(alone.NextText(id))
				}
				want.WriteString(alone.Flush())
				if got, _ := continuation(tok, ids, at); got != want.String() {
					t.Fatalf("%s: %q split at %d: primed %q, unprimed %q", name, text, at, got, want.String())
				}
			}
		}
	}
	for _, name := range []string{"spm_legacy", "spm_metaspace"} {
		tok, err := Load(filepath.Join("testdata", "tokenizer_"+name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		prompt, err := tok.EncodeOrdinary("Hello")
		if err != nil {
			t.Fatal(err)
		}
		all, err := tok.EncodeOrdinary("Hello world")
		if err != nil {
			t.Fatal(err)
		}
		if len(all) <= len(prompt) {
			t.Fatalf("%s: %v", name, all)
		}
		gen := all[len(prompt):]
		if got, _ := continuation(tok, all, len(prompt)); got != " world" {
			t.Errorf("%s: %v after the prompt reads %q, want \" world\"", name, gen, got)
		}
		if got, _ := continuation(tok, all, 0); got != "Hello world" {
			t.Errorf("%s: unprimed %q", name, got)
		}
		s := NewStreamAfter(tok, prompt)
		if p := s.Peek(gen[0]); !strings.HasPrefix(p, " ") {
			t.Errorf("%s: Peek after the prompt %q, want a leading space", name, p)
		}
	}
}
