package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// qloraGradTol bounds how far LoRA gradients on a quantised base move from those on
// the float32 base they were quantised from (relative L2 distance over every adapter
// gradient, first step), about twice what was measured on the tiny preset (q8_0 0.016,
// q4_1 0.32, q4_k 0.17): the base's storage error alone, since the products are exact to
// float32 rounding on the widened base (TestCPUWeightFormatsComputeWithTheWidenedBase).
var qloraGradTol = map[kern.WeightFormat]float64{kern.Q8_0: 0.04, kern.Q4_1: 0.6, kern.Q4_K: 0.35}

// TestQLoRATrainsOnQuantisedBase: LoRA training on a q8_0, q4_1 or q4_k base (QLoRA:
// the base widened per tile, the adapter, its gradients and AdamW state float32)
// lowers the loss over a few steps, and its first gradients are within qloraGradTol
// of the float32 base's.
func TestQLoRATrainsOnQuantisedBase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The tiny preset (rows of 256 and 768: whole Q4_K super-blocks), initialised as a
	// model to be trained is, so its loss is a few nats a token, not a random model's
	// hundreds.
	src := tinyModel(t)
	c, w := src.Cfg, src.W
	req := ceRequest([]int32{1, 5, 9, 3, 30, 12, 7, 44, 2, 17, 60, 33, 8, 21, 40, 11, 6, 50, 29, 3, 14})
	p := AdamParams{LearningRate: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	train := func(f kern.WeightFormat) (losses []float64, grad []float32) {
		m, err := NewModel("q", c, w, src.Tok, OnDevice(device.NewCPUWeights[float32](f)))
		if err != nil {
			t.Fatal(err)
		}
		a, err := m.NewAdapter(LoraConfig{Rank: 4, Seed: 5, TrainAttn: true, TrainMLP: true, TrainUnembed: true})
		if err != nil {
			t.Fatal(err)
		}
		randomizeAdapter(a, rand.New(rand.NewPCG(1, 1)))
		for i := 0; i < 5; i++ {
			r, err := m.ForwardBackward(ctx, a, req)
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, r.Metrics["loss:sum"])
			if i == 0 {
				for _, pr := range a.Grad.pairs() {
					grad = append(append(grad, pr.A...), pr.B...)
				}
			}
			if _, err := m.OptimStep(ctx, a, p); err != nil {
				t.Fatal(err)
			}
		}
		return losses, grad
	}
	_, g32 := train(kern.F32)
	for _, f := range []kern.WeightFormat{kern.Q8_0, kern.Q4_1, kern.Q4_K} {
		losses, g := train(f)
		if !(losses[len(losses)-1] < losses[0]) {
			t.Errorf("%s: loss did not fall: %v", f, losses)
		}
		var diff, norm float64
		for i := range g32 {
			d := float64(g[i] - g32[i])
			diff, norm = diff+d*d, norm+float64(g32[i])*float64(g32[i])
		}
		rel := math.Sqrt(diff / norm)
		t.Logf("%s: losses %.3f → %.3f; first gradients %.4f from the float32 base's (relative L2)", f, losses[0], losses[len(losses)-1], rel)
		if rel > qloraGradTol[f] || math.IsNaN(rel) {
			t.Errorf("%s: gradients %.4f from the float32 base's, over %g", f, rel, qloraGradTol[f])
		}
	}
}
