// Package devicetest checks that a device.Device[float32] computes what the CPU device
// computes in float64, operation by operation: the conformance suite every device must
// pass (the CPU device in CI, the CUDA device on a GPU).
package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
)

// Tolerance bounds the relative error (‖got − want‖ / ‖want‖ over a result) allowed.
type Tolerance struct {
	Elementwise float64 // float32 element and row operations
	Product     float64 // matrix products and attention
	Weight      float64 // products with a frozen weight (which a device may narrow)
	// Attention bounds attention that keeps statistics (device.StatsKeeper) or nothing,
	// whose tile products a device may run in bfloat16; with probabilities kept it is
	// Product's.
	Attention float64
}

// Float32 is the tolerance of a device that computes in float32 throughout.
var Float32 = Tolerance{Elementwise: 1e-6, Product: 1e-5, Weight: 1e-5, Attention: 1e-5}

// BF16Weights is the tolerance of a device that narrows weights (and the activations
// multiplied with them) to bfloat16, and runs attention's products in bfloat16 with
// float32 accumulation: inputs rounded to 8 significant bits (relative error 2⁻⁹ each)
// gave errors of 2e-3 to 4e-3 in outputs and gradients on the CUDA emulation; the bound
// allows 5×.
var BF16Weights = Tolerance{Elementwise: 1e-6, Product: 1e-5, Weight: 1e-2, Attention: 2e-2}

// Run checks every operation of d against the float64 CPU device.
func Run(t *testing.T, d device.Device[float32], tol Tolerance) {
	c := &checker{t: t, d: d, ref: device.NewCPU[float64](), rng: rand.New(rand.NewPCG(1, 2)), tol: tol}
	for _, s := range []struct {
		name string
		f    func(*testing.T)
	}{{"memory", c.memory}, {"matmul", c.matmul}, {"elementwise", c.elementwise}, {"rows", c.rows},
		{"attention", c.attention}, {"loss", c.loss}, {"head", c.head}, {"optimizer", c.optimizer}, {"sampling", c.sampling},
		{"lora", c.lora}, {"fused", c.fused}, {"shared", c.shared}} {
		t.Run(s.name, func(t *testing.T) {
			c.t = t // failures belong to the subtest
			s.f(t)
		})
	}
	c.t = t
	if err := d.Err(); err != nil {
		t.Fatalf("device error: %v", err)
	}
}

type checker struct {
	t   *testing.T
	d   device.Device[float32]
	ref *device.CPU[float64]
	rng *rand.Rand
	tol Tolerance
}

func (c *checker) rand(n int, scale float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = c.rng.NormFloat64() * scale
	}
	return out
}

// up places host values on the device under test (rounded to float32).
func (c *checker) up(v []float64) device.Tensor[float32] {
	t := c.d.Alloc(len(v))
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	c.d.Upload(t, f)
	return t
}

// f32 rounds v to float32 values (so the reference starts from the device's inputs).
func f32(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(float32(x))
	}
	return out
}

func (c *checker) down(t device.Tensor[float32]) []float64 {
	f := make([]float32, t.Len())
	c.d.Download(f, t)
	out := make([]float64, len(f))
	for i, x := range f {
		out[i] = float64(x)
	}
	return out
}

func (c *checker) err(what string) {
	c.t.Helper()
	if err := c.d.Err(); err != nil {
		c.t.Fatalf("%s: device error: %v", what, err)
	}
}

// near fails unless got is within tol of want (relative, in norm).
func (c *checker) near(what string, got, want []float64, tol float64) {
	c.t.Helper()
	if len(got) != len(want) {
		c.t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var d, n float64
	for i := range want {
		d += (got[i] - want[i]) * (got[i] - want[i])
		n += want[i] * want[i]
	}
	if e := math.Sqrt(d / math.Max(n, 1e-300)); e > tol || math.IsNaN(e) {
		c.t.Fatalf("%s: relative error %.3g above %.3g", what, e, tol)
	}
}

func h64(v []float64) device.Tensor[float64] { return device.Host(v) }

func (c *checker) memory(t *testing.T) {
	z := c.d.Alloc(37)
	for i, v := range c.down(z) {
		if v != 0 {
			t.Fatalf("Alloc: element %d is %v, not zero", i, v)
		}
	}
	v := f32(c.rand(37, 1))
	x := c.up(v)
	c.near("upload/download", c.down(x), v, 0)
	y := c.d.Alloc(37)
	c.d.Copy(y.Slice(5, 20), x.Slice(10, 25))
	got := c.down(y)
	want := make([]float64, 37)
	copy(want[5:20], v[10:25])
	c.near("copy of a slice", got, want, 0)
	c.d.Free(x)
	c.d.Free(y)
	c.d.Free(z)
	c.err("memory")
}

func (c *checker) matmul(t *testing.T) {
	for _, s := range [][3]int{{7, 33, 19}, {1, 40, 24}, {16, 5, 64}, {64, 96, 80}} {
		m, n, k := s[0], s[1], s[2]
		for _, acc := range []bool{false, true} {
			name := fmt.Sprintf("%dx%dx%d acc=%v", m, n, k, acc)
			type op struct {
				name       string
				la, lb     int
				dev        func(cc, a, b device.Tensor[float32])
				ref        func(cc, a, b device.Tensor[float64])
				weightable bool
			}
			ops := []op{
				{"NT", m * k, n * k, func(cc, a, b device.Tensor[float32]) { c.d.MatMulNT(cc, a, b, m, n, k, acc) },
					func(cc, a, b device.Tensor[float64]) { c.ref.MatMulNT(cc, a, b, m, n, k, acc) }, true},
				{"NN", m * k, k * n, func(cc, a, b device.Tensor[float32]) { c.d.MatMulNN(cc, a, b, m, n, k, acc) },
					func(cc, a, b device.Tensor[float64]) { c.ref.MatMulNN(cc, a, b, m, n, k, acc) }, true},
				{"TN", k * m, k * n, func(cc, a, b device.Tensor[float32]) { c.d.MatMulTN(cc, a, b, m, n, k, acc) },
					func(cc, a, b device.Tensor[float64]) { c.ref.MatMulTN(cc, a, b, m, n, k, acc) }, false},
			}
			for _, o := range ops {
				a, b, c0 := f32(c.rand(o.la, 1)), f32(c.rand(o.lb, 1)), f32(c.rand(m*n, 1))
				want := append([]float64(nil), c0...)
				o.ref(h64(want), h64(a), h64(b))
				da, db, dc := c.up(a), c.up(b), c.up(c0)
				o.dev(dc, da, db)
				c.near(o.name+" "+name, c.down(dc), want, c.tol.Product)
				if o.weightable {
					bf := make([]float32, len(b))
					for i, x := range b {
						bf[i] = float32(x)
					}
					w := c.d.Weight(bf)
					dc2 := c.up(c0)
					o.dev(dc2, da, w)
					c.near(o.name+" with a weight "+name, c.down(dc2), want, c.tol.Weight)
					c.d.Free(dc2)
				}
				c.d.Free(da)
				c.d.Free(db)
				c.d.Free(dc)
			}
		}
	}
	c.err("matmul")
}

func (c *checker) elementwise(t *testing.T) {
	n := 1000
	a, b := f32(c.rand(n, 1)), f32(c.rand(n, 1))
	da, db := c.up(a), c.up(b)
	want := make([]float64, n)
	c.ref.Add(h64(want), h64(a), h64(b))
	out := c.d.Alloc(n)
	c.d.Add(out, da, db)
	c.near("add", c.down(out), want, c.tol.Elementwise)
	c.d.Add(da, da, db) // aliased
	c.near("add in place", c.down(da), want, c.tol.Elementwise)
	c.ref.Scale(h64(want), float64(float32(0.37)))
	c.d.Scale(da, 0.37)
	c.near("scale", c.down(da), want, c.tol.Elementwise)

	rows, cols := 13, 40
	y, bias := f32(c.rand(rows*cols, 1)), f32(c.rand(cols, 1))
	dy := c.up(y)
	c.ref.AddRows(h64(y), h64(bias), rows)
	c.d.AddRows(dy, c.up(bias), rows)
	c.near("add rows", c.down(dy), y, c.tol.Elementwise)

	g, u := f32(c.rand(n, 2)), f32(c.rand(n, 1))
	wa := make([]float64, n)
	c.ref.SwiGLU(h64(wa), h64(g), h64(u))
	dA := c.d.Alloc(n)
	dg, du := c.up(g), c.up(u)
	c.d.SwiGLU(dA, dg, du)
	c.near("swiglu", c.down(dA), wa, c.tol.Elementwise)
	da2 := f32(c.rand(n, 1))
	wdg, wdu := make([]float64, n), make([]float64, n)
	c.ref.SwiGLUBack(h64(wdg), h64(wdu), h64(da2), h64(g), h64(u))
	gdg, gdu := c.d.Alloc(n), c.d.Alloc(n)
	c.d.SwiGLUBack(gdg, gdu, c.up(da2), dg, du)
	c.near("swiglu back dg", c.down(gdg), wdg, c.tol.Elementwise)
	c.near("swiglu back du", c.down(gdu), wdu, c.tol.Elementwise)
	c.err("elementwise")
}

func (c *checker) rows(t *testing.T) {
	rows, d := 9, 48
	x, w := f32(c.rand(rows*d, 1)), f32(c.rand(d, 0.5))
	for i := range w {
		w[i] += 1
	}
	// Embedding: an activation table and a weight table.
	table := f32(c.rand(20*d, 1))
	idx := []int32{3, 0, 19, 3, 7}
	want := make([]float64, len(idx)*d)
	c.ref.Embed(h64(want), h64(table), device.Host(idx), d)
	got := c.d.Alloc(len(idx) * d)
	c.d.Embed(got, c.up(table), c.d.Ints(idx), d)
	c.near("embed", c.down(got), want, 0)
	tf := make([]float32, len(table))
	for i, v := range table {
		tf[i] = float32(v)
	}
	c.d.Embed(got, c.d.Weight(tf), c.d.Ints(idx), d)
	c.near("embed from a weight", c.down(got), want, c.tol.Weight)

	y, rstd := make([]float64, rows*d), make([]float64, rows)
	c.ref.RMSNorm(h64(y), h64(rstd), h64(x), h64(w), rows, d, 1e-5)
	dy, drstd := c.d.Alloc(rows*d), c.d.Alloc(rows)
	dx, dw := c.up(x), c.up(w)
	c.d.RMSNorm(dy, drstd, dx, dw, rows, d, 1e-5)
	c.near("rmsnorm", c.down(dy), y, c.tol.Elementwise)
	c.near("rmsnorm rstd", c.down(drstd), rstd, c.tol.Elementwise)
	gy, dx0 := f32(c.rand(rows*d, 1)), f32(c.rand(rows*d, 1))
	wdx := append([]float64(nil), dx0...)
	c.ref.RMSNormBack(h64(wdx), h64(gy), h64(x), h64(w), h64(f32(rstd)), rows, d)
	gdx := c.up(dx0)
	c.d.RMSNormBack(gdx, c.up(gy), dx, dw, c.up(rstd), rows, d)
	c.near("rmsnorm back", c.down(gdx), wdx, c.tol.Product)

	// RoPE at scattered positions, forward then inverse.
	half, heads := 8, 3
	freq := make([]float64, half)
	for i := range freq {
		freq[i] = 1 / math.Pow(10000, float64(2*i)/float64(2*half))
	}
	rt := device.NewRope(freq, 64)
	pos := []int32{0, 5, 63, 17}
	v := f32(c.rand(len(pos)*heads*2*half, 1))
	dv := c.up(v)
	dpos := c.d.Ints(pos)
	for _, inv := range []bool{false, true} {
		c.ref.Rope(h64(v), device.Host(pos), heads, rt, inv)
		c.d.Rope(dv, dpos, heads, rt, inv)
		c.near(fmt.Sprintf("rope inverse=%v", inv), c.down(dv), v, c.tol.Elementwise)
	}

	// Log-softmax, then gather.
	cols := 300
	z := f32(c.rand(rows*cols, 3))
	dz := c.up(z)
	c.ref.LogSoftmax(h64(z), rows, cols)
	c.d.LogSoftmax(dz, rows, cols)
	c.near("log-softmax", c.down(dz), z, c.tol.Elementwise)
	gi := []int64{0, 5, int64(rows*cols - 1), 301}
	gw, gg := make([]float64, len(gi)), make([]float32, len(gi))
	c.ref.Gather(gw, h64(z), gi)
	c.d.Gather(gg, dz, gi)
	gf := make([]float64, len(gg))
	for i, x := range gg {
		gf[i] = float64(x)
	}
	c.near("gather", gf, gw, c.tol.Elementwise)
	c.err("rows")
}

// attention checks a training layout (two sequences attending within their rows, with
// probabilities kept, and its backward pass) and a decoding layout (sequences continuing
// from block tables of a KV pool).
func (c *checker) attention(t *testing.T) {
	heads, kvh, hd := 4, 2, 16
	qd, kvd := heads*hd, kvh*hd
	scale := 1 / math.Sqrt(float64(hd))
	// Training: sequences of 5 and 3 rows.
	train := &device.Layout{Seqs: []device.AttnSeq{{Row: 0, N: 5, KRow: 0}, {Row: 5, N: 3, KRow: 5, POff: heads * 25}}}
	rows := 8
	q, k, v := f32(c.rand(rows*qd, 1)), f32(c.rand(rows*kvd, 1)), f32(c.rand(rows*kvd, 1))
	plen := train.ProbLen(heads)
	wo, wp := make([]float64, rows*qd), make([]float64, plen)
	ra := &device.Attn[float64]{Q: h64(q), Out: h64(wo), K: h64(k), V: h64(v), Heads: heads, KVHeads: kvh, HeadDim: hd,
		Scale: scale, Layout: train, P: h64(wp)}
	c.ref.Attention(ra)
	dq, dk, dv := c.up(q), c.up(k), c.up(v)
	do, dp := c.d.Alloc(rows*qd), c.d.Alloc(plen)
	train.Desc = c.d.Ints(train.Pack())
	da := &device.Attn[float32]{Q: dq, Out: do, K: dk, V: dv, Heads: heads, KVHeads: kvh, HeadDim: hd,
		Scale: float32(scale), Layout: train, P: dp}
	c.d.Attention(da)
	c.near("attention (training) output", c.down(do), wo, c.tol.Product)
	c.near("attention (training) probabilities", c.down(dp), wp, c.tol.Product)
	dout := f32(c.rand(rows*qd, 1))
	wdq, wdk, wdv := make([]float64, rows*qd), make([]float64, rows*kvd), make([]float64, rows*kvd)
	ra.P = h64(f32(wp))
	c.ref.AttentionBack(ra, h64(wdq), h64(wdk), h64(wdv), h64(dout))
	gdq, gdk, gdv := c.d.Alloc(rows*qd), c.d.Alloc(rows*kvd), c.d.Alloc(rows*kvd)
	c.d.AttentionBack(da, gdq, gdk, gdv, c.up(dout))
	c.near("attention back dq", c.down(gdq), wdq, c.tol.Product)
	c.near("attention back dk", c.down(gdk), wdk, c.tol.Product)
	c.near("attention back dv", c.down(gdv), wdv, c.tol.Product)

	// Decoding: a pool of 6 blocks of 4 positions; sequence A holds 6 positions in blocks
	// 4 and 1 and adds 1 row, sequence B holds 2 positions in block 2 and adds 3 rows (a
	// chunk), writing into block 2 and then block 5.
	const bl = 4
	pool := 6 * bl
	K, V := f32(c.rand(pool*kvd, 1)), f32(c.rand(pool*kvd, 1))
	dec := &device.Layout{BlockLen: bl, Tables: []int32{4, 1, 2, 5},
		Seqs: []device.AttnSeq{{Row: 0, N: 1, Pos: 6, Table: 0, Blocks: 2}, {Row: 1, N: 3, Pos: 2, Table: 2, Blocks: 2}}}
	slots := []int32{1*bl + 2, 2*bl + 2, 2*bl + 3, 5 * bl}
	nrows := 4
	qq, kk, vv := f32(c.rand(nrows*qd, 1)), f32(c.rand(nrows*kvd, 1)), f32(c.rand(nrows*kvd, 1))
	c.ref.KVWrite(h64(K), h64(kk), device.Host(slots), kvd)
	c.ref.KVWrite(h64(V), h64(vv), device.Host(slots), kvd)
	wo2 := make([]float64, nrows*qd)
	c.ref.Attention(&device.Attn[float64]{Q: h64(qq), Out: h64(wo2), K: h64(K), V: h64(V), Heads: heads, KVHeads: kvh, HeadDim: hd, Scale: scale, Layout: dec})
	// The device pool starts from the same contents (other values in the slots to write),
	// then gets the rows written.
	dK, dV := c.up(kvBefore(K, slots, kvd)), c.up(kvBefore(V, slots, kvd))
	dslots := c.d.Ints(slots)
	c.d.KVWrite(dK, c.up(kk), dslots, kvd)
	c.d.KVWrite(dV, c.up(vv), dslots, kvd)
	c.near("kv write", c.down(dK), K, 0)
	dec.Desc, dec.Tab = c.d.Ints(dec.Pack()), c.d.Ints(dec.Tables)
	do2 := c.d.Alloc(nrows * qd)
	c.d.Attention(&device.Attn[float32]{Q: c.up(qq), Out: do2, K: dK, V: dV, Heads: heads, KVHeads: kvh, HeadDim: hd, Scale: float32(scale), Layout: dec})
	c.near("attention (paged) output", c.down(do2), wo2, c.tol.Attention)
	c.err("attention")
	c.attentionChunk(heads, kvh, hd)
	if device.KeepsStats(c.d) {
		// Sequences longer than the tiles a device may use (64 rows, 32 keys), head_dims
		// that are not a multiple of 16 or are, 3 and 2 query heads per KV head.
		for _, sh := range [][2]int{{6, 24}, {4, 64}} {
			c.attentionStats(sh[0], 2, sh[1], []int{70, 5, 131})
		}
	}
}

// attentionChunk checks a prefill chunk over paged keys: 20 rows continuing a sequence at
// position 9 (from 8 blocks of 4 positions, out of order in the pool) beside one
// decoding row, nothing kept.
func (c *checker) attentionChunk(heads, kvh, hd int) {
	qd, kvd := heads*hd, kvh*hd
	scale := 1 / math.Sqrt(float64(hd))
	const bl, blocks = 4, 12
	tables := []int32{7, 2, 11, 0, 5, 9, 3, 10, 6}
	l := &device.Layout{BlockLen: bl, Tables: tables,
		Seqs: []device.AttnSeq{{Row: 0, N: 20, Pos: 9, Table: 0, Blocks: 8}, {Row: 20, N: 1, Pos: 3, Table: 8, Blocks: 1}}}
	rows := 21
	q, K, V := f32(c.rand(rows*qd, 1)), f32(c.rand(blocks*bl*kvd, 1)), f32(c.rand(blocks*bl*kvd, 1))
	wo := make([]float64, rows*qd)
	c.ref.Attention(&device.Attn[float64]{Q: h64(q), Out: h64(wo), K: h64(K), V: h64(V), Heads: heads, KVHeads: kvh, HeadDim: hd,
		Scale: scale, Layout: l})
	l.Desc, l.Tab = c.d.Ints(l.Pack()), c.d.Ints(l.Tables)
	do := c.d.Alloc(rows * qd)
	c.d.Attention(&device.Attn[float32]{Q: c.up(q), Out: do, K: c.up(K), V: c.up(V), Heads: heads, KVHeads: kvh, HeadDim: hd,
		Scale: float32(scale), Layout: l})
	c.err("attention (paged chunk)")
	c.near("attention (paged chunk) output", c.down(do), wo, c.tol.Attention)
}

// attentionStats checks Attention and AttentionBack with Stats on a training layout of
// sequences of the given lengths.
func (c *checker) attentionStats(heads, kvh, hd int, lens []int) {
	qd, kvd := heads*hd, kvh*hd
	scale := 1 / math.Sqrt(float64(hd))
	l := &device.Layout{}
	rows := 0
	for _, n := range lens {
		l.Seqs = append(l.Seqs, device.AttnSeq{Row: rows, N: n, KRow: rows})
		rows += n
	}
	name := fmt.Sprintf("attention with stats (%d heads, %d KV heads of %d)", heads, kvh, hd)
	q, k, v := f32(c.rand(rows*qd, 1)), f32(c.rand(rows*kvd, 1)), f32(c.rand(rows*kvd, 1))
	wo, wl := make([]float64, rows*qd), make([]float64, l.StatsLen(heads))
	ra := &device.Attn[float64]{Q: h64(q), Out: h64(wo), K: h64(k), V: h64(v), Heads: heads, KVHeads: kvh, HeadDim: hd,
		Scale: scale, Layout: l, P: h64(wl), Stats: true}
	c.ref.Attention(ra)
	do, dl := c.d.Alloc(rows*qd), c.d.Alloc(l.StatsLen(heads))
	l.Desc = c.d.Ints(l.Pack())
	da := &device.Attn[float32]{Q: c.up(q), Out: do, K: c.up(k), V: c.up(v), Heads: heads, KVHeads: kvh, HeadDim: hd,
		Scale: float32(scale), Layout: l, P: dl, Stats: true}
	c.d.Attention(da)
	c.err(name)
	c.near(name+": output", c.down(do), wo, c.tol.Attention)
	c.near(name+": log-sum-exps", c.down(dl), wl, c.tol.Attention)
	dout := f32(c.rand(rows*qd, 1))
	wdq, wdk, wdv := make([]float64, rows*qd), make([]float64, rows*kvd), make([]float64, rows*kvd)
	ra.P = h64(f32(wl))
	c.ref.AttentionBack(ra, h64(wdq), h64(wdk), h64(wdv), h64(dout))
	// The gradients overwrite what the buffers held.
	gdq, gdk, gdv := c.up(c.rand(rows*qd, 1)), c.up(c.rand(rows*kvd, 1)), c.up(c.rand(rows*kvd, 1))
	c.d.AttentionBack(da, gdq, gdk, gdv, c.up(dout))
	c.err(name + " backward")
	c.near(name+": dq", c.down(gdq), wdq, c.tol.Attention)
	c.near(name+": dk", c.down(gdk), wdk, c.tol.Attention)
	c.near(name+": dv", c.down(gdv), wdv, c.tol.Attention)
	// Without the forward's output (a device may read it), the same gradients.
	nb := *da
	nb.Out = device.Tensor[float32]{}
	c.d.AttentionBack(&nb, gdq, gdk, gdv, c.up(dout))
	c.err(name + " backward without the output")
	c.near(name+": dq without the output", c.down(gdq), wdq, c.tol.Attention)
	c.near(name+": dk without the output", c.down(gdk), wdk, c.tol.Attention)
	c.near(name+": dv without the output", c.down(gdv), wdv, c.tol.Attention)
}

// kvBefore is the pool as it was before rows were written to slots (the written slots
// get other values, so a missing write shows).
func kvBefore(pool []float64, slots []int32, w int) []float64 {
	out := append([]float64(nil), pool...)
	for _, s := range slots {
		for j := 0; j < w; j++ {
			out[int(s)*w+j] = 7
		}
	}
	return out
}

func (c *checker) loss(t *testing.T) {
	rows, cols := 6, 50
	lp := f32(c.rand(rows*cols, 2))
	c.ref.LogSoftmax(h64(lp), rows, cols)
	lp = f32(lp)
	g := &device.XentGrad{Rows: []int32{0, 2, 5}, Sums: []float64{-1.5, 0.25, 2},
		Idx: []int64{3, 2*int64(cols) + 7, 2*int64(cols) + 7, 5*int64(cols) + 49}, Vals: []float64{-1, 0.5, 0.25, 2}}
	want := make([]float64, rows*cols)
	c.ref.XentBack(h64(want), h64(lp), cols, g)
	got := c.d.Alloc(rows * cols)
	c.d.XentBack(got, c.up(lp), cols, g)
	c.near("xent back", c.down(got), want, c.tol.Elementwise)
	c.err("loss")
}

func (c *checker) sampling(t *testing.T) {
	rows, cols := 3, 1000
	logits := f32(c.rand(rows*cols, 2))
	dl := c.up(logits)
	// Unlimited draws visit tokens in id order on every device, so they agree token for
	// token; greedy draws are the argmax.
	var draws []device.Draw
	for r := 0; r < rows; r++ {
		for _, u := range []float64{0.013, 0.31, 0.77, 0.999} {
			draws = append(draws, device.Draw{Row: r, Temperature: 0.8, TopP: 1, U: u})
		}
		draws = append(draws, device.Draw{Row: r, Temperature: 0, TopP: 1})
	}
	wt, wl := c.ref.Sample(h64(logits), cols, draws)
	gt, gl := c.d.Sample(dl, cols, draws)
	for i := range draws {
		if gt[i] != wt[i] || math.Abs(float64(gl[i]-wl[i])) > 1e-4 {
			t.Fatalf("draw %d %+v: token %d logprob %v, want %d %v", i, draws[i], gt[i], gl[i], wt[i], wl[i])
		}
	}
	// Truncated draws: the token must be among the kept ones, with its logprob.
	for _, dr := range []device.Draw{{Temperature: 1, TopK: 5, TopP: 1}, {Temperature: 0.7, TopK: -1, TopP: 0.3}, {Temperature: 1.3, TopK: 50, TopP: 0.6}} {
		for _, u := range []float64{0, 0.2, 0.5, 0.9999} {
			dr.U, dr.Row = u, 1
			tok, lp := c.d.Sample(dl, cols, []device.Draw{dr})
			keep := kept(logits[cols:2*cols], dr)
			if !keep[int(tok[0])] {
				t.Fatalf("draw %+v gave token %d, outside the %d kept", dr, tok[0], len(keep))
			}
			if l := scaledLogprob(logits[cols:2*cols], dr.Temperature, int(tok[0])); math.Abs(float64(lp[0])-l) > 1e-4 {
				t.Fatalf("draw %+v: logprob %v, want %v", dr, lp[0], l)
			}
		}
	}
	// Top-k of log-probabilities.
	lp := append([]float64(nil), logits...)
	c.ref.LogSoftmax(h64(lp), rows, cols)
	dlp := c.up(lp)
	wt2, wv2 := c.ref.TopK(h64(f32(lp)), cols, []int32{2, 0}, 7)
	gt2, gv2 := c.d.TopK(dlp, cols, []int32{2, 0}, 7)
	for i := range wt2 {
		if gt2[i] != wt2[i] || math.Abs(float64(gv2[i])-wv2[i]) > 1e-6 {
			t.Fatalf("top-k entry %d: %d %v, want %d %v", i, gt2[i], gv2[i], wt2[i], wv2[i])
		}
	}
	c.err("sampling")
}

// kept is the set of tokens a truncated draw may return (ties at the edge included).
func kept(logits []float64, d device.Draw) map[int]bool {
	n := len(logits)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return logits[idx[a]] > logits[idx[b]] })
	k := n
	if d.TopK > 0 && d.TopK < n {
		k = d.TopK
	}
	var tot float64
	for _, i := range idx[:k] {
		tot += math.Exp(scaledLogprob(logits, d.Temperature, i))
	}
	keep := map[int]bool{}
	var cum float64
	for j, i := range idx[:k] {
		keep[i] = true
		cum += math.Exp(scaledLogprob(logits, d.Temperature, i)) / tot
		if cum >= d.TopP && (j+1 >= k || logits[idx[j+1]] != logits[i]) {
			break
		}
	}
	return keep
}

func scaledLogprob(logits []float64, temp float64, tok int) float64 {
	m := math.Inf(-1)
	for _, v := range logits {
		m = math.Max(m, v/temp)
	}
	var s float64
	for _, v := range logits {
		s += math.Exp(v/temp - m)
	}
	return logits[tok]/temp - m - math.Log(s)
}
