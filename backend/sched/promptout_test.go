package sched

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/tuft-go/tuft/engine"
)

// samePromptOutputs compares the newer sampling outputs (top-k of sampled tokens, target
// prompt logprobs, alternative prompt tokens) with the engine's alone.
func samePromptOutputs(t *testing.T, what string, want, got engine.SampleResult) {
	t.Helper()
	close := func(a, b float32) bool { return math.Abs(float64(a-b)) <= 1e-4 }
	for i, w := range want.Sequences {
		g := got.Sequences[i]
		if len(g.TopK) != len(w.TopK) {
			t.Fatalf("%s sample %d: %d top-k rows, alone %d", what, i, len(g.TopK), len(w.TopK))
		}
		for j := range w.TopK {
			if len(g.TopK[j]) != len(w.TopK[j]) {
				t.Fatalf("%s sample %d token %d: top-k %v, alone %v", what, i, j, g.TopK[j], w.TopK[j])
			}
			for k, e := range w.TopK[j] {
				if g.TopK[j][k].Token != e.Token || !close(g.TopK[j][k].Logprob, e.Logprob) {
					t.Fatalf("%s sample %d token %d: top-k %v, alone %v", what, i, j, g.TopK[j], w.TopK[j])
				}
			}
		}
	}
	if (got.PromptTargetLogprobs == nil) != (want.PromptTargetLogprobs == nil) {
		t.Fatalf("%s: target logprobs %v, alone %v", what, got.PromptTargetLogprobs, want.PromptTargetLogprobs)
	}
	if w := want.PromptTargetLogprobs; w != nil {
		g := got.PromptTargetLogprobs
		if g.Rows != w.Rows || g.Cols != w.Cols || len(g.Logprobs) != len(w.Logprobs) || fmt.Sprint(g.RowStarts, g.ColIdx) != fmt.Sprint(w.RowStarts, w.ColIdx) {
			t.Fatalf("%s: target logprobs layout %+v, alone %+v", what, g, w)
		}
		for x := range w.Logprobs {
			if !close(g.Logprobs[x], w.Logprobs[x]) {
				t.Fatalf("%s: target logprob %d: %v, alone %v", what, x, g.Logprobs[x], w.Logprobs[x])
			}
		}
	}
	if (got.PromptAltTokens == nil) != (want.PromptAltTokens == nil) {
		t.Fatalf("%s: alternative tokens %v, alone %v", what, got.PromptAltTokens, want.PromptAltTokens)
	}
	if w := want.PromptAltTokens; w != nil {
		g := got.PromptAltTokens
		if g.K != w.K || fmt.Sprint(g.Tokens) != fmt.Sprint(w.Tokens) {
			t.Fatalf("%s: alternative tokens %v, alone %v", what, g.Tokens, w.Tokens)
		}
		for x := range w.Logprobs {
			if !close(g.Logprobs[x], w.Logprobs[x]) {
				t.Fatalf("%s: alternative token logprob %d: %v, alone %v", what, x, g.Logprobs[x], w.Logprobs[x])
			}
		}
	}
}

// withOutputs asks req for the newer sampling outputs: top-k of sampled tokens, target
// logprobs of the next prompt token and of a fixed id from row first on (CSR when
// sparse), and k alternative tokens (when k > 0).
func withOutputs(req engine.SampleRequest, topk, first, k int, sparse bool) engine.SampleRequest {
	req.TopKSampleLogprobs, req.PromptAltTokensK = topk, k
	rows := len(req.Prompt) - 1
	t := &engine.PromptTargets{Rows: rows, Cols: 2}
	if sparse {
		t.RowStarts = []int{0}
	}
	for r := 0; r < rows; r++ {
		cells := []int32{-1, -1}
		if r >= first {
			cells = []int32{req.Prompt[r+1], int32(7 + r%5)}
		}
		if !sparse {
			t.IDs = append(t.IDs, cells...)
			continue
		}
		for c, id := range cells {
			if id >= 0 {
				t.IDs, t.ColIdx = append(t.IDs, id), append(t.ColIdx, c)
			}
		}
		t.RowStarts = append(t.RowStarts, len(t.IDs))
	}
	req.PromptTargets = t
	return req
}

// The newer sampling outputs through the scheduler: requests of several tenants and
// adapters with prompts longer than a prefill chunk (so their outputs come from several
// steps), run together, give what the engine gives each alone (which
// engine.TestSampleOutputsMatchFullSoftmax checks against the full softmax).
func TestPromptOutputsInTheScheduler(t *testing.T) {
	l, m := schedLocal(t, Config{StepTokens: 40, PrefillChunk: 16, MaxBatchSeqs: 64})
	lws := map[string]*engine.LoraWeights[float32]{"": nil, "a": addAdapter(t, l, "a", 1), "b": addAdapter(t, l, "b", 2)}
	var cases []sampleCase
	loras := []string{"", "a", "b"}
	for i := 0; i < 6; i++ {
		req := seeded(prompt(20+7*i, i), 1+i%2, 5, []float64{0, 0.8}[i%2], int64(40+i))
		req = withOutputs(req, 1+i, i*3, i%3, i%2 == 1)
		if i == 3 {
			req.PromptLogprobs = true
		}
		cases = append(cases, sampleCase{tenant: fmt.Sprint("t", i%3), lora: loras[i%3], req: req})
	}
	cases = append(cases, sampleCase{tenant: "t0", lora: "a", req: seeded(prompt(30, 9), 2, 6, 1, 3)}) // none asked
	res, errs := runConcurrently(t, l, cases)
	for i, c := range cases {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		sameAsAlone(t, fmt.Sprint("request ", i), m, lws[c.lora], c.req, res[i])
	}
	if st := &l.s.stats; st.maxRows.Load() < 4 {
		t.Fatalf("at most %d sequences ran in one step: the requests were not batched", st.maxRows.Load())
	}
	if r := res[len(res)-1]; r.PromptTargetLogprobs != nil || r.PromptAltTokens != nil || r.Sequences[0].TopK != nil {
		t.Fatal("outputs nobody asked for")
	}
}

// A prompt whose prefix is in the prefix cache still gets its prompt outputs: target
// logprobs from a later row on are served from the cache up to that row (whole blocks)
// and computed after it; alternative tokens (which start at row 0) bypass the cache; both
// equal the engine's alone.
func TestPromptOutputsWithThePrefixCache(t *testing.T) {
	l, m := schedLocal(t, Config{PrefixCacheEntries: 4})
	lw := addAdapter(t, l, "a", 4)
	ctx := context.Background()
	p := prompt(45, 9) // two whole blocks and 13 tokens
	if _, err := l.Sample(ctx, "tiny", "a", seeded(p, 1, 3, 1, 1)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		req   engine.SampleRequest
		hit   int
		first int
	}{
		{"targets from row 36", withOutputs(seeded(p, 2, 4, 0.7, 2), 3, 36, 0, false), 32, 36},
		{"sparse targets from row 20", withOutputs(seeded(p, 1, 4, 0.7, 3), 0, 20, 0, true), 16, 20},
		{"targets from row 0", withOutputs(seeded(p, 1, 4, 0.7, 4), 0, 0, 0, false), 0, 0},
		{"alternative tokens", withOutputs(seeded(p, 1, 4, 0.7, 5), 2, 40, 2, false), 0, 40},
	} {
		got, err := l.Sample(ctx, "tiny", "a", tc.req)
		if err != nil {
			t.Fatal(err)
		}
		if got.PromptCacheHitTokens != tc.hit {
			t.Fatalf("%s: %d cache-hit tokens, want %d", tc.name, got.PromptCacheHitTokens, tc.hit)
		}
		sameAsAlone(t, tc.name, m, lw, tc.req, got)
		nonzero := 0
		for _, lp := range got.PromptTargetLogprobs.Logprobs {
			if lp != 0 {
				nonzero++
			}
		}
		if want := 2 * (len(p) - 1 - tc.first); nonzero != want {
			t.Fatalf("%s: %d target logprobs computed, want %d", tc.name, nonzero, want)
		}
	}
}
