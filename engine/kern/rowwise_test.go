package kern

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestGemmRowwise checks that GemmRowwise's C[i,j] equals, bit for bit, the same element
// computed as a 1-row product over its own columns and, with B not transposed (attention's
// P·V), only its first kk terms (the rest of its A row zero), with and without the assembly, B transposed or not, k below and
// above the 256-deep block, with the AVX-512 tile and without; and that it agrees with
// Gemm to rounding. Products of at most six rows take gemmSmall, larger ones gemmBlocks'
// tiles: the 9-, 13-, 48- and 96-row products against their rows alone check that both
// give the same bits.
func TestGemmRowwise(t *testing.T) {
	defer func(v int) { wideForce = v }(wideForce)
	for _, level := range []struct {
		avx  bool
		wide int
	}{{true, 1}, {true, -1}, {false, 0}} {
		avx := level.avx
		wideForce = level.wide
		old := useAVX2
		useAVX2 = useAVX2 && avx
		for _, bT := range []bool{true, false} {
			for _, sh := range []struct{ m, n, k int }{{1, 7, 64}, {3, 40, 64}, {6, 48, 300}, {9, 40, 64}, {48, 33, 300}, {13, 64, 530}, {96, 17, 256}} {
				rng := rand.New(rand.NewPCG(uint64(sh.m), uint64(sh.k)))
				a := make([]float32, sh.m*sh.k)
				b := make([]float32, sh.k*sh.n)
				for i := range a {
					a[i] = float32(rng.NormFloat64())
				}
				for i := range b {
					b[i] = float32(rng.NormFloat64())
				}
				// Row i keeps only its first kk terms, as an attention row its keys.
				kk := func(i int) int { return sh.k - (sh.m-1-i)*sh.k/(2*sh.m) }
				for i := 0; i < sh.m; i++ {
					clear(a[i*sh.k+kk(i) : i*sh.k+sh.k])
				}
				ldb := sh.n
				if bT {
					ldb = sh.k
				}
				c := make([]float32, sh.m*sh.n)
				GemmRowwise(c, a, b, sh.m, sh.n, sh.k, sh.n, sh.k, ldb, bT)
				ref := make([]float32, sh.m*sh.n)
				Gemm(ref, a, b, sh.m, sh.n, sh.k, sh.n, sh.k, ldb, false, bT, false)
				for i := 0; i < sh.m; i++ {
					for _, j := range []int{0, sh.n / 2, sh.n - 1} {
						one := make([]float32, j+1)
						ki := kk(i)
						if bT {
							ki = sh.k // a transposed B's k is not cut (the scores' head dimension)
						}
						// The row alone: its own k (B's leading rows, or each column's leading
						// terms), the first j+1 columns.
						GemmRowwise(one, a[i*sh.k:], b, 1, j+1, ki, j+1, sh.k, ldb, bT)
						if math.Float32bits(one[j]) != math.Float32bits(c[i*sh.n+j]) {
							t.Fatalf("avx %v wide %d bT %v %v: C[%d,%d] = %v in the product, %v alone", avx, level.wide, bT, sh, i, j, c[i*sh.n+j], one[j])
						}
						if d := math.Abs(float64(c[i*sh.n+j] - ref[i*sh.n+j])); d > 1e-4*(1+math.Abs(float64(ref[i*sh.n+j]))) {
							t.Fatalf("avx %v bT %v %v: C[%d,%d] = %v, Gemm %v", avx, bT, sh, i, j, c[i*sh.n+j], ref[i*sh.n+j])
						}
					}
				}
			}
		}
		useAVX2 = old
	}
}
