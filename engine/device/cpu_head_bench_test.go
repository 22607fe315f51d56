package device_test

import (
	"math/rand/v2"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
)

// BenchmarkLossHead compares the fused head (LossHead + LossHeadBack) with the full
// logits it replaces (the product, LogSoftmax, the targets' gather, XentBack and the
// input gradient's product) at SmolLM2-135M's width and vocabulary, 512 rows.
func BenchmarkLossHead(b *testing.B) {
	const R, D, V = 512, 576, 49152
	rng := rand.New(rand.NewPCG(1, 1))
	f := func(n int, s float64) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64() * s)
		}
		return out
	}
	h, w, g := f(R*D, 1), f(V*D, 0.05), f(R, 1)
	off, tok := make([]int32, R+1), make([]int32, R)
	for r := range tok {
		tok[r], off[r+1] = int32(rng.IntN(V)), int32(r+1)
	}
	d := device.NewCPU[float32]()
	b.Run("fused", func(b *testing.B) {
		for b.Loop() {
			hd := &device.Head[float32]{H: device.Host(h), W: device.Host(w), Rows: R, D: D, V: V,
				Off: device.Host(off), Tok: device.Host(tok), LogP: d.Alloc(R), E: d.Alloc(R * D)}
			d.LossHead(hd)
			d.LossHeadBack(hd, d.Alloc(R*D), device.Host(g))
		}
	})
	b.Run("full-logits", func(b *testing.B) {
		for b.Loop() {
			lg := d.Alloc(R * V)
			d.MatMulNT(lg, device.Host(h), device.Host(w), R, V, D, false)
			d.LogSoftmax(lg, R, V)
			idx := make([]int64, R)
			xg := &device.XentGrad{}
			for r := range idx {
				idx[r] = int64(r*V) + int64(tok[r])
				xg.Rows, xg.Sums = append(xg.Rows, int32(r)), append(xg.Sums, float64(g[r]))
			}
			xg.Idx, xg.Vals = idx, make([]float64, R)
			lp := make([]float32, R)
			d.Gather(lp, lg, idx)
			d.XentBack(lg, lg, V, xg)
			d.MatMulNN(d.Alloc(R*D), lg, device.Host(w), R, D, V, false)
		}
	})
}
