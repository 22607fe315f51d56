package engine

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestAdamWIsAllOrNothing checks OptimStep's guarantee on the CPU, whose update checks
// every result before it writes any (device.AdamWFinite): a step that would make a moment
// non-finite (a gradient whose square overflows float32) changes nothing, gradients
// included, and the adapter then steps normally.
func TestAdamWIsAllOrNothing(t *testing.T) {
	m := tinyModel(t)
	a, _ := m.NewAdapter(LoraConfig{Rank: 2, Seed: 5, TrainAttn: true, TrainMLP: true})
	ctx := context.Background()
	p := AdamParams{LearningRate: 0.01, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8}
	fill := func() {
		for i, q := range a.Grad.pairs() {
			for j := range q.A {
				q.A[j] = float32(i+j%7) * 1e-3
			}
			for j := range q.B {
				q.B[j] = -float32(i+j%5) * 1e-3
			}
		}
	}
	snapshot := func() [][]float32 {
		var out [][]float32
		for _, lw := range []*LoraWeights[float32]{&a.W, &a.M, &a.V, &a.Grad} {
			for _, q := range lw.pairs() {
				out = append(out, slices.Clone(q.A), slices.Clone(q.B))
			}
		}
		return out
	}
	fill()
	if _, err := m.OptimStep(ctx, a, p); err != nil { // moments now non-zero
		t.Fatal(err)
	}
	fill()
	a.Grad.pairs()[1].B[3] = 1e25 // finite, its square is not in float32
	before, step := snapshot(), a.Step
	_, err := m.OptimStep(ctx, a, p)
	if err == nil || !strings.Contains(err.Error(), "nothing was applied") {
		t.Fatalf("err = %v, want the all-or-nothing refusal", err)
	}
	after := snapshot()
	for i := range before {
		for j := range before[i] {
			if math.Float32bits(before[i][j]) != math.Float32bits(after[i][j]) {
				t.Fatalf("tensor %d element %d changed from %v to %v", i, j, before[i][j], after[i][j])
			}
		}
	}
	if a.Step != step {
		t.Fatalf("step count %d, want %d", a.Step, step)
	}
	a.Grad.pairs()[1].B[3] = 1e-3
	if _, err := m.OptimStep(ctx, a, p); err != nil {
		t.Fatal(err)
	}
	if a.Step != step+1 || a.Grad.pairs()[1].B[3] != 0 {
		t.Fatalf("step %d, gradient %v after a normal step", a.Step, a.Grad.pairs()[1].B[3])
	}
}
