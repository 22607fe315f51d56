package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"syscall"
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
	c0 := cpuTime()
	for i := 0; i < b.N; i++ {
		step()
	}
	// CPU seconds too: on a shared machine they move less than wall time.
	b.ReportMetric((cpuTime()-c0)/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
}

// TestZeroWeightRowsAddNoGradient checks the in-place loss gradient (the log-probabilities
// overwritten by dL/dlogits on the host): rows whose weights are all zero get no
// gradient, so the gradients of two requests with complementary weights sum to that of
// the request with every weight.
func TestZeroWeightRowsAddNoGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	c := smallConfig("llama", false)
	w := randWeights[float64](c, rng, true)
	lw := randomAdapter64(c, rng)
	rope := newRope(c, c.MaxPositions)
	n := 9
	toks := make([]int32, n)
	tt := make([]int64, n)
	for i := range toks {
		toks[i], tt[i] = int32(rng.IntN(c.VocabSize)), int64(rng.IntN(c.VocabSize))
	}
	grad := func(keep func(i int) bool) LoraWeights[float64] {
		wts := make([]float32, n)
		for i := range wts {
			if keep(i) {
				wts[i] = 1
			}
		}
		req := ForwardRequest{LossFn: "cross_entropy", Backward: true, Data: []Datum{{Tokens: toks, LossInputs: map[string]Tensor{
			"target_tokens": {DType: Int64, Shape: []int{n}, I64: tt}, "weights": {DType: Float32, Shape: []int{n}, F32: wts}}}}}
		g := zeroLoraLike(lw)
		if _, err := forwardBackward(context.Background(), c, w, rope, lw, &g, req); err != nil {
			t.Fatal(err)
		}
		return g
	}
	even, odd, all := grad(func(i int) bool { return i%2 == 0 }), grad(func(i int) bool { return i%2 == 1 }), grad(func(int) bool { return true })
	e, o, a := even.pairs(), odd.pairs(), all.pairs()
	for i := range a {
		for j := range a[i].B {
			if d := math.Abs(e[i].B[j] + o[i].B[j] - a[i].B[j]); d > 1e-9*math.Max(1, math.Abs(a[i].B[j])) {
				t.Fatalf("pair %d B[%d]: even %v + odd %v, all %v", i, j, e[i].B[j], o[i].B[j], a[i].B[j])
			}
		}
	}
}

// cpuTime is this process's user and system CPU time in seconds.
func cpuTime() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
