package engine

import (
	"context"
	"fmt"
	"math"

	"github.com/tuft-go/tuft/engine/device"
)

// OptimStep applies one AdamW step (torch.optim.AdamW semantics, with optional global
// gradient-norm clipping as torch.nn.utils.clip_grad_norm_) and zeroes the gradients.
//
// It is all or nothing: if the gradients, or any updated weight or moment, would not be
// finite, nothing changes (the weights, the moments and the step count stay as they were)
// and the error says why. Non-finite gradients are then discarded, since no step could
// ever use them.
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
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		for _, t := range g.tensors() {
			d.Upload(t, make([]float32, t.Len()))
		}
		return nil, Inputf("optim_step: the accumulated gradients are not finite (norm %g); nothing was applied and they were discarded: "+
			"run forward_backward again (lower the learning rate or check the loss inputs)", norm)
	}
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
	nonFinite := func() error {
		return Inputf("optim_step with learning_rate %g, weight_decay %g, eps %g would make the adapter's weights or moments non-finite; "+
			"nothing was applied (lower the learning rate or weight decay)", p.LearningRate, p.WeightDecay, p.Eps)
	}
	if af, ok := d.(device.AdamWFinite[float32]); ok {
		// The device checks every update before it writes any: no copy of the state.
		if !af.AdamWIfFinite(w.tensors(), g.tensors(), mm.tensors(), vv.tensors(), s) {
			if err := d.Err(); err != nil {
				return nil, fmt.Errorf("optim_step on %s: %w", d.Name(), err)
			}
			return nil, nonFinite()
		}
		a.Step++
		return map[string]float64{"grad_norm:max": norm, "learning_rate:max": p.LearningRate}, nil
	}
	// Elsewhere the device updates in place, so the state is kept aside first and put back
	// if the step made anything non-finite (the adapter is small next to the base model).
	state := append(append(w.tensors(), mm.tensors()...), vv.tensors()...)
	grads := g.tensors()
	saved := make([]device.Tensor[float32], len(state))
	keptGrads := make([]device.Tensor[float32], len(grads))
	for i, t := range state {
		saved[i] = d.Alloc(t.Len())
	}
	for i, t := range grads {
		keptGrads[i] = d.Alloc(t.Len())
	}
	defer func() {
		for _, t := range append(saved, keptGrads...) {
			d.Free(t)
		}
	}()
	for i, t := range state {
		d.Copy(saved[i], t)
	}
	for i, t := range grads {
		d.Copy(keptGrads[i], t)
	}
	for i := range w.list {
		d.AdamW(w.list[i].a, g.list[i].a, mm.list[i].a, vv.list[i].a, s)
		d.AdamW(w.list[i].b, g.list[i].b, mm.list[i].b, vv.list[i].b, s)
	}
	if err := d.Err(); err != nil {
		return nil, fmt.Errorf("optim_step on %s: %w", d.Name(), err)
	}
	if sq := d.SumSquares(state); math.IsNaN(sq) || math.IsInf(sq, 0) {
		for i, t := range state {
			d.Copy(t, saved[i])
		}
		for i, t := range grads {
			d.Copy(t, keptGrads[i])
		}
		if err := d.Err(); err != nil {
			return nil, fmt.Errorf("optim_step on %s: restore after a non-finite step: %w", d.Name(), err)
		}
		return nil, nonFinite()
	}
	a.Step++
	return map[string]float64{"grad_norm:max": norm, "learning_rate:max": p.LearningRate}, nil
}
