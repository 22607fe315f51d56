package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
)

// Shared checks MatMulNTShared on d: products that share one activation (a layer's Q, K
// and V shapes, scaled down), with the weights as the device places a model's matrices
// (MatrixPlacer) or as Weight, activations as wide (training) or not, at one row (a
// decode step) and several. Every output must equal, bit for bit, what MatMulNT gives
// alone, and the reference's product within the weight tolerance.
func Shared(t *testing.T, d device.Device[float32], tol Tolerance) {
	c := &checker{t: t, d: d, ref: device.NewCPU[float64](), rng: rand.New(rand.NewPCG(3, 4)), tol: tol}
	c.shared(t)
}

func (c *checker) shared(t *testing.T) {
	const k = 64
	ns := []int{96, 32, 32}
	ws := make([]device.Tensor[float32], len(ns))
	vals := make([][]float64, len(ns))
	for i, n := range ns {
		vals[i] = f32(c.rand(n*k, 1))
		src := make([]float32, n*k)
		for j, x := range vals[i] {
			src[j] = float32(x)
		}
		if mp, ok := c.d.(device.MatrixPlacer[float32]); ok {
			ws[i] = mp.WeightMatrix(src, n, k)
		} else {
			ws[i] = c.d.Weight(src)
		}
	}
	for _, m := range []int{1, 5} {
		for _, wide := range []bool{false, true} {
			name := fmt.Sprintf("m=%d wide=%v", m, wide)
			av := f32(c.rand(m*k, 1))
			a := c.up(av)
			outs := make([]device.SharedOut[float32], len(ns))
			alone := make([][]float64, len(ns))
			for i, n := range ns {
				w := ws[i]
				if wide {
					w = w.WideActivations()
				}
				sep := c.up(c.rand(m*n, 1))
				c.d.MatMulNT(sep, a, w, m, n, k, false)
				alone[i] = c.down(sep)
				c.d.Free(sep)
				outs[i] = device.SharedOut[float32]{C: c.up(c.rand(m*n, 1)), W: w, N: n}
			}
			c.d.MatMulNTShared(a, outs, m, k)
			c.err("MatMulNTShared " + name)
			for i, n := range ns {
				got := c.down(outs[i].C)
				for j := range got {
					if math.Float32bits(float32(got[j])) != math.Float32bits(float32(alone[i][j])) {
						t.Fatalf("MatMulNTShared %s: output %d element %d is %v, MatMulNT alone gives %v", name, i, j, got[j], alone[i][j])
					}
				}
				want := make([]float64, m*n)
				c.ref.MatMulNT(h64(want), h64(av), h64(vals[i]), m, n, k, false)
				c.near(fmt.Sprintf("MatMulNTShared %s output %d", name, i), got, want, c.tol.Weight)
				c.d.Free(outs[i].C)
			}
			c.d.Free(a)
		}
	}
	c.err("shared")
}
