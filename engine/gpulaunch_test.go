//go:build cuda

package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
)

// TestGPULaunchesPerLayer counts the kernel launches and cuBLAS products of one layer's
// forward and backward pass in training (one sequence) with bfloat16 weights: the
// difference between a two-layer and a one-layer model, with LoRA on every projection
// (a single run's products, on cuBLAS: three launches per projection forward) and with
// LoRA on the unembedding alone (the layers' base work). docs/gpu.md quotes the counts;
// the test pins them, so a change that adds launches to a layer shows here.
func TestGPULaunchesPerLayer(t *testing.T) {
	// Eager: with decode-step graphs a replayed step is one launch of the graph, and the
	// count is of the operations a layer needs (TestGPUGraphLaunchesPerToken counts graphs).
	dev := openGPUGraphs(t, false, false)
	counter, ok := dev.(interface{ Launches() uint64 })
	if !ok {
		t.Fatalf("%T does not count launches", dev)
	}
	count := func(lc LoraConfig, layers int, backward, sample bool) uint64 {
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
		before := counter.Launches()
		if sample {
			// A prompt of 4 tokens, then 7 decoding steps of one row.
			if _, err := m.Sample(context.Background(), &a.W, SampleRequest{Prompt: []int32{1, 2, 3, 9}, NumSamples: 1,
				Params: SampleParams{MaxTokens: 8, Temperature: 0, TopP: 1}}); err != nil {
				t.Fatal(err)
			}
			return counter.Launches() - before
		}
		req := ceRequest([]int32{3, 4, 5, 6, 7, 8, 9, 10, 11})
		req.Backward = backward
		if _, err := m.ForwardBackward(context.Background(), a, req); err != nil {
			t.Fatal(err)
		}
		return counter.Launches() - before
	}
	for _, tc := range []struct {
		name          string
		lc            LoraConfig
		fwd, bwd, smp uint64
	}{
		{"every projection adapted", LoraConfig{Rank: 4, TrainAttn: true, TrainMLP: true, TrainUnembed: true}, 33, 63, 264},
		{"no layer adapted", LoraConfig{Rank: 4, TrainUnembed: true}, 12, 13, 96},
	} {
		fwd := count(tc.lc, 2, false, false) - count(tc.lc, 1, false, false)
		fb := count(tc.lc, 2, true, false) - count(tc.lc, 1, true, false)
		smp := count(tc.lc, 2, false, true) - count(tc.lc, 1, false, true)
		t.Logf("%s: launches per layer: forward %d, backward %d; a sampling request (prefill and 7 decoding steps) %d",
			tc.name, fwd, fb-fwd, smp)
		if fwd != tc.fwd || fb-fwd != tc.bwd || smp != tc.smp {
			t.Errorf("%s: launches per layer: forward %d, backward %d, sampling %d; docs/gpu.md says %d, %d and %d",
				tc.name, fwd, fb-fwd, smp, tc.fwd, tc.bwd, tc.smp)
		}
	}
}

// noOperands is a device with its bfloat16 operands hidden (device.BF16Operands), so the
// engine rounds activations in the products as before them; it keeps attention's
// statistics as the device does.
type noOperands struct {
	Device
	device.StatsKeeper
}

// TestGPUBF16OperandsChangeNoBits: the bfloat16 operands that the norms, attention and
// SwiGLU write are the roundings the products made themselves before, and the fused
// residual adds are Add then RMSNorm, so training (logprobs, and logprobs after an AdamW
// step, which reads the gradients) and sampling give the same bits with and without them.
func TestGPUBF16OperandsChangeNoBits(t *testing.T) {
	dev := openGPU(t, false)
	sk, ok := dev.(device.StatsKeeper)
	if !ok {
		t.Fatalf("%T keeps no attention statistics", dev)
	}
	c := smallConfig("qwen2", true)
	for _, lc := range []LoraConfig{
		{Rank: 4, Seed: 3, TrainAttn: true, TrainMLP: true, TrainUnembed: true},
		{Rank: 4, Seed: 3, TrainMLP: true},
		{Rank: 4, Seed: 3, TrainUnembed: true},
	} {
		run := func(d Device) []float32 {
			m, err := NewModel("t", c, randWeights[float32](c, rand.New(rand.NewPCG(5, 6)), false), nil, OnDevice(d))
			if err != nil {
				t.Fatal(err)
			}
			a, err := m.NewAdapter(lc)
			if err != nil {
				t.Fatal(err)
			}
			var out []float32
			req := ceRequest([]int32{3, 4, 5, 6, 7, 8, 9, 10, 11, 40, 41, 2})
			for step := 0; step < 2; step++ {
				res, err := m.ForwardBackward(context.Background(), a, req)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, res.Outputs[0]["logprobs"].F32...)
				if _, err := m.OptimStep(context.Background(), a, AdamParams{LearningRate: 1e-2, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8}); err != nil {
					t.Fatal(err)
				}
			}
			sr, err := m.Sample(context.Background(), &a.W, SampleRequest{Prompt: []int32{1, 2, 3, 9}, NumSamples: 1,
				Params: SampleParams{MaxTokens: 6, Temperature: 0, TopP: 1}})
			if err != nil {
				t.Fatal(err)
			}
			for _, tok := range sr.Sequences[0].Tokens {
				out = append(out, float32(tok))
			}
			return append(out, sr.Sequences[0].Logprobs...)
		}
		with, without := run(dev), run(noOperands{dev, sk})
		if len(with) != len(without) {
			t.Fatalf("%+v: %d values with bfloat16 operands, %d without", lc, len(with), len(without))
		}
		for i := range with {
			if math.Float32bits(with[i]) != math.Float32bits(without[i]) {
				t.Fatalf("%+v: value %d is %v with bfloat16 operands, %v without", lc, i, with[i], without[i])
			}
		}
	}
}
