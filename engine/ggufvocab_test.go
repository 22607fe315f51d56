package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tuft-go/tuft/engine/gguf"
	"github.com/tuft-go/tuft/engine/tokenizer"
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

// TestGGUFVocabularyMatchesHuggingFace: a byte-level vocabulary stored as llama.cpp stores
// it (tokens, token types, merges, tokenizer.ggml.pre) becomes a tokenizer that encodes
// the tokenizer package's corpus exactly as HuggingFace tokenizers does with the
// tokenizer.json that pre names (fixtures from tools/tokref).
func TestGGUFVocabularyMatchesHuggingFace(t *testing.T) {
	for fixture, pre := range map[string]string{"smollm": "smollm", "llama3": "llama3", "qwen2": "qwen2"} {
		t.Run(pre, func(t *testing.T) {
			var tj struct {
				Added []struct {
					Content string `json:"content"`
				} `json:"added_tokens"`
				Model struct {
					Vocab  map[string]int32 `json:"vocab"`
					Merges [][2]string      `json:"merges"`
				} `json:"model"`
			}
			readJSONFile(t, "tokenizer/testdata/tokenizer_"+fixture+".json", &tj)
			tokens := make([]string, len(tj.Model.Vocab))
			types := make([]int32, len(tokens))
			for s, id := range tj.Model.Vocab {
				tokens[id], types[id] = s, 1
			}
			for _, a := range tj.Added {
				types[tj.Model.Vocab[a.Content]] = 3
			}
			merges := make([]string, len(tj.Model.Merges))
			for i, m := range tj.Model.Merges {
				merges[i] = m[0] + " " + m[1]
			}
			g := &testGGUF{}
			g.set("tokenizer.ggml.model", "gpt2")
			g.set("tokenizer.ggml.pre", pre)
			g.set("tokenizer.ggml.tokens", tokens)
			g.set("tokenizer.ggml.token_type", types)
			g.set("tokenizer.ggml.merges", merges)
			b := g.bytes()
			f, err := gguf.Read(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			doc, _, err := ggufTokenizer(f, "llama")
			if err != nil {
				t.Fatal(err)
			}
			tok, err := tokenizer.Parse(doc)
			if err != nil {
				t.Fatal(err)
			}
			var ref struct {
				Cases []struct {
					Text string  `json:"text"`
					IDs  []int32 `json:"ids"`
				} `json:"cases"`
			}
			readJSONFile(t, "tokenizer/testdata/ref_"+fixture+".json", &ref)
			for _, c := range ref.Cases {
				ids, err := tok.Encode(c.Text)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(ids, c.IDs) {
					t.Errorf("Encode(%q)\n  got  %v\n  want %v (HF)", c.Text, ids, c.IDs)
				}
			}
		})
	}
}

func readJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
