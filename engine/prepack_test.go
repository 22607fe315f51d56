package engine

import (
	"context"
	"testing"

	"github.com/tuft-go/tuft/engine/kern"
)

// A CPU device opened with a packing budget (engine.cpu_prepack_bytes) keeps the base
// weights' panels on a training step's products, and trains the same bits as one without:
// the loss of a step and of the step after AdamW applied its gradients.
func TestPrepackedWeightsTrainTheSame(t *testing.T) {
	t.Cleanup(func() { kern.SetPackBudget(0) })
	ctx := context.Background()
	run := func(budget int64) (first, second float64, packed int64) {
		dev, _, err := OpenDevice("cpu", DeviceOptions{CPUPrepackBytes: budget})
		if err != nil {
			t.Fatal(err)
		}
		m := tinyModel(t, OnDevice(dev))
		a, err := m.NewAdapter(LoraConfig{Rank: 8, Alpha: 8, Seed: 3, TrainAttn: true, TrainMLP: true})
		if err != nil {
			t.Fatal(err)
		}
		toks := make([]int32, 301) // ≥ 256 rows: the forward products take the packed GEMM too
		for i := range toks {
			toks[i] = int32((i*7919 + 13) % m.Cfg.VocabSize)
		}
		req := ceRequest(toks)
		r, err := m.ForwardBackward(ctx, a, req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.OptimStep(ctx, a, AdamParams{LearningRate: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}); err != nil {
			t.Fatal(err)
		}
		r2, err := m.ForwardBackward(ctx, a, req)
		if err != nil {
			t.Fatal(err)
		}
		return r.Metrics["loss:sum"], r2.Metrics["loss:sum"], kern.PackedBytes()
	}
	l1, l2, _ := run(0)
	k1, k2, packed := run(1 << 30)
	if kern.Path() != "go" && packed <= 0 {
		t.Fatal("no weight panels kept with a budget")
	}
	if l1 != k1 || l2 != k2 || l1 == l2 {
		t.Fatalf("losses without panels %v, %v; with %v, %v", l1, l2, k1, k2)
	}
}
