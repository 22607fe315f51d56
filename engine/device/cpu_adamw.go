package device

import (
	"math"
	"sync/atomic"
)

// The CPU's AdamW: one tensor at a time (Device.AdamW) or every tensor of an adapter in
// one checked call (AdamWFinite), both through adamC.step.

// AdamW implements Device.
func (*CPU[T]) AdamW(wt, gt, mt, vt Tensor[T], s *AdamStep) {
	c := adamConsts[T](s)
	spread(len(wt.h), elemGrain, func(lo, hi int) {
		w, g, mm, vv := wt.h[lo:hi], gt.h[lo:hi], mt.h[lo:hi], vt.h[lo:hi]
		for i := range w {
			w[i], mm[i], vv[i] = c.step(w[i], g[i], mm[i], vv[i])
			g[i] = 0
		}
	})
}

// adamC is an AdamStep in T.
type adamC[T Float] struct{ clip, decay, b1, b2, stepSize, bc2Sqrt, eps T }

func adamConsts[T Float](s *AdamStep) adamC[T] {
	return adamC[T]{T(s.Clip), T(s.Decay), T(s.B1), T(s.B2), T(s.StepSize), T(s.BC2Sqrt), T(s.Eps)}
}

// step is AdamStep's update of one weight w with gradient g and moments m, v: the new
// weight and moments.
func (c *adamC[T]) step(w, g, m, v T) (T, T, T) {
	gi := g * c.clip
	w *= c.decay
	m = c.b1*m + (1-c.b1)*gi
	v = c.b2*v + (1-c.b2)*gi*gi
	denom := T(math.Sqrt(float64(v)))/c.bc2Sqrt + c.eps
	w -= c.stepSize * m / denom
	return w, m, v
}

// AdamWIfFinite implements AdamWFinite: one pass over every tensor computes the updates
// and only checks them, a second (the same arithmetic) writes them, both in chunks
// spread over the cores; an adapter's hundreds of small tensors are one operation.
func (*CPU[T]) AdamWIfFinite(ws, gs, ms, vs []Tensor[T], s *AdamStep) bool {
	c := adamConsts[T](s)
	type chunk struct{ t, lo, hi int }
	var chunks []chunk
	for t, w := range ws {
		if len(gs[t].h) != len(w.h) || len(ms[t].h) != len(w.h) || len(vs[t].h) != len(w.h) {
			panic("device: AdamWIfFinite over tensors of different lengths")
		}
		for lo := 0; lo < len(w.h); lo += elemGrain {
			chunks = append(chunks, chunk{t, lo, min(lo+elemGrain, len(w.h))})
		}
	}
	var bad atomic.Bool
	spread(len(chunks), 1, func(lo, hi int) {
		for _, ch := range chunks[lo:hi] {
			w, g, mm, vv := ws[ch.t].h[ch.lo:ch.hi], gs[ch.t].h[ch.lo:ch.hi], ms[ch.t].h[ch.lo:ch.hi], vs[ch.t].h[ch.lo:ch.hi]
			for i := range w {
				nw, nm, nv := c.step(w[i], g[i], mm[i], vv[i])
				if !finite(nw) || !finite(nm) || !finite(nv) {
					bad.Store(true)
					return
				}
			}
			if bad.Load() {
				return
			}
		}
	})
	if bad.Load() {
		return false
	}
	spread(len(chunks), 1, func(lo, hi int) {
		for _, ch := range chunks[lo:hi] {
			w, g, mm, vv := ws[ch.t].h[ch.lo:ch.hi], gs[ch.t].h[ch.lo:ch.hi], ms[ch.t].h[ch.lo:ch.hi], vs[ch.t].h[ch.lo:ch.hi]
			for i := range w {
				w[i], mm[i], vv[i] = c.step(w[i], g[i], mm[i], vv[i])
				g[i] = 0
			}
		}
	})
	return true
}

// finite reports whether x is neither NaN nor infinite.
func finite[T Float](x T) bool { return x-x == 0 }
