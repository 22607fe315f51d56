package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/tuft-go/tuft/engine/kern"
)

// TestLoRAFusedIsTheSeparateCalls: a lone adapter over enough rows runs its LoRA terms
// inside the base products (device.LoraFusedOps) forward and backward, and a training
// step gives the same log-probabilities, loss and gradients bit for bit as the separate
// calls.
func TestLoRAFusedIsTheSeparateCalls(t *testing.T) {
	if p := kern.Path(); p != "avx2" && p != "avx512" {
		t.Skipf("kernel path %s: the fused products run on amd64's packed GEMM only", p)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // products of 300 rows: split by rows, no tile kernel
	rng := rand.New(rand.NewPCG(31, 32))
	c := Config{Arch: "llama", VocabSize: 128, Hidden: 64, Intermediate: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
		RopeTheta: 10000, RMSNormEps: 1e-5, MaxPositions: 512, BOSTokenID: -1, EOSTokenIDs: []int32{127}}
	m, err := NewModel("t", c, randWeights[float32](c, rng, true), nil)
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]int32, 301)
	for i := range toks {
		toks[i] = int32(rng.IntN(c.VocabSize))
	}
	run := func(fuse bool) ([]float32, float64, [][]float32, int64) {
		fuseLoRA = fuse
		defer func() { fuseLoRA = true }()
		a, err := m.NewAdapter(LoraConfig{Rank: 16, Alpha: 8, TrainAttn: true, TrainMLP: true, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		randomizeAdapter(a, rand.New(rand.NewPCG(5, 6))) // B non-zero: the terms count
		calls := fusedCalls.Load()
		out, err := m.ForwardBackward(context.Background(), a, ceRequest(toks))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.AdapterToHost(a); err != nil {
			t.Fatal(err)
		}
		var grads [][]float32
		for _, p := range a.Grad.pairs() {
			grads = append(grads, p.A, p.B)
		}
		return out.Outputs[0]["logprobs"].F32, out.Metrics["loss:sum"], grads, fusedCalls.Load() - calls
	}
	lp0, l0, g0, n0 := run(false)
	lp1, l1, g1, n1 := run(true)
	// Forward: 7 projections a layer; backward: all but layer 0's q, k, v (no dx there).
	if want := int64(c.Layers*7 + (c.Layers-1)*7 + 4); n0 != 0 || n1 != want {
		t.Fatalf("fused calls: %d unfused, %d fused, want 0 and %d", n0, n1, want)
	}
	if math.Float64bits(l0) != math.Float64bits(l1) {
		t.Fatalf("loss %v fused, %v separately", l1, l0)
	}
	for i := range lp0 {
		if math.Float32bits(lp0[i]) != math.Float32bits(lp1[i]) {
			t.Fatalf("logprob %d: %v fused, %v separately", i, lp1[i], lp0[i])
		}
	}
	for i := range g0 {
		for j := range g0[i] {
			if math.Float32bits(g0[i][j]) != math.Float32bits(g1[i][j]) {
				t.Fatalf("gradient %d[%d]: %v fused, %v separately", i, j, g1[i][j], g0[i][j])
			}
		}
	}
}
