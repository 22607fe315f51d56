package openai_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/api/openai"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/tokenizer"
	"github.com/tuft-go/tuft/internal/testenv"
)

// With a Llama-2-style tokenizer a completion's text continues the prompt's, as OpenAI's
// and vLLM's do: its first token keeps the space that decoding the generated tokens on
// their own drops (" Paris" after "The capital is"), so the prompt's text and the
// completion's (echo) make Decode of all the tokens, and a stop string that begins with
// that space ends the text at the first token.
func TestCompletionContinuesThePromptText(t *testing.T) {
	t.Parallel()
	dir := spmModelDir(t)
	m, err := engine.Load(dir, testenv.Model)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := start(t, func(c *config.Config) { c.Models[0].Path = dir }, nil)
	prompt := []int32{40, 41, 42}
	complete := func(body map[string]any) (text, finish string) {
		t.Helper()
		body["model"], body["prompt"], body["max_tokens"] = testenv.Model, prompt, 8
		resp, b := post(t, s, openai.Prefix+"/completions", testenv.KeyA, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d: %s", resp.StatusCode, b)
		}
		var out struct {
			Choices []struct {
				Text         string `json:"text"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &out); err != nil || len(out.Choices) != 1 {
			t.Fatalf("%s: %v", b, err)
		}
		return out.Choices[0].Text, out.Choices[0].FinishReason
	}
	for seed := int64(1); seed <= 60; seed++ {
		req := engine.SampleRequest{Prompt: prompt, NumSamples: 1,
			Params: engine.SampleParams{MaxTokens: 8, Temperature: 1, TopK: -1, TopP: 1, Seed: &seed}}
		res, err := m.Sample(context.Background(), nil, req)
		if err != nil {
			t.Fatal(err)
		}
		toks := res.Sequences[0].Tokens
		if n := len(toks); n > 0 && res.Sequences[0].StopReason == engine.StopReasonStop {
			toks = toks[:n-1] // the end-of-sequence token has no text
		}
		if len(toks) == 0 {
			continue
		}
		first := tokenizer.NewStreamAfter(m.Tok, prompt).Next(toks[0])
		if len(first) < 3 || first[0] != ' ' || first[1] == ' ' || strings.Contains(m.Tok.Decode(toks), first) {
			continue // decoded on its own the text has the space too: this seed shows nothing
		}
		all := m.Tok.Decode(append(append([]int32(nil), prompt...), toks...))
		if got, _ := complete(map[string]any{"seed": seed, "echo": true}); got != all {
			t.Fatalf("seed %d: echo %q, prompt and completion decode to %q", seed, got, all)
		}
		head := m.Tok.Decode(prompt)
		if got, _ := complete(map[string]any{"seed": seed}); head+got != all {
			t.Fatalf("seed %d: prompt %q + completion %q, want %q", seed, head, got, all)
		}
		if got, finish := complete(map[string]any{"seed": seed, "stop": first}); got != "" || finish != "stop" {
			t.Fatalf("seed %d, stop %q: text %q, finish_reason %q; want \"\", stop", seed, first, got, finish)
		}
		return
	}
	t.Fatal("no seed sampled a ▁-prefixed first token")
}
