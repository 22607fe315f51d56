package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestGGUFSentencePieceVocabulary: a "llama" (SentencePiece) vocabulary becomes a BPE
// whose merges follow the scores (the highest-scoring merged piece wins), spaces become
// "▁" with one prepended, characters outside the vocabulary fall back to their bytes, and
// decoding restores the text.
func TestGGUFSentencePieceVocabulary(t *testing.T) {
	src, tj := tinyGGUFSource(t, "llama")
	g := ggufFromModel(t, src, tj)
	var tokens []string
	var scores []float32
	var types []int32
	add := func(s string, score float32, ty int32) {
		tokens, scores, types = append(tokens, s), append(scores, score), append(types, ty)
	}
	add("<unk>", 0, 2)
	add("<s>", 0, 3)
	add("</s>", 0, 3)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, 6)
	}
	for _, c := range []string{"▁", "h", "e", "l", "o", "w", "r", "d"} {
		add(c, -100, 1)
	}
	// Merged pieces: the higher the score, the earlier the merge.
	for i, p := range []string{"ll", "▁h", "he", "llo", "▁he", "▁hello", "or", "▁w", "▁wor", "ld", "▁world"} {
		add(p, float32(-i), 1)
	}
	for len(tokens) < src.Cfg.VocabSize {
		add(fmt.Sprintf("<unused%d>", len(tokens)), -1000, 5)
	}
	setKV(g, "tokenizer.ggml.model", "llama")
	setKV(g, "tokenizer.ggml.tokens", tokens)
	setKV(g, "tokenizer.ggml.token_type", types)
	drop(g, "tokenizer.ggml.merges")
	drop(g, "tokenizer.ggml.pre")
	setKV(g, "tokenizer.ggml.eos_token_id", uint32(2))
	drop(g, "tokenizer.ggml.eot_token_id")
	g.set("tokenizer.ggml.scores", scores)
	g.set("tokenizer.ggml.bos_token_id", uint32(1))
	g.set("tokenizer.ggml.unknown_token_id", uint32(0))
	path := filepath.Join(t.TempDir(), "spm.gguf")
	if err := os.WriteFile(path, g.bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(path, "spm")
	if err != nil {
		t.Fatal(err)
	}
	id := func(s string) int32 { return int32(slices.Index(tokens, s)) }
	ids, err := m.Tok.Encode("hello world<s>hé")
	if err != nil {
		t.Fatal(err)
	}
	want := []int32{id("▁hello"), id("▁world"), id("<s>"), id("▁h"), id("<0xC3>"), id("<0xA9>")}
	if !slices.Equal(ids, want) {
		t.Errorf("Encode = %v, want %v", ids, want)
	}
	if got := m.Tok.Decode(ids); got != "hello world<s> hé" {
		t.Errorf("Decode = %q", got)
	}
	if m.Cfg.BOSTokenID != 1 || !slices.Equal(m.Cfg.EOSTokenIDs, []int32{2}) {
		t.Errorf("bos %d eos %v", m.Cfg.BOSTokenID, m.Cfg.EOSTokenIDs)
	}
}
