package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// TestArenaOutputsAreWrittenWhole: the buffers a training pass takes uncleared
// (allocOut, tempOut) are written whole by their producers before anything reads them.
// With every such buffer filled with NaN first, a batch of several adapters (different
// ranks and targets, the unembedding adapted, a forward-only request and the base model
// among them) gives the same log-probabilities, losses and gradients bit for bit; a
// producer that left part of its output unwritten would carry a NaN into them.
func TestArenaOutputsAreWrittenWhole(t *testing.T) {
	m := tinyModel(t)
	c := m.Cfg
	cfgs, losses := multiLoRACfgs, multiLoRALosses
	run := func(poison bool) ([]float32, []float64, [][]float32) {
		rng := rand.New(rand.NewPCG(7, 8))
		var items []BatchItem
		var adapters []*Adapter
		for i, lc := range cfgs {
			a, err := m.NewAdapter(lc)
			if err != nil {
				t.Fatal(err)
			}
			randomizeAdapter(a, rand.New(rand.NewPCG(uint64(i), 1)))
			req := lossRequest(losses[i], c, rng, 1)
			req.Backward = i != 3
			items = append(items, BatchItem{Adapter: a, Request: req})
			adapters = append(adapters, a)
		}
		base := lossRequest("cross_entropy", c, rng, 1)
		base.Backward = false
		items = append(items, BatchItem{Request: base})
		arenaPoison = poison
		defer func() { arenaPoison = false }()
		got, errs := m.ForwardBackwardBatch(context.Background(), items)
		var lps []float32
		var ls []float64
		for i, err := range errs {
			if err != nil {
				t.Fatalf("item %d: %v", i, err)
			}
			ls = append(ls, got[i].Metrics["loss:sum"])
			for _, o := range got[i].Outputs {
				lps = append(lps, o["logprobs"].F32...)
			}
		}
		var grads [][]float32
		for _, a := range adapters {
			if err := m.AdapterToHost(a); err != nil {
				t.Fatal(err)
			}
			for _, p := range a.Grad.pairs() {
				grads = append(grads, p.A, p.B)
			}
		}
		return lps, ls, grads
	}
	lp0, l0, g0 := run(false)
	lp1, l1, g1 := run(true)
	for i := range lp0 {
		if math.Float32bits(lp0[i]) != math.Float32bits(lp1[i]) {
			t.Fatalf("logprob %d: %v with poisoned buffers, %v without", i, lp1[i], lp0[i])
		}
	}
	for i := range l0 {
		if math.Float64bits(l0[i]) != math.Float64bits(l1[i]) {
			t.Fatalf("item %d loss: %v with poisoned buffers, %v without", i, l1[i], l0[i])
		}
	}
	nonzero := false
	for i := range g0 {
		for j := range g0[i] {
			if math.Float32bits(g0[i][j]) != math.Float32bits(g1[i][j]) {
				t.Fatalf("gradient %d[%d]: %v with poisoned buffers, %v without", i, j, g1[i][j], g0[i][j])
			}
			nonzero = nonzero || g0[i][j] != 0
		}
	}
	if !nonzero || len(lp0) == 0 {
		t.Fatal("the batch computed no gradients or log-probabilities: the check would pass vacuously")
	}
}
