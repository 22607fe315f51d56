package engine

import (
	"context"
	"slices"
	"testing"
)

// IgnoreEOS (the SDK's stop=[]): a sequence that stops at an EOS token without it runs on
// to max_tokens with it, identical up to that token (same seed, same draws).
func TestIgnoreEOSRunsPastEOS(t *testing.T) {
	m := tinyModel(t)
	eos := map[int32]bool{}
	for _, e := range m.Cfg.EOSTokenIDs {
		eos[e] = true
	}
	prompt := []int32{40, 41, 42, 43}
	for s := int64(0); s < 20; s++ {
		seed := s
		p := SampleParams{MaxTokens: 24, Temperature: 4, TopK: -1, TopP: 1, Seed: &seed}
		with, err := m.Sample(context.Background(), nil, SampleRequest{Prompt: prompt, NumSamples: 32, Params: p})
		if err != nil {
			t.Fatal(err)
		}
		p.IgnoreEOS = true
		without, err := m.Sample(context.Background(), nil, SampleRequest{Prompt: prompt, NumSamples: 32, Params: p})
		if err != nil {
			t.Fatal(err)
		}
		for i, sq := range with.Sequences {
			last := sq.Tokens[len(sq.Tokens)-1]
			if sq.StopReason != StopReasonStop || !eos[last] || len(sq.Tokens) == p.MaxTokens {
				continue
			}
			got := without.Sequences[i]
			if got.StopReason != StopReasonLength || len(got.Tokens) != p.MaxTokens || !slices.Equal(got.Tokens[:len(sq.Tokens)], sq.Tokens) {
				t.Fatalf("seed %d sample %d: stopped at EOS after %d tokens; with IgnoreEOS: %s after %d tokens %v",
					seed, i, len(sq.Tokens), got.StopReason, len(got.Tokens), got.Tokens)
			}
			for _, o := range without.Sequences {
				if o.StopReason != StopReasonLength {
					t.Fatalf("seed %d: a sequence stopped (%s) although nothing may stop it", seed, o.StopReason)
				}
			}
			return
		}
	}
	t.Fatal("no sample stopped at EOS in 20 seeds: the test cannot show IgnoreEOS")
}
