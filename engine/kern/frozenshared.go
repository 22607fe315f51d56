package kern

import "runtime"

// Products that share one activation row. A decode step multiplies one row by a layer's
// Q, K and V weights (and by gate and up): each product alone is a hand-off of its rows
// to the cores and a wait for them, which at 135M parameters costs about as much as the
// weights' bytes. FrozenMatMulNTShared prepares the row once and hands the union of the
// outputs' rows to the cores in one call.

// oneRowAlign is the rows of W a core's share of a one-row product is a multiple of.
const oneRowAlign = 16

// dotRows runs f(j, out) over outputs [lo, hi) of a one-row product c, out being the
// len(out) outputs from j, at most most of them (and 64 with acc): c itself, or with acc
// a buffer then added to c (the row-dot kernels only set their outputs).
func dotRows(c []float32, lo, hi, most int, acc bool, f func(j int, out []float32)) {
	var buf [64]float32
	if acc {
		most = min(most, len(buf))
	}
	for j := lo; j < hi; {
		r := min(hi-j, most)
		out := c[j : j+r]
		if acc {
			out = buf[:r]
		}
		f(j, out)
		if acc {
			for x, v := range out {
				c[j+x] += v
			}
		}
		j += r
	}
}

// rowPrep is what a one-row product does to the row of A before its dots.
type rowPrep int

const (
	prepNone rowPrep = iota
	prepBF16         // rounded to bfloat16 and widened back (roundBF16)
	prepQ8           // quantised to 8-bit blocks (quantRow, q8Row's layout)
)

// prepLen is the float32 words the prepared row of k elements takes.
func (p rowPrep) prepLen(k int) int {
	if p == prepQ8 {
		return q8RowLen(k)
	}
	return k
}

// prepare writes the row a[:k] prepared as p says to dst (prepLen(k) long).
func (p rowPrep) prepare(dst, a []float32, k int) {
	switch p {
	case prepBF16:
		roundBF16(nil, dst, a[:k])
	case prepQ8:
		quantRow(dst, a[:k])
	}
}

// oneRow is how a one-row product with W is computed: f sets (or adds, acc) outputs
// [lo, hi) of c = a·Wᵀ, each output from one row of W alone, a being the row prepared
// as prep says. f is nil where the product takes another path (float32 weights without
// the dot kernels, the integer tiles).
func (w *Frozen) oneRow(round bool) (f func(c, a []float32, lo, hi int, acc bool), prep rowPrep) {
	k := w.Cols
	switch {
	case w.f32Dottable():
		return w.f32Dots, prepNone
	case w.intDottable(1, round):
		return w.intDots, prepQ8
	case w.Format == F32 || round && w.intTiles(1) || round && w.dpTileable(1):
		return nil, prepNone
	case w.Format == Q5_0 && useAVX512:
		return w.q5Dots, prepNone
	case (w.Format == Q4_K || w.Format == Q6_K) && useAVX512:
		return w.kDots, prepNone
	}
	if w.Format == BF16 && round {
		prep = prepBF16
	}
	if prep == prepBF16 && useAVX2 && hasRowDots && k%16 == 0 {
		return w.bf16Dots, prep
	}
	return func(c, a []float32, lo, hi int, acc bool) {
		x := a[:k]
		for j := lo; j < hi; j++ {
			s := w.dotRow(x, j)
			if acc {
				c[j] += s
			} else {
				c[j] = s
			}
		}
	}, prep
}

// FrozenOut is one product of FrozenMatMulNTShared: C[m×W.Rows] = A·Wᵀ, Wide as
// FrozenMatMulNTWide (A multiplied in float32 whatever W's format).
type FrozenOut struct {
	C    []float32
	W    *Frozen
	Wide bool
}

// FrozenMatMulNTShared sets every out's C = A[m×k]·Wᵀ (k every W's Cols), bit for bit
// what FrozenMatMulNT (FrozenMatMulNTWide where Wide) computes for each out alone. A row
// of A (m = 1) is rounded to bfloat16 once for the products that round it and quantised
// once for those on the integer dots, and the outputs' rows go to the cores in one split;
// more rows run the products one after the other, each already split across the cores.
func FrozenMatMulNTShared(a []float32, outs []FrozenOut, m int) {
	defer runtime.KeepAlive(outs) // and so every W (weightmem.go)
	for _, o := range outs[min(1, len(outs)):] {
		if o.W.Cols != outs[0].W.Cols {
			panic("kern: FrozenMatMulNTShared: weights of different widths do not share an activation")
		}
	}
	type part struct {
		f     func(c, a []float32, lo, hi int, acc bool)
		a, c  []float32
		lo, n int // its rows in the union
		prep  rowPrep
	}
	parts := make([]part, 0, len(outs))
	total, work := 0, 0
	if m == 1 {
		for _, o := range outs {
			f, prep := o.W.oneRow(!o.Wide)
			if f == nil || o.W.Rows == 0 {
				parts = nil
				break
			}
			_ = o.C[o.W.Rows-1]
			_ = a[o.W.Cols-1]
			parts = append(parts, part{f: f, a: a, c: o.C, lo: total, n: o.W.Rows, prep: prep})
			total += o.W.Rows
			work += o.W.Rows * o.W.Cols
		}
	}
	if len(parts) < 2 {
		for _, o := range outs {
			frozenMatMulNT(o.C, a, o.W, m, false, !o.Wide)
		}
		return
	}
	// Each preparation of A once, for every product that takes it.
	var prepared [prepQ8 + 1]*[]float32
	for i := range parts {
		p := &parts[i]
		if p.prep == prepNone {
			continue
		}
		if prepared[p.prep] == nil {
			k := outs[0].W.Cols
			buf := getScratch(p.prep.prepLen(k))
			defer putScratch(buf)
			p.prep.prepare(*buf, a, k)
			prepared[p.prep] = buf
		}
		p.a = *prepared[p.prep]
	}
	split(total, work, oneRowAlign, func(lo, hi int) {
		for _, p := range parts {
			if l, h := max(lo, p.lo), min(hi, p.lo+p.n); l < h {
				p.f(p.c, p.a, l-p.lo, h-p.lo, false)
			}
		}
	})
}
