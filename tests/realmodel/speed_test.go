package realmodel_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tuft-go/tuft/engine"
)

// modelAt loads the GGUF named by TUFT_SMOLLM2_GGUF on a CPU storing its base weights in
// format f (the caller drops it when done: every format holds its own copy).
func modelAt(t *testing.T, f engine.WeightFormat) *engine.Model {
	t.Helper()
	path := os.Getenv("TUFT_SMOLLM2_GGUF")
	if path == "" {
		t.Skip("TUFT_SMOLLM2_GGUF is not set (tests/realmodel/run.sh sets it)")
	}
	d, _, err := engine.OpenDevice("cpu", engine.DeviceOptions{CPUWeightFormat: f})
	if err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(path, "smollm2", engine.OnDevice(d))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// cpuTime is the CPU time this process has used, every thread.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rate is what a timed run did: tokens per wall second and per CPU second (on a shared
// machine the second varies less).
type rate struct{ wall, cpu float64 }

// TestDecodeSpeedPerWeightFormat measures, for each CPU weight format, decoding at batch
// 1 and 16 and a 128-token prompt, on SmolLM2-135M. Only with TUFT_REALMODEL_SPEED set
// (TUFT_REALMODEL_FORMATS: a comma-separated subset); it fails nothing, it reports.
func TestDecodeSpeedPerWeightFormat(t *testing.T) {
	if os.Getenv("TUFT_REALMODEL_SPEED") == "" {
		t.Skip("TUFT_REALMODEL_SPEED is not set")
	}
	formats := "f32,bf16,q8_0,q4_1"
	if s := os.Getenv("TUFT_REALMODEL_FORMATS"); s != "" {
		formats = s
	}
	ctx := context.Background()
	for _, name := range strings.Split(formats, ",") {
		f, err := engine.ParseWeightFormat(name)
		if err != nil {
			t.Fatal(err)
		}
		m := modelAt(t, f)
		pool, err := m.NewKVPool(256)
		if err != nil {
			t.Fatal(err)
		}
		prompt := make([]int32, 128)
		for i := range prompt {
			prompt[i] = int32(100 + i*37%4000)
		}
		greedy := []engine.Draw{{Temperature: 0, TopP: 1}}
		step := func(seqs []engine.StepSeq) {
			if _, err := m.DecodeStep(ctx, seqs); err != nil {
				t.Fatal(err)
			}
		}
		// Prompt processing: 128 tokens in one step, 3 times.
		start, c0 := time.Now(), cpuTime()
		for r := 0; r < 3; r++ {
			kc := pool.NewCache()
			step([]engine.StepSeq{{Cache: kc, Tokens: prompt, Draws: greedy}})
			kc.Release()
		}
		pp := rate{3 * 128 / time.Since(start).Seconds(), 3 * 128 / (cpuTime() - c0).Seconds()}
		decode := func(batch, steps int) rate {
			caches := make([]*engine.KVCache[float32], batch)
			seqs := make([]engine.StepSeq, batch)
			for i := range caches {
				caches[i] = pool.NewCache()
				seqs[i] = engine.StepSeq{Cache: caches[i], Tokens: prompt[i : i+8], Draws: greedy}
			}
			step(seqs)
			for i := range seqs {
				seqs[i].Tokens = []int32{int32(200 + i)}
			}
			step(seqs) // warm
			start, c0 := time.Now(), cpuTime()
			for s := 0; s < steps; s++ {
				step(seqs)
			}
			n := float64(batch * steps)
			r := rate{n / time.Since(start).Seconds(), n / (cpuTime() - c0).Seconds()}
			for _, c := range caches {
				c.Release()
			}
			return r
		}
		b1 := decode(1, 48)
		b16 := decode(16, 8)
		tr := trainRate(t, m, prompt)
		t.Logf("%-5s tok/s (tok/cpu-s): decode batch 1 %5.1f (%5.1f), batch 16 %5.1f (%5.1f), prompt 128 %5.1f (%5.1f), LoRA train 128 %5.1f (%5.1f)",
			name, b1.wall, b1.cpu, b16.wall, b16.cpu, pp.wall, pp.cpu, tr.wall, tr.cpu)
		pool.Close()
	}
}

// trainRate times forward_backward (cross-entropy, a rank-8 LoRA on every projection) on
// a 128-token datum, 3 times after one warm-up: QLoRA when the base is quantised.
func trainRate(t *testing.T, m *engine.Model, toks []int32) rate {
	t.Helper()
	a, err := m.NewAdapter(engine.LoraConfig{Rank: 8, Alpha: 16, Seed: 1, TrainAttn: true, TrainMLP: true})
	if err != nil {
		t.Fatal(err)
	}
	n := len(toks) - 1
	tt := make([]int64, n)
	wt := make([]float32, n)
	for i := range tt {
		tt[i], wt[i] = int64(toks[i+1]), 1
	}
	req := engine.ForwardRequest{LossFn: "cross_entropy", Backward: true, Data: []engine.Datum{{Tokens: toks[:n],
		LossInputs: map[string]engine.Tensor{"target_tokens": {DType: engine.Int64, Shape: []int{n}, I64: tt},
			"weights": {DType: engine.Float32, Shape: []int{n}, F32: wt}}}}}
	ctx := context.Background()
	if _, err := m.ForwardBackward(ctx, a, req); err != nil {
		t.Fatal(err)
	}
	start, c0 := time.Now(), cpuTime()
	for i := 0; i < 3; i++ {
		if _, err := m.ForwardBackward(ctx, a, req); err != nil {
			t.Fatal(err)
		}
	}
	return rate{float64(3*n) / time.Since(start).Seconds(), float64(3*n) / (cpuTime() - c0).Seconds()}
}
