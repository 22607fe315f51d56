package realmodel_test

import (
	"context"
	"os"
	"strings"
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
		// Prompt processing: 128 tokens in one step, best of 3.
		var best time.Duration
		for r := 0; r < 3; r++ {
			kc := pool.NewCache()
			start := time.Now()
			step([]engine.StepSeq{{Cache: kc, Tokens: prompt, Draws: greedy}})
			if d := time.Since(start); r == 0 || d < best {
				best = d
			}
			kc.Release()
		}
		pp := 128 / best.Seconds()
		decode := func(batch, steps int) float64 {
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
			start := time.Now()
			for s := 0; s < steps; s++ {
				step(seqs)
			}
			el := time.Since(start)
			for _, c := range caches {
				c.Release()
			}
			return float64(batch*steps) / el.Seconds()
		}
		b1 := decode(1, 48)
		b16 := decode(16, 8)
		t.Logf("%-5s decode batch 1 %6.1f tok/s, batch 16 %6.1f tok/s, prompt 128 %6.1f tok/s", name, b1, b16, pp)
		pool.Close()
	}
}
