package devicetest

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// fused checks the fused operations against the float64 reference and against the
// device's own unfused sequence, bit for bit (AddRMSNorm is Add then RMSNorm, RopeQK two
// Ropes), and, on a device with bfloat16 operands (device.BF16Operands), that the
// operations writing one write exactly the rounding of their float32 result and that
// products reading it give the bits of products that round the float32 operand
// themselves.
func (c *checker) fused(t *testing.T) {
	rows, d := 11, 40
	a, b, w := f32(c.rand(rows*d, 1)), f32(c.rand(rows*d, 1)), f32(c.rand(d, 0.5))
	for i := range w {
		w[i] += 1
	}
	sum, y, rstd := make([]float64, rows*d), make([]float64, rows*d), make([]float64, rows)
	c.ref.Add(h64(sum), h64(a), h64(b))
	c.ref.RMSNorm(h64(y), h64(rstd), h64(sum), h64(w), rows, d, 1e-5)

	da, db, dw := c.up(a), c.up(b), c.up(w)
	gs, gy, gr := c.d.Alloc(rows*d), c.d.Alloc(rows*d), c.d.Alloc(rows)
	c.d.AddRMSNorm(gs, gy, gr, da, db, dw, rows, d, 1e-5)
	c.err("add+rmsnorm")
	c.near("add+rmsnorm sum", c.down(gs), sum, c.tol.Elementwise)
	c.near("add+rmsnorm y", c.down(gy), y, c.tol.Elementwise)
	c.near("add+rmsnorm rstd", c.down(gr), rstd, c.tol.Elementwise)
	// The unfused pair on the same device: the same bits.
	us, uy, ur := c.d.Alloc(rows*d), c.d.Alloc(rows*d), c.d.Alloc(rows)
	c.d.Add(us, da, db)
	c.d.RMSNorm(uy, ur, us, dw, rows, d, 1e-5)
	c.same("add+rmsnorm sum vs add", c.down(gs), c.down(us))
	c.same("add+rmsnorm y vs add then rmsnorm", c.down(gy), c.down(uy))
	c.same("add+rmsnorm rstd vs rmsnorm", c.down(gr), c.down(ur))
	// In place: the residual stream updated where it is (sum aliases a).
	c.d.AddRMSNorm(da, gy, gr, da, db, dw, rows, d, 1e-5)
	c.same("add+rmsnorm in place: sum", c.down(da), c.down(us))
	c.same("add+rmsnorm in place: y", c.down(gy), c.down(uy))

	// Rotary embeddings of Q and K in one call: the bits of two calls.
	half, hq, hk := 8, 4, 2
	freq := make([]float64, half)
	for i := range freq {
		freq[i] = 1 / math.Pow(10000, float64(2*i)/float64(2*half))
	}
	rt := device.NewRope(freq, 64)
	pos := c.d.Ints([]int32{0, 5, 63, 17, 2})
	q, k := f32(c.rand(5*hq*2*half, 1)), f32(c.rand(5*hk*2*half, 1))
	for _, inv := range []bool{false, true} {
		fq, fk, sq, sk := c.up(q), c.up(k), c.up(q), c.up(k)
		c.d.RopeQK(fq, fk, pos, hq, hk, rt, inv)
		c.d.Rope(sq, pos, hq, rt, inv)
		c.d.Rope(sk, pos, hk, rt, inv)
		c.same(fmt.Sprintf("rope q+k inverse=%v: q", inv), c.down(fq), c.down(sq))
		c.same(fmt.Sprintf("rope q+k inverse=%v: k", inv), c.down(fk), c.down(sk))
	}
	// And with the cache writes of a cached pass: the bits of RopeQK then two KVWrites,
	// the slots not written left as they were.
	slots := c.d.Ints([]int32{6, 1, 3, 0, 7})
	v := f32(c.rand(5*hk*2*half, 1))
	pool := f32(c.rand(8*hk*2*half, 1))
	fq, fk, fv, fkc, fvc := c.up(q), c.up(k), c.up(v), c.up(pool), c.up(pool)
	c.d.RopeQKV(fq, fk, fv, fkc, fvc, pos, slots, hq, hk, rt)
	sq, sk, skc, svc := c.up(q), c.up(k), c.up(pool), c.up(pool)
	c.d.RopeQK(sq, sk, pos, hq, hk, rt, false)
	c.d.KVWrite(skc, sk, slots, hk*2*half)
	c.d.KVWrite(svc, c.up(v), slots, hk*2*half)
	c.same("rope q+k with cache writes: q", c.down(fq), c.down(sq))
	c.same("rope q+k with cache writes: k", c.down(fk), c.down(sk))
	c.same("rope q+k with cache writes: k cache", c.down(fkc), c.down(skc))
	c.same("rope q+k with cache writes: v cache", c.down(fvc), c.down(svc))
	c.err("fused")

	bo, ok := c.d.(device.BF16Operands[float32])
	if !ok || bo.AllocBF16(2).Empty() {
		return
	}
	c.bf16Operands(bo)
}

// bf16Operands: outputs with a bfloat16 operand (attached, or alone) and products that
// read it.
func (c *checker) bf16Operands(bo device.BF16Operands[float32]) {
	rows, d, n := 6, 32, 24
	x, r, w := f32(c.rand(rows*d, 1)), f32(c.rand(rows*d, 1)), f32(c.rand(d, 0.5))
	dx, dr, dw := c.up(x), c.up(r), c.up(w)
	wm := make([]float32, n*d)
	for i := range wm {
		wm[i] = float32(c.rng.NormFloat64())
	}
	weight := c.d.Weight(wm)

	// RMSNorm: float32 y as without the operand, the operand its rounding.
	plain, rstd := c.d.Alloc(rows*d), c.d.Alloc(rows)
	c.d.RMSNorm(plain, rstd, dx, dw, rows, d, 1e-5)
	tw := bo.AllocBF16(rows * d)
	y := c.d.Alloc(rows * d).WithBF16(tw)
	c.d.RMSNorm(y, rstd, dx, dw, rows, d, 1e-5)
	c.err("rmsnorm with a bfloat16 operand")
	c.same("rmsnorm with a bfloat16 operand: float32", c.down(y), c.down(plain))
	c.rounded("rmsnorm's bfloat16 operand", c.downBF16(tw), c.down(plain))
	// The product that reads the operand: the bits of the product that rounds y itself.
	want, got := c.d.Alloc(rows*n), c.d.Alloc(rows*n)
	c.d.MatMulNT(want, plain, weight, rows, n, d, false)
	c.d.MatMulNT(got, y, weight, rows, n, d, false)
	c.same("product reading an attached bfloat16 operand", c.down(got), c.down(want))
	c.d.MatMulNT(got, tw, weight, rows, n, d, false)
	c.same("product reading a bfloat16 operand alone", c.down(got), c.down(want))

	// AddRMSNorm with the operand alone (no float32 y).
	sum, only := c.d.Alloc(rows*d), bo.AllocBF16(rows*d)
	c.d.AddRMSNorm(sum, only, rstd, dx, dr, dw, rows, d, 1e-5)
	us, uy := c.d.Alloc(rows*d), c.d.Alloc(rows*d)
	c.d.Add(us, dx, dr)
	c.d.RMSNorm(uy, rstd, us, dw, rows, d, 1e-5)
	c.err("add+rmsnorm into a bfloat16 operand alone")
	c.same("add+rmsnorm into a bfloat16 operand alone: sum", c.down(sum), c.down(us))
	c.rounded("add+rmsnorm's bfloat16 operand", c.downBF16(only), c.down(uy))

	// SwiGLU, both forms.
	g, u := c.up(f32(c.rand(rows*d, 2))), c.up(f32(c.rand(rows*d, 1)))
	ap := c.d.Alloc(rows * d)
	c.d.SwiGLU(ap, g, u)
	at := bo.AllocBF16(rows * d)
	aw := c.d.Alloc(rows * d).WithBF16(at)
	c.d.SwiGLU(aw, g, u)
	c.same("swiglu with a bfloat16 operand: float32", c.down(aw), c.down(ap))
	c.rounded("swiglu's bfloat16 operand", c.downBF16(at), c.down(ap))
	ao := bo.AllocBF16(rows * d)
	c.d.SwiGLU(ao, g, u)
	c.rounded("swiglu into a bfloat16 operand alone", c.downBF16(ao), c.down(ap))
	c.err("swiglu with bfloat16 operands")

	// Attention's output (two sequences, statistics kept as in training).
	heads, kvh, hd := 4, 2, 16
	l := &device.Layout{Seqs: []device.AttnSeq{{Row: 0, N: 2, KRow: 0}, {Row: 2, N: 4, KRow: 2}}}
	l.Desc = c.d.Ints(l.Pack())
	aq, ak, av := c.up(f32(c.rand(rows*heads*hd, 1))), c.up(f32(c.rand(rows*kvh*hd, 1))), c.up(f32(c.rand(rows*kvh*hd, 1)))
	attn := func(out device.Tensor[float32]) {
		c.d.Attention(&device.Attn[float32]{Q: aq, Out: out, K: ak, V: av, Heads: heads, KVHeads: kvh, HeadDim: hd,
			Scale: 0.25, Layout: l, P: c.d.Alloc(l.StatsLen(heads)), Stats: device.KeepsStats(c.d)})
	}
	op := c.d.Alloc(rows * heads * hd)
	attn(op)
	ot := bo.AllocBF16(rows * heads * hd)
	ow := c.d.Alloc(rows * heads * hd).WithBF16(ot)
	attn(ow)
	c.err("attention with a bfloat16 operand")
	c.same("attention with a bfloat16 operand: float32", c.down(ow), c.down(op))
	c.rounded("attention's bfloat16 operand", c.downBF16(ot), c.down(op))
	// Its backward pass: dv with an operand attached.
	stats := c.d.Alloc(l.StatsLen(heads))
	fa := &device.Attn[float32]{Q: aq, Out: c.d.Alloc(rows * heads * hd), K: ak, V: av, Heads: heads, KVHeads: kvh, HeadDim: hd,
		Scale: 0.25, Layout: l, P: stats, Stats: true}
	c.d.Attention(fa)
	dout := c.up(f32(c.rand(rows*heads*hd, 1)))
	kq, kk := c.d.Alloc(rows*heads*hd), c.d.Alloc(rows*kvh*hd)
	pv := c.d.Alloc(rows * kvh * hd)
	c.d.AttentionBack(fa, kq, kk, pv, dout)
	vt := bo.AllocBF16(rows * kvh * hd)
	wv := c.d.Alloc(rows * kvh * hd).WithBF16(vt)
	c.d.AttentionBack(fa, kq, kk, wv, dout)
	c.err("attention backward with a bfloat16 operand")
	c.same("attention backward with a bfloat16 operand: dv", c.down(wv), c.down(pv))
	c.rounded("attention backward's bfloat16 operand of dv", c.downBF16(vt), c.down(pv))

	// The backward pass's gradients: float32 as without the operand, the operand the
	// rounding of the result.
	dy, dx0 := c.up(f32(c.rand(rows*d, 1))), f32(c.rand(rows*d, 1))
	bp, bt := c.up(dx0), bo.AllocBF16(rows*d)
	bw := c.up(dx0).WithBF16(bt)
	c.d.RMSNormBack(bp, dy, dx, dw, rstd, rows, d)
	c.d.RMSNormBack(bw, dy, dx, dw, rstd, rows, d)
	c.same("rmsnorm back with a bfloat16 operand: float32", c.down(bw), c.down(bp))
	c.rounded("rmsnorm back's bfloat16 operand", c.downBF16(bt), c.down(bp))
	da := c.up(f32(c.rand(rows*d, 1)))
	pg, pu := c.d.Alloc(rows*d), c.d.Alloc(rows*d)
	c.d.SwiGLUBack(pg, pu, da, g, u)
	tg, tu := bo.AllocBF16(rows*d), bo.AllocBF16(rows*d)
	wg, wu := c.d.Alloc(rows*d).WithBF16(tg), c.d.Alloc(rows*d).WithBF16(tu)
	c.d.SwiGLUBack(wg, wu, da, g, u)
	c.same("swiglu back with bfloat16 operands: dg", c.down(wg), c.down(pg))
	c.same("swiglu back with bfloat16 operands: du", c.down(wu), c.down(pu))
	c.rounded("swiglu back's bfloat16 operand of dg", c.downBF16(tg), c.down(pg))
	c.rounded("swiglu back's bfloat16 operand of du", c.downBF16(tu), c.down(pu))
	freq := []float64{1, 0.1, 0.01, 0.001}
	rt := device.NewRope(freq, 16)
	pos := c.d.Ints([]int32{0, 3, 15, 7, 1, 9})
	rq, rk := f32(c.rand(rows*3*8, 1)), f32(c.rand(rows*2*8, 1))
	pq, pk := c.up(rq), c.up(rk)
	c.d.RopeQK(pq, pk, pos, 3, 2, rt, true)
	tq, tk := bo.AllocBF16(len(rq)), bo.AllocBF16(len(rk))
	wq, wk := c.up(rq).WithBF16(tq), c.up(rk).WithBF16(tk)
	c.d.RopeQK(wq, wk, pos, 3, 2, rt, true)
	c.same("rope with bfloat16 operands: q", c.down(wq), c.down(pq))
	c.same("rope with bfloat16 operands: k", c.down(wk), c.down(pk))
	c.rounded("rope's bfloat16 operand of q", c.downBF16(tq), c.down(pq))
	c.rounded("rope's bfloat16 operand of k", c.downBF16(tk), c.down(pk))
	c.err("backward with bfloat16 operands")

	// A bfloat16 activation with a float32 weight, or where an operation reads float32:
	// refused by name.
	c.d.MatMulNT(got, tw, plain, rows, rows, d, false)
	if err := c.d.Err(); err == nil || !strings.Contains(err.Error(), "bfloat16 activation") {
		c.t.Fatalf("a bfloat16 activation times a float32 matrix: error %v, want one naming the bfloat16 activation", err)
	}
	c.d.Add(sum, tw, dx)
	if err := c.d.Err(); err == nil || !strings.Contains(err.Error(), "bfloat16") {
		c.t.Fatalf("Add of a bfloat16 tensor: error %v, want one naming bfloat16", err)
	}
}

// same fails unless got and want are equal bit for bit.
func (c *checker) same(what string, got, want []float64) {
	c.t.Helper()
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			c.t.Fatalf("%s: element %d is %v, want %v (the same bits)", what, i, got[i], want[i])
		}
	}
}

// rounded fails unless each of got is the bfloat16 rounding of want's element.
func (c *checker) rounded(what string, got []uint16, want []float64) {
	c.t.Helper()
	for i := range want {
		if r := kern.ToBF16(float32(want[i])); got[i] != r {
			c.t.Fatalf("%s: element %d is %#04x, want %#04x (the rounding of %v)", what, i, got[i], r, want[i])
		}
	}
}

// downBF16 reads a bfloat16 tensor's elements (an even number of them).
func (c *checker) downBF16(t device.Tensor[float32]) []uint16 {
	raw := make([]float32, t.Len()/2)
	c.d.Download(raw, device.OnDevice[float32](t.Ptr(), len(raw), false))
	out := make([]uint16, 0, t.Len())
	for _, v := range raw {
		u := math.Float32bits(v)
		out = append(out, uint16(u), uint16(u>>16))
	}
	return out
}
