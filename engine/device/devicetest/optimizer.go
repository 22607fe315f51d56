package devicetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
)

func (c *checker) optimizer(t *testing.T) {
	xs := [][]float64{f32(c.rand(100, 1)), f32(c.rand(7, 3)), f32(c.rand(1000, 0.1))}
	var rt []device.Tensor[float64]
	var dt []device.Tensor[float32]
	for _, x := range xs {
		rt = append(rt, h64(x))
		dt = append(dt, c.up(x))
	}
	c.near("sum of squares", []float64{c.d.SumSquares(dt)}, []float64{c.ref.SumSquares(rt)}, 1e-12)
	n := 500
	w, gr, m, v := f32(c.rand(n, 1)), f32(c.rand(n, 1)), f32(c.rand(n, 0.1)), f32(c.rand(n, 0.1))
	for i := range v {
		v[i] = math.Abs(v[i])
	}
	s := &device.AdamStep{Clip: 0.5, Decay: 0.999, B1: 0.9, B2: 0.95, StepSize: 1e-2, BC2Sqrt: 0.3, Eps: 1e-8}
	dw, dg, dm, dv := c.up(w), c.up(gr), c.up(m), c.up(v)
	c.ref.AdamW(h64(w), h64(gr), h64(m), h64(v), s)
	c.d.AdamW(dw, dg, dm, dv, s)
	c.near("adamw weights", c.down(dw), w, c.tol.Elementwise)
	c.near("adamw first moment", c.down(dm), m, c.tol.Elementwise)
	c.near("adamw second moment", c.down(dv), v, c.tol.Elementwise)
	c.near("adamw zeroes the gradient", c.down(dg), make([]float64, n), 0)
	c.err("optimizer")
	if af, ok := c.d.(device.AdamWFinite[float32]); ok {
		c.adamwFinite(af, s)
	}
}

// adamwFinite checks a device's checked many-tensor AdamW: on finite results the bits of
// its one-tensor AdamW, tensor by tensor; where one element of one tensor would overflow,
// nothing changes (gradients included) and it reports false.
func (c *checker) adamwFinite(af device.AdamWFinite[float32], s *device.AdamStep) {
	lens := []int{1, 300, 4097, 17, 65536}
	var ws, gs, ms, vs, rw, rg, rm, rv []device.Tensor[float32]
	var want, before [][]float64
	for _, n := range lens {
		w, gr, m, v := f32(c.rand(n, 1)), f32(c.rand(n, 1)), f32(c.rand(n, 0.1)), f32(c.rand(n, 0.1))
		for i := range v {
			v[i] = math.Abs(v[i])
		}
		before = append(before, w, gr, m, v)
		ws, gs, ms, vs = append(ws, c.up(w)), append(gs, c.up(gr)), append(ms, c.up(m)), append(vs, c.up(v))
		rw, rg, rm, rv = append(rw, c.up(w)), append(rg, c.up(gr)), append(rm, c.up(m)), append(rv, c.up(v))
	}
	for i := range lens {
		c.d.AdamW(rw[i], rg[i], rm[i], rv[i], s)
		want = append(want, c.down(rw[i]), c.down(rg[i]), c.down(rm[i]), c.down(rv[i]))
	}
	if !af.AdamWIfFinite(ws, gs, ms, vs, s) {
		c.t.Errorf("AdamWIfFinite refused finite updates")
	}
	for i := range lens {
		for j, got := range [][]float64{c.down(ws[i]), c.down(gs[i]), c.down(ms[i]), c.down(vs[i])} {
			c.near(fmt.Sprintf("AdamWIfFinite tensor %d part %d (w, g, m, v) against AdamW", i, j), got, want[4*i+j], 0)
		}
	}
	// One gradient element of the fourth tensor that squares to infinity in float32.
	for i := range lens {
		for j, t := range []device.Tensor[float32]{ws[i], gs[i], ms[i], vs[i]} {
			x := before[4*i+j]
			if i == 3 && j == 1 {
				x = append([]float64(nil), x...)
				x[5] = float64(float32(3e38))
				before[4*i+j] = x
			}
			f := make([]float32, len(x))
			for k, e := range x {
				f[k] = float32(e)
			}
			c.d.Upload(t, f)
		}
	}
	big := *s
	big.Clip = 1
	if af.AdamWIfFinite(ws, gs, ms, vs, &big) {
		c.t.Errorf("AdamWIfFinite applied a step whose second moment overflows")
	}
	for i := range lens {
		for j, got := range [][]float64{c.down(ws[i]), c.down(gs[i]), c.down(ms[i]), c.down(vs[i])} {
			c.near(fmt.Sprintf("refused AdamWIfFinite left tensor %d part %d (w, g, m, v)", i, j), got, before[4*i+j], 0)
		}
	}
	c.err("adamw if finite")
}
