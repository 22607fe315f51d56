package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestQ8DotsEdges checks the one-row dots (q8_0, q5_0) at every level bit for bit
// against q8RefNT where the inputs are at their limits: weights of −128 and 127 (q8_0:
// the offset to unsigned must not overflow), q of 0 and 31 (q5_0: −16 and 15), activations
// that quantise to ±127 and to −128 (NaN, an infinity), all-zero blocks, 1 to 9 blocks
// (the assembly's groups of four and the single blocks after them), odd and even rows
// of W; and through FrozenMatMulNTShared beside a bf16 product, which prepares the same
// row its own way.
func TestQ8DotsEdges(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 7))
	for _, f := range []WeightFormat{Q8_0, Q5_0} {
		for nb := 1; nb <= 9; nb++ {
			for _, n := range []int{1, 2, 5, 16, 48} {
				k := nb * QBlock
				w := newFrozenAs(t, f, randSlice(rng, n*k), n, k)
				if w == nil {
					continue
				}
				bb := f.blockBytes()
				editBlocks(w, func(all []byte) {
					for j := 0; j < n; j++ { // extreme weights in every row's first block
						blk := all[j*nb*bb:]
						if f == Q8_0 {
							blk[2], blk[3], blk[4] = 0x80, 0x7f, 0x80
						} else {
							blk[6] = 0xF0 // weight 0's low bits 0, weight 16's 15
							blk[2] &^= 1  // weight 0's fifth bit clear: q = 0
							blk[4] |= 3   // weight 16's set: q = 31, and weight 17's
							blk[7] = 0xFF // weight 17: 31; weight 1: 15 or 31
						}
					}
				})
				a := randSlice(rng, k)
				a[1] = -a[0] * 50 // this block's max, quantised to −127
				if nb > 1 {
					clear(a[QBlock : 2*QBlock])
				}
				want := q8RefNT(a, w, 1)
				for _, level := range q8Levels() {
					c := make([]float32, n)
					atQ8Level(level, func() { FrozenMatMulNT(c, a, w, 1, false) })
					for j := range c {
						if math.Float32bits(c[j]) != math.Float32bits(want[j]) {
							t.Fatalf("%s %s nb=%d n=%d: C[%d] = %g, want %g", f, level, nb, n, j, c[j], want[j])
						}
					}
					if n < 2 {
						continue
					}
					bw := NewFrozen(randSlice(rng, n*k), n, k, BF16)
					cq, cb, cb1 := make([]float32, n), make([]float32, n), make([]float32, n)
					atQ8Level(level, func() {
						FrozenMatMulNTShared(a, []FrozenOut{{C: cq, W: w}, {C: cb, W: bw}}, 1)
						FrozenMatMulNT(cb1, a, bw, 1, false)
					})
					for j := range cq {
						if math.Float32bits(cq[j]) != math.Float32bits(want[j]) || math.Float32bits(cb[j]) != math.Float32bits(cb1[j]) {
							t.Fatalf("%s %s nb=%d n=%d shared: C[%d] = %g, %g; want %g, %g", f, level, nb, n, j, cq[j], cb[j], want[j], cb1[j])
						}
					}
				}
			}
		}
	}
	// A NaN and an infinity in A: their blocks' scales are NaN and +Inf, the outputs NaN
	// as q8RefNT's (and every float path's).
	const n, k = 3, 5 * QBlock
	for _, f := range []WeightFormat{Q8_0, Q5_0} {
		w := newFrozenAs(t, f, randSlice(rng, n*k), n, k)
		for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
			a := randSlice(rng, k)
			a[70] = v
			want := q8RefNT(a, w, 1)
			for _, level := range q8Levels() {
				c := make([]float32, n)
				atQ8Level(level, func() { FrozenMatMulNT(c, a, w, 1, false) })
				for j := range c {
					if math.Float32bits(c[j]) != math.Float32bits(want[j]) && !(c[j] != c[j] && want[j] != want[j]) {
						t.Fatalf("%s %s A holding %g: C[%d] = %g, want %g", f, level, v, j, c[j], want[j])
					}
				}
			}
		}
	}
}

// newFrozenAs is W in q8_0 or q5_0 (asked for as q4_k, which stores rows that are not
// whole super-blocks as q5_0); nil where q5_0 is asked for and the rows are whole
// super-blocks.
func newFrozenAs(t *testing.T, f WeightFormat, src []float32, n, k int) *Frozen {
	t.Helper()
	if f != Q5_0 {
		return NewFrozen(src, n, k, f)
	}
	w := NewFrozen(src, n, k, Q4_K)
	if w.Format != Q5_0 {
		return nil
	}
	return w
}

// TestQuantRowLevels checks the assembly's quantisation of a row against the portable
// one, every word of the layout (scales, corrections, bytes; a NaN scale as any NaN).
func TestQuantRowLevels(t *testing.T) {
	if !useVNNI {
		t.Skip("no AVX512-VNNI: quantRow has only the portable path here")
	}
	rng := rand.New(rand.NewPCG(3, 9))
	for _, nb := range []int{1, 2, 5, 18, 48} {
		x := randSlice(rng, nb*QBlock)
		x[0] = float32(math.NaN())
		x[len(x)-1] = float32(math.Inf(-1))
		if nb > 2 {
			clear(x[QBlock : 2*QBlock])
		}
		got, want := make([]float32, q8RowLen(len(x))), make([]float32, q8RowLen(len(x)))
		quantRow(got, x)
		useVNNI = false
		quantRow(want, x)
		useVNNI = true
		for i := range got {
			if nan := i < nb && got[i] != got[i] && want[i] != want[i]; !nan && math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("nb=%d: word %d = %#x, want %#x", nb, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
			}
		}
	}
}

// TestQ8DotsMutations checks that the comparisons above can fail: a change to any
// input the dots read (a byte of A, A's scale, a correction, a weight — for q5_0 its low
// bits and its fifth —, a weight's scale, q4_k's minimums' scale and six-bit scales and
// minimums) changes the output at every level that reads it (the Go q8_0 and q5_0 dots
// sum Σq_a·q_w directly and read no correction, nor do q6_k's).
func TestQ8DotsMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	const n, nb = 3, 6
	type mutation struct {
		name       string
		correction bool
		f          func(row []float32, blk []byte)
	}
	for _, f := range []WeightFormat{Q8_0, Q4_1, Q5_0, Q4_K, Q6_K} {
		nb := nb
		if f == Q4_K || f == Q6_K {
			nb = 16 // two super-blocks
		}
		w := newFrozenAs(t, f, randSlice(rng, n*nb*QBlock), n, nb*QBlock)
		bb, nw := f.blockBytes(), nb*QBlock/f.blockLen()
		row := make([]float32, q8RowLen(nb*QBlock))
		quantRow(row, randSlice(rng, nb*QBlock))
		run := func(level string, row []float32, blk []byte) []float32 {
			out := make([]float32, n)
			d, c, q := q8Row(row, nb)
			dots := map[WeightFormat]func([]byte, []int32, []float32, []byte, int, []float32){Q8_0: dotsQ8, Q4_1: dotsQ4, Q5_0: dotsQ5, Q4_K: dotsQ4K, Q6_K: dotsQ6K}[f]
			atQ8Level(level, func() { dots(q, c, d, blk, nw, out) })
			return out
		}
		muts := []mutation{
			{"A byte", false, func(row []float32, _ []byte) { _, _, q := q8Row(row, nb); q[5*QBlock+31]++ }},
			{"A scale", false, func(row []float32, _ []byte) { d, _, _ := q8Row(row, nb); d[4] *= 1.5 }},
			{"correction", true, func(row []float32, _ []byte) { _, c, _ := q8Row(row, nb); c[1] += 128 }},
			{"weight", false, func(_ []float32, blk []byte) { blk[(2*nw+nw-1)*bb+bb-3] ^= 0x11 }},
			{"weight scale", false, func(_ []float32, blk []byte) { blk[(nw+nw/2)*bb+1] ^= 0x04 }},
		}
		if f == Q6_K { // d is the last two bytes
			muts[4] = mutation{"weight scale", false, func(_ []float32, blk []byte) { blk[nw*bb+bb-1] ^= 0x04 }}
		}
		switch f {
		case Q4_1:
			muts = append(muts, mutation{"minimum", false, func(_ []float32, blk []byte) { blk[(nb+4)*bb+3] ^= 0x04 }})
		case Q6_K:
			muts = append(muts,
				mutation{"high bits", false, func(_ []float32, blk []byte) { blk[bb+128+40] ^= 0x40 }},
				mutation{"group scale", false, func(_ []float32, blk []byte) { blk[192+13] ^= 0x08 }})
		case Q5_0:
			muts = append(muts, mutation{"fifth bit", false, func(_ []float32, blk []byte) { blk[(nb+2)*bb+3] ^= 0x20 }})
		case Q4_K: // the minimum's scale, a sub-block's scale and minimum (six bits in two places)
			muts = append(muts,
				mutation{"dmin", false, func(_ []float32, blk []byte) { blk[nw*bb+3] ^= 0x04 }},
				mutation{"scale 1", false, func(_ []float32, blk []byte) { blk[4+1] ^= 0x02 }},
				mutation{"scale 6's high bits", false, func(_ []float32, blk []byte) { blk[bb+4+2] ^= 0x80 }},
				mutation{"minimum 5", false, func(_ []float32, blk []byte) { blk[2*bb+4+9] ^= 0x10 }})
		}
		for _, level := range q8Levels() {
			base := run(level, row, w.blk)
			for _, mu := range muts {
				// Corrections are read by q4_1's and q4_k's dots and by q8_0's and q5_0's assembly.
				if reads := f == Q4_1 || f == Q4_K || level == "vnni" && f != Q6_K; mu.correction && !reads {
					continue
				}
				r2, b2 := append([]float32(nil), row...), append([]byte(nil), w.blk...)
				mu.f(r2, b2)
				got := run(level, r2, b2)
				same := true
				for j := range got {
					same = same && math.Float32bits(got[j]) == math.Float32bits(base[j])
				}
				if same {
					t.Errorf("%s %s: changing the %s left every output as it was", f, level, mu.name)
				}
			}
		}
	}
}

// TestKDotsLevels checks the one-row dots that do not give the tiles' bits (q4_1, q4_k,
// q6_k): the assembly against the Go (dotsQ4Go, dotsQ4KGo, dotsQ6KGo) bit for bit, and
// the Go against a float64 product of the dequantised weights with the quantised row
// (the float32 tolerance of every kernel's test): 1 to 9 blocks of q4_1 (whole groups of
// four and the blocks after them), 1 to 5 super-blocks, odd and even rows, q4_1's q at 0
// and 15, q4_k's sub-block scales and minimums at 0 and 63, q6_k's scales at −128 and
// 127, an all-zero block, and a NaN in A (bits only).
func TestKDotsLevels(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 4))
	levels := []string{"portable"}
	if useVNNI {
		levels = []string{"vnni", "portable"}
	}
	for _, f := range []WeightFormat{Q4_1, Q4_K, Q6_K} {
		for nsb := 1; nsb <= 5; nsb++ {
			for _, n := range []int{1, 2, 7} {
				k := nsb * QKBlock
				if f == Q4_1 {
					k = (2*nsb - 1) * QBlock // 1 to 9 blocks: whole groups of four and blocks after them
				}
				w := NewFrozen(randSlice(rng, n*k), n, k, f)
				switch f {
				case Q4_1:
					w.blk[4], w.blk[5] = 0xF0, 0x0F // q of 0 and 15
				case Q4_K:
					blk := w.blk[:144]
					blk[4], blk[8], blk[12] = 0xFF, 0x00, 0xFF // sc0 = 63, m0 = 0, sc4/m4 from their top bits
				default:
					w.blk[192], w.blk[193+8] = 0x80, 0x7F // the first half's first scale, the second's second
				}
				for _, nan := range []bool{false, true} {
					a := randSlice(rng, k)
					if k > QBlock {
						clear(a[QBlock : 2*QBlock])
					}
					if nan {
						a[k-1] = float32(math.NaN())
					}
					got := make([][]float32, len(levels))
					for x, level := range levels {
						got[x] = make([]float32, n)
						atQ8Level(level, func() { FrozenMatMulNT(got[x], a, w, 1, false) })
					}
					name := fmt.Sprintf("%s nsb=%d n=%d nan=%v", f, nsb, n, nan)
					for j := range got[0] {
						g, p := got[0][j], got[len(got)-1][j]
						if math.Float32bits(g) != math.Float32bits(p) && !(g != g && p != p) {
							t.Fatalf("%s: C[%d] = %g on %s, %g portable", name, j, g, levels[0], p)
						}
					}
					if !nan {
						close32(t, name, got[len(got)-1], ref64NT(quantised(a), widened(w), 1, n, k), k)
					}
				}
			}
		}
	}
}

// quantised is a as the integer products see it: each block of 32 quantised by
// quantActBlock and dequantised (d_a·q_a).
func quantised(a []float32) []float32 {
	out := make([]float32, len(a))
	for p := 0; p+QBlock <= len(a); p += QBlock {
		var qs [QBlock]byte
		d := quantActBlock(&qs, a[p:p+QBlock])
		for j, q := range qs {
			out[p+j] = d * float32(int8(q^0x80))
		}
	}
	return out
}
