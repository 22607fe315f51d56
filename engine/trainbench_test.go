package engine

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
)

// benchModel is the smollm2-135m-shape preset, written once per test binary: training
// benchmarks profile one step of it (go test ./engine/ -run - -bench TrainStep
// -cpuprofile cpu.out; TUFT_BENCH_TOKENS picks the datum length, 512 by default).
var benchModel = sync.OnceValues(func() (*Model, error) {
	dir, err := os.MkdirTemp("", "tuft-trainbench")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := WritePreset("smollm2-135m-shape", dir); err != nil {
		return nil, err
	}
	return Load(dir, "bench")
})

// BenchmarkTrainStep is one training step as `tuft-bench engine` times it: forward and
// backward of summed cross-entropy over one datum, then AdamW on a rank-16 adapter on
// every projection.
func BenchmarkTrainStep(b *testing.B) {
	m, err := benchModel()
	if err != nil {
		b.Fatal(err)
	}
	n := 512
	if s := os.Getenv("TUFT_BENCH_TOKENS"); s != "" {
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	a, err := m.NewAdapter(LoraConfig{Rank: 16, Alpha: 16, TrainAttn: true, TrainMLP: true})
	if err != nil {
		b.Fatal(err)
	}
	toks := make([]int32, n+1)
	for i := range toks {
		toks[i] = int32((i*7919 + 13) % m.Cfg.VocabSize)
	}
	targets := make([]int64, n)
	for i := range targets {
		targets[i] = int64(toks[i+1])
	}
	req := ForwardRequest{LossFn: "cross_entropy", Backward: true, Data: []Datum{{
		Tokens:     toks[:n],
		LossInputs: map[string]Tensor{"target_tokens": {DType: Int64, Shape: []int{n}, I64: targets}},
	}}}
	adam := AdamParams{LearningRate: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	ctx := context.Background()
	step := func() {
		if _, err := m.ForwardBackward(ctx, a, req); err != nil {
			b.Fatal(err)
		}
		if _, err := m.OptimStep(ctx, a, adam); err != nil {
			b.Fatal(err)
		}
	}
	step() // warm-up
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		step()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
}
