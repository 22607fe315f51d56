package openai_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/api/openai"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/internal/testenv"
)

// spmModelDir is the tiny preset with a Llama-2-style tokenizer (▁ for spaces, byte
// fallback, the first token's space stripped) in place of its byte-level one.
func spmModelDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "tiny-spm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := testenv.TinyDir(t)
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		from := filepath.Join(src, e.Name())
		if e.Name() == "tokenizer.json" {
			from = "../../engine/tokenizer/testdata/tokenizer_spm_legacy.json"
		}
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A streamed completion from a model with a SentencePiece tokenizer is what the sampled
// tokens add to the prompt's text: each token keeps the space a lone decoding of it drops.
func TestStreamedTextWithSentencePieceTokenizer(t *testing.T) {
	t.Parallel()
	dir := spmModelDir(t)
	m, err := engine.Load(dir, testenv.Model)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := start(t, func(c *config.Config) { c.Models[0].Path = dir }, nil)
	prompt := []int32{40, 41, 42}
	for seed := int64(1); seed <= 20; seed++ {
		req := engine.SampleRequest{Prompt: prompt, NumSamples: 1,
			Params: engine.SampleParams{MaxTokens: 24, Temperature: 1, TopK: -1, TopP: 1, Seed: &seed}}
		res, err := m.Sample(context.Background(), nil, req)
		if err != nil {
			t.Fatal(err)
		}
		toks := res.Sequences[0].Tokens
		if n := len(toks); n > 0 && res.Sequences[0].StopReason == engine.StopReasonStop {
			toks = toks[:n-1] // the end-of-sequence token has no text
		}
		// The text continues the prompt's (the first token's space kept too).
		want := strings.TrimPrefix(m.Tok.Decode(append(append([]int32(nil), prompt...), toks...)), m.Tok.Decode(prompt))
		var lone strings.Builder
		for _, id := range toks {
			lone.WriteString(m.Tok.Decode([]int32{id}))
		}
		if lone.String() == want {
			continue // no ▁-prefixed token after the first: this seed shows nothing
		}
		resp := open(t, context.Background(), s, openai.Prefix+"/completions", testenv.KeyA, map[string]any{"model": testenv.Model,
			"prompt": prompt, "max_tokens": 24, "seed": seed, "stream": true})
		defer resp.Body.Close()
		var got strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			d, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || d == "[DONE]" {
				continue
			}
			var c struct {
				Choices []struct {
					Text string `json:"text"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(d), &c); err != nil {
				t.Fatalf("chunk %q: %v", d, err)
			}
			for _, ch := range c.Choices {
				got.WriteString(ch.Text)
			}
		}
		if got.String() != want {
			t.Fatalf("seed %d: streamed %q, the sequence decodes to %q (lone tokens: %q)", seed, got.String(), want, lone.String())
		}
		return
	}
	t.Fatal("no seed sampled a ▁-prefixed token after the first")
}
