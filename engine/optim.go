package engine

import (
	"context"
	"fmt"
	"math"

	"github.com/tuft-go/tuft/engine/device"
)

// OptimStep applies one AdamW step (torch.optim.AdamW semantics, with optional global
// gradient-norm clipping as torch.nn.utils.clip_grad_norm_) and zeroes the gradients.
func (m *Model) OptimStep(ctx context.Context, a *Adapter, p AdamParams) (map[string]float64, error) {
	if a == nil {
		return nil, Inputf("optim_step needs an adapter")
	}
	if oc := a.Config.Optimizer.Normalize(); oc.Type != OptimizerAdamW {
		return nil, Inputf("optim_step: this adapter trains with %s; adam_params do not apply (send optimizer_params of type %q)", oc, oc.Type)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := m.dev
	w, g, mm, vv := loraOn(d, &a.W), loraOn(d, &a.Grad), loraOn(d, &a.M), loraOn(d, &a.V)
	norm := math.Sqrt(d.SumSquares(g.tensors()))
	clip := float32(1)
	if p.GradClipNorm > 0 {
		if coef := p.GradClipNorm / (norm + 1e-6); coef < 1 {
			clip = float32(coef)
		}
	}
	t := float64(a.Step + 1)
	bc1 := 1 - math.Pow(p.Beta1, t)
	bc2 := 1 - math.Pow(p.Beta2, t)
	s := &device.AdamStep{Clip: clip, Decay: float32(1 - p.LearningRate*p.WeightDecay), B1: float32(p.Beta1), B2: float32(p.Beta2),
		StepSize: float32(p.LearningRate / bc1), BC2Sqrt: float32(math.Sqrt(bc2)), Eps: float32(p.Eps)}
	for i := range w.list {
		d.AdamW(w.list[i].a, g.list[i].a, mm.list[i].a, vv.list[i].a, s)
		d.AdamW(w.list[i].b, g.list[i].b, mm.list[i].b, vv.list[i].b, s)
	}
	if err := d.Err(); err != nil {
		return nil, fmt.Errorf("optim_step on %s: %w", d.Name(), err)
	}
	a.Step++
	return map[string]float64{"grad_norm:max": norm, "learning_rate:max": p.LearningRate}, nil
}
