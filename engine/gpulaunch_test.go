//go:build cuda

package engine

import (
	"context"
	"math/rand/v2"
	"testing"
)

// TestGPULaunchesPerLayer counts the kernel launches and cuBLAS products of one layer's
// forward and backward pass in training (one sequence) with bfloat16 weights: the
// difference between a two-layer and a one-layer model, with LoRA on every projection
// (a single run's products, on cuBLAS: three launches per projection forward) and with
// LoRA on the unembedding alone (the layers' base work). docs/gpu.md quotes the counts;
// the test pins them, so a change that adds launches to a layer shows here.
func TestGPULaunchesPerLayer(t *testing.T) {
	dev := openGPU(t, false)
	counter, ok := dev.(interface{ Launches() uint64 })
	if !ok {
		t.Fatalf("%T does not count launches", dev)
	}
	count := func(lc LoraConfig, layers int, backward bool) uint64 {
		c := smallConfig("llama", false)
		c.Layers = layers
		m, err := NewModel("t", c, randWeights[float32](c, rand.New(rand.NewPCG(1, 2)), false), nil, OnDevice(dev))
		if err != nil {
			t.Fatal(err)
		}
		a, err := m.NewAdapter(lc)
		if err != nil {
			t.Fatal(err)
		}
		req := ceRequest([]int32{3, 4, 5, 6, 7, 8, 9, 10, 11})
		req.Backward = backward
		before := counter.Launches()
		if _, err := m.ForwardBackward(context.Background(), a, req); err != nil {
			t.Fatal(err)
		}
		return counter.Launches() - before
	}
	for _, tc := range []struct {
		name     string
		lc       LoraConfig
		fwd, bwd uint64
	}{
		{"every projection adapted", LoraConfig{Rank: 4, TrainAttn: true, TrainMLP: true, TrainUnembed: true}, 33, 83},
		{"no layer adapted", LoraConfig{Rank: 4, TrainUnembed: true}, 12, 20},
	} {
		fwd := count(tc.lc, 2, false) - count(tc.lc, 1, false)
		fb := count(tc.lc, 2, true) - count(tc.lc, 1, true)
		t.Logf("%s: launches per layer: forward %d, backward %d", tc.name, fwd, fb-fwd)
		if fwd != tc.fwd || fb-fwd != tc.bwd {
			t.Errorf("%s: launches per layer: forward %d, backward %d; docs/gpu.md says %d and %d", tc.name, fwd, fb-fwd, tc.fwd, tc.bwd)
		}
	}
}
