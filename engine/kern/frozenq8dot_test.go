package kern

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestQ8DotsEdges checks the one-row dots at every level bit for bit against q8RefNT
// where the inputs are at their limits: weights of −128 and 127 (the offset to unsigned
// must not overflow), activations that quantise to ±127 and to −128 (NaN, an infinity),
// all-zero blocks, 1 to 9 blocks (the assembly's groups of four and the single blocks
// after them), odd and even rows of W; and through FrozenMatMulNTShared beside a bf16
// product, which prepares the same row its own way.
func TestQ8DotsEdges(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 7))
	for nb := 1; nb <= 9; nb++ {
		for _, n := range []int{1, 2, 5, 16} {
			k := nb * QBlock
			w := NewFrozen(randSlice(rng, n*k), n, k, Q8_0)
			for j := 0; j < n; j++ { // extreme bytes in every row's first block
				blk := w.blk[j*nb*(2+QBlock):]
				blk[2], blk[3], blk[4] = 0x80, 0x7f, 0x80
			}
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
						t.Fatalf("%s nb=%d n=%d: C[%d] = %g, want %g", level, nb, n, j, c[j], want[j])
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
						t.Fatalf("%s nb=%d n=%d shared: C[%d] = %g, %g; want %g, %g", level, nb, n, j, cq[j], cb[j], want[j], cb1[j])
					}
				}
			}
		}
	}
	// A NaN and an infinity in A: their blocks' scales are NaN and +Inf, the outputs NaN
	// as q8RefNT's (and every float path's).
	const n, k = 3, 4 * QBlock
	w := NewFrozen(randSlice(rng, n*k), n, k, Q8_0)
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		a := randSlice(rng, k)
		a[70] = v
		want := q8RefNT(a, w, 1)
		for _, level := range q8Levels() {
			c := make([]float32, n)
			atQ8Level(level, func() { FrozenMatMulNT(c, a, w, 1, false) })
			for j := range c {
				if math.Float32bits(c[j]) != math.Float32bits(want[j]) && !(c[j] != c[j] && want[j] != want[j]) {
					t.Fatalf("%s A holding %g: C[%d] = %g, want %g", level, v, j, c[j], want[j])
				}
			}
		}
	}
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
// input the dots read (a byte of A, A's scale, a correction, a weight, a weight's
// scale) changes the output at every level that reads it (the portable dots sum
// Σq_a·q_w directly and read no correction).
func TestQ8DotsMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	const n, nb = 3, 6
	w := NewFrozen(randSlice(rng, n*nb*QBlock), n, nb*QBlock, Q8_0)
	row := make([]float32, q8RowLen(nb*QBlock))
	quantRow(row, randSlice(rng, nb*QBlock))
	run := func(level string, row []float32, blk []byte) []float32 {
		out := make([]float32, n)
		d, c, q := q8Row(row, nb)
		atQ8Level(level, func() { dotsQ8(q, c, d, blk, nb, out) })
		return out
	}
	type mutation struct {
		name       string
		correction bool
		f          func(row []float32, blk []byte)
	}
	muts := []mutation{
		{"A byte", false, func(row []float32, _ []byte) { _, _, q := q8Row(row, nb); q[5*QBlock+31]++ }},
		{"A scale", false, func(row []float32, _ []byte) { d, _, _ := q8Row(row, nb); d[4] *= 1.5 }},
		{"correction", true, func(row []float32, _ []byte) { _, c, _ := q8Row(row, nb); c[1] += 128 }},
		{"weight", false, func(_ []float32, blk []byte) { blk[(2*nb+5)*(2+QBlock)+2+17]++ }},
		{"weight scale", false, func(_ []float32, blk []byte) { blk[(nb+3)*(2+QBlock)+1] ^= 0x04 }},
	}
	for _, level := range q8Levels() {
		base := run(level, row, w.blk)
		for _, mu := range muts {
			if mu.correction && level == "portable" {
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
				t.Errorf("%s: changing the %s left every output as it was", level, mu.name)
			}
		}
	}
}
