package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// randomizeAdapter gives every LoRA pair non-zero A and B, so each adapter changes the
// model differently.
func randomizeAdapter(a *Adapter, rng *rand.Rand) {
	for _, p := range a.W.pairs() {
		for i := range p.A {
			p.A[i] = float32(rng.NormFloat64() * 0.1)
		}
		for i := range p.B {
			p.B[i] = float32(rng.NormFloat64() * 0.1)
		}
	}
}

func closeRel(a, b, tol float64) bool {
	return math.Abs(a-b) <= tol*(1+math.Max(math.Abs(a), math.Abs(b)))
}

// Datums of several adapters (different ranks, losses and targets, a forward-only
// request and the base model among them) in one batch give what separate calls give:
// the same log-probabilities, losses and accumulated gradients.
func TestMultiLoRABatchEqualsSeparatePasses(t *testing.T) {
	checkMultiLoRA(t, tinyModel(t), 1e-5, 1e-4)
}

// multiLoRACfgs and multiLoRALosses are the adapters and losses of a batch of several
// adapters (different ranks and targets, the unembedding adapted; the fourth runs
// forward only in checkMultiLoRA and TestArenaOutputsAreWrittenWhole).
var (
	multiLoRACfgs = []LoraConfig{
		{Rank: 4, TrainAttn: true, TrainMLP: true, Seed: 1},
		{Rank: 2, Alpha: 8, TrainAttn: true, Seed: 2},
		{Rank: 8, TrainMLP: true, TrainUnembed: true, Seed: 3},
		{Rank: 4, TrainAttn: true, TrainMLP: true, Seed: 4},
	}
	multiLoRALosses = []string{"cross_entropy", "ppo", "importance_sampling", "cross_entropy"}
)

// checkMultiLoRA runs the multi-LoRA batch check on m: logprobs and losses within
// tolOut, gradients within tolGrad (relative).
func checkMultiLoRA(t *testing.T, m *Model, tolOut, tolGrad float64) {
	c := m.Cfg
	rng := rand.New(rand.NewPCG(7, 8))
	cfgs, losses := multiLoRACfgs, multiLoRALosses
	var batched, separate []*Adapter
	var reqs []ForwardRequest
	for i, lc := range cfgs {
		a, err := m.NewAdapter(lc)
		if err != nil {
			t.Fatal(err)
		}
		randomizeAdapter(a, rand.New(rand.NewPCG(uint64(i), 1)))
		b, _ := m.NewAdapter(lc)
		for j, p := range a.W.pairs() {
			copy(b.W.pairs()[j].A, p.A)
			copy(b.W.pairs()[j].B, p.B)
		}
		batched, separate = append(batched, a), append(separate, b)
		req := lossRequest(losses[i], c, rng, 1)
		if i == 3 {
			req.Backward = false // forward only, beside training requests
		}
		reqs = append(reqs, req)
	}
	items := make([]BatchItem, 0, len(reqs)+1)
	for i, r := range reqs {
		items = append(items, BatchItem{Adapter: batched[i], Request: r})
	}
	base := lossRequest("cross_entropy", c, rng, 1)
	base.Backward = false
	items = append(items, BatchItem{Request: base})

	got, errs := m.ForwardBackwardBatch(context.Background(), items)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
	}
	for i, it := range items {
		a := it.Adapter
		if a != nil {
			a = separate[i]
		}
		want, err := m.ForwardBackward(context.Background(), a, it.Request)
		if err != nil {
			t.Fatal(err)
		}
		if !closeRel(got[i].Metrics["loss:sum"], want.Metrics["loss:sum"], tolOut) {
			t.Errorf("item %d loss %v, separately %v", i, got[i].Metrics["loss:sum"], want.Metrics["loss:sum"])
		}
		for d := range want.Outputs {
			g, w := got[i].Outputs[d]["logprobs"].F32, want.Outputs[d]["logprobs"].F32
			for j := range w {
				if !closeRel(float64(g[j]), float64(w[j]), tolOut) {
					t.Fatalf("item %d datum %d logprob %d: %v, separately %v", i, d, j, g[j], w[j])
				}
			}
		}
		if it.Adapter == nil {
			continue
		}
		for _, a := range []*Adapter{batched[i], separate[i]} {
			if err := m.AdapterToHost(a); err != nil {
				t.Fatal(err)
			}
		}
		gp, sp := batched[i].Grad.pairs(), separate[i].Grad.pairs()
		for j := range sp {
			for _, pair := range [][2][]float32{{gp[j].A, sp[j].A}, {gp[j].B, sp[j].B}} {
				for x := range pair[1] {
					if !closeRel(float64(pair[0][x]), float64(pair[1][x]), tolGrad) {
						t.Fatalf("item %d gradient %d[%d]: %v, separately %v", i, j, x, pair[0][x], pair[1][x])
					}
				}
			}
		}
	}
}

// An invalid request in a batch fails alone and leaves its adapter untouched.
func TestBatchIsolatesABadRequest(t *testing.T) {
	m := tinyModel(t)
	rng := rand.New(rand.NewPCG(1, 2))
	good, _ := m.NewAdapter(LoraConfig{Rank: 2, TrainAttn: true})
	bad, _ := m.NewAdapter(LoraConfig{Rank: 2, TrainAttn: true})
	badReq := lossRequest("cross_entropy", m.Cfg, rng, 1)
	badReq.LossFn = "no_such_loss"
	_, errs := m.ForwardBackwardBatch(context.Background(), []BatchItem{
		{Adapter: good, Request: lossRequest("cross_entropy", m.Cfg, rng, 1)},
		{Adapter: bad, Request: badReq},
	})
	if errs[0] != nil || errs[1] == nil {
		t.Fatalf("errors %v", errs)
	}
	for _, p := range bad.Grad.pairs() {
		for _, v := range append(append([]float32(nil), p.A...), p.B...) {
			if v != 0 {
				t.Fatal("the failed request left gradients behind")
			}
		}
	}
	nonzero := false
	for _, p := range good.Grad.pairs() {
		for _, v := range p.B {
			nonzero = nonzero || v != 0
		}
	}
	if !nonzero {
		t.Fatal("the good request accumulated no gradient")
	}
}

// Cancelling the context applies nothing to any adapter.
func TestBatchCancelledAppliesNothing(t *testing.T) {
	m := tinyModel(t)
	a, _ := m.NewAdapter(LoraConfig{Rank: 2, TrainAttn: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, errs := m.ForwardBackwardBatch(ctx, []BatchItem{{Adapter: a, Request: lossRequest("cross_entropy", m.Cfg, rand.New(rand.NewPCG(3, 4)), 1)}})
	if errs[0] == nil {
		t.Fatal("a cancelled batch succeeded")
	}
	for _, p := range a.Grad.pairs() {
		for _, v := range p.B {
			if v != 0 {
				t.Fatal("a cancelled batch left gradients")
			}
		}
	}
}

// BenchmarkBatchVsSeparate compares four adapters' requests in one batch with four
// separate calls, on the tiny preset.
func BenchmarkBatchVsSeparate(b *testing.B) {
	m := tinyModel(b)
	rng := rand.New(rand.NewPCG(5, 6))
	var items []BatchItem
	for i := 0; i < 4; i++ {
		a, _ := m.NewAdapter(LoraConfig{Rank: 8, TrainAttn: true, TrainMLP: true, Seed: int64(i)})
		items = append(items, BatchItem{Adapter: a, Request: lossRequest("cross_entropy", m.Cfg, rng, 1)})
	}
	b.Run("batch", func(b *testing.B) {
		for b.Loop() {
			m.ForwardBackwardBatch(context.Background(), items)
		}
	})
	b.Run("separate", func(b *testing.B) {
		for b.Loop() {
			for _, it := range items {
				m.ForwardBackward(context.Background(), it.Adapter, it.Request)
			}
		}
	})
}
