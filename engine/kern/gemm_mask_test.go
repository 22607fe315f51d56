package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestGemmMaskedIsGemm checks GemmMasked against Gemm bit for bit on attention's shapes
// and ragged ones, with the operands read in place and packed, accumulating and not, at
// offsets that do not line up with the tiles, and past kSlab: with MaskRowK and MaskColK
// every element of C (the masked operand's zeros are left off the ends of the sums), with
// MaskC every wanted element (j ≤ Off+i), the others either Gemm's or untouched.
func TestGemmMaskedIsGemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	type shape struct{ m, n, k, off int }
	// Attention's products over a block of m query rows seeing off+i+1 keys: scores and
	// dP (MaskC: m × (off+m) × hd), P·V and dS·K (MaskRowK: m × hd × (off+m)), dVᵀ and
	// dKᵀ (MaskColK: hd × (off+m) × m).
	for _, kind := range []MaskKind{MaskC, MaskRowK, MaskColK} {
		var shapes []shape
		for _, d := range [][2]int{{96, 0}, {96, 37}, {48, 464}, {13, 5}, {7, 0}, {100, 200}, {30, 4100}} {
			rows, off := d[0], d[1]
			switch kind {
			case MaskC:
				shapes = append(shapes, shape{rows, off + rows, 64, off}, shape{rows, off + rows, 17, off})
			case MaskRowK:
				shapes = append(shapes, shape{rows, 64, off + rows, off}, shape{rows, 20, off + rows, off})
			case MaskColK:
				shapes = append(shapes, shape{64, off + rows, rows, off}, shape{10, off + rows, rows, off})
			}
		}
		for _, s := range shapes {
			for _, acc := range []bool{false, true} {
				for _, force := range []int{1, -1, 0} {
					name := fmt.Sprintf("kind %d, %d×%d×%d, off %d, acc %v, in place %d", kind, s.m, s.n, s.k, s.off, acc, force)
					checkMasked(t, rng, name, kind, s.m, s.n, s.k, s.off, acc, force)
				}
			}
		}
	}
}

func checkMasked(t *testing.T, rng *rand.Rand, name string, kind MaskKind, m, n, k, off int, acc bool, force int) {
	t.Helper()
	// Strides wider than the matrices (attention reads rows of wider buffers), the
	// transposes attention uses: scores A·Bᵀ, P·V A·B, dVᵀ Aᵀ·B.
	aT, bT := false, false
	switch kind {
	case MaskC:
		bT = true
	case MaskColK:
		aT = true
	}
	lda, ldb, ldc := k+3, n+5, n+2
	if aT {
		lda = m + 3
	}
	if bT {
		ldb = k + 5
	}
	rnd := func(x int) []float32 {
		v := make([]float32, x)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	arows, brows := m, k
	if aT {
		arows = k
	}
	if bT {
		brows = n
	}
	a, b := rnd(arows*lda), rnd(brows*ldb)
	// The masked operand's zeros.
	switch kind {
	case MaskRowK: // A[i,p] = 0 for p > off+i
		for i := 0; i < m; i++ {
			for p := off + i + 1; p < k; p++ {
				a[i*lda+p] = 0
			}
		}
	case MaskColK: // B[p,j] = 0 for j > off+p
		for p := 0; p < k; p++ {
			for j := off + p + 1; j < n; j++ {
				b[p*ldb+j] = 0
			}
		}
	}
	c0 := rnd(m * ldc)
	want := append([]float32(nil), c0...)
	got := append([]float32(nil), c0...)
	withInPlace(force, func() {
		Gemm(want, a, b, m, n, k, ldc, lda, ldb, aT, bT, acc)
		GemmMasked(got, a, b, m, n, k, ldc, lda, ldb, aT, bT, acc, Mask{Kind: kind, Off: off})
	})
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			g, w, before := got[i*ldc+j], want[i*ldc+j], c0[i*ldc+j]
			same := math.Float32bits(g) == math.Float32bits(w)
			if kind == MaskC && j > off+i {
				same = same || math.Float32bits(g) == math.Float32bits(before)
			}
			if !same {
				t.Fatalf("%s: C[%d,%d] = %v, Gemm gives %v", name, i, j, g, w)
			}
		}
	}
}

// TestGemmRowwiseMaskedIsGemmRowwise checks the row-independent product under a mask
// against the unmasked one bit for bit: attention's prompt rows over the paged cache,
// scores (MaskC, the wanted elements) and P·V (MaskRowK, k past kc: blocks added in
// order, each under the mask shifted by its start).
func TestGemmRowwiseMaskedIsGemmRowwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	rnd := func(x int) []float32 {
		v := make([]float32, x)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	for _, d := range [][2]int{{96, 0}, {48, 530}, {13, 250}, {7, 0}} {
		rows, off := d[0], d[1]
		nk, hd := off+rows, 64
		q, keys := rnd(rows*hd), rnd(nk*hd)
		want, got := rnd(rows*nk), make([]float32, rows*nk)
		copy(got, want)
		GemmRowwise(want, q, keys, rows, nk, hd, nk, hd, hd, true)
		GemmRowwiseMasked(got, q, keys, rows, nk, hd, nk, hd, hd, true, Mask{Kind: MaskC, Off: off})
		p := rnd(rows * nk)
		for i := 0; i < rows; i++ {
			for j := 0; j < nk; j++ {
				if j <= off+i && math.Float32bits(got[i*nk+j]) != math.Float32bits(want[i*nk+j]) {
					t.Fatalf("scores %d rows after %d: [%d,%d] = %v, unmasked %v", rows, off, i, j, got[i*nk+j], want[i*nk+j])
				}
				if j > off+i {
					p[i*nk+j] = 0
				}
			}
		}
		ow, og := make([]float32, rows*hd), make([]float32, rows*hd)
		GemmRowwise(ow, p, keys, rows, hd, nk, hd, nk, hd, false)
		GemmRowwiseMasked(og, p, keys, rows, hd, nk, hd, nk, hd, false, Mask{Kind: MaskRowK, Off: off})
		for i := range ow {
			if math.Float32bits(og[i]) != math.Float32bits(ow[i]) {
				t.Fatalf("P·V %d rows after %d: element %d = %v, unmasked %v", rows, off, i, og[i], ow[i])
			}
		}
	}
}
