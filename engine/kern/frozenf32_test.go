package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestFrozenF32RowAlone checks that a product with f32 weights of fewer rows than the
// tiles' bound gives each row of C bit for bit what the row gives alone (a decode step
// after a cached prefix against the same row in a prompt), on the AVX-512 tiles where
// the machine has them and on the AVX2 tiles; rows of W not a multiple of the 4-row tile
// included. The portable and NEON paths do not promise it (they are skipped).
func TestFrozenF32RowAlone(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, level := range []string{"native", "avx2"} {
		atLevel(level, func() {
			if !useTileF32 && !useAVX512 {
				t.Logf("%s: no float32 tiles on this machine (portable or NEON products; row independence not promised)", level)
				return
			}
			maxRows := f32TileMaxRows
			if useAVX512 {
				maxRows = zTileMaxRows
			}
			for _, s := range [][2]int{{70, 576}, {47, 64}, {9, 1536}} {
				n, k := s[0], s[1]
				w := NewFrozen(randSlice(rng, n*k), n, k, F32)
				for _, m := range []int{2, 3, 4, 5, 7, 16, 31, maxRows - 1} {
					a := randSlice(rng, m*k)
					c := make([]float32, m*n)
					FrozenMatMulNT(c, a, w, m, false)
					one := make([]float32, n)
					for i := 0; i < m; i++ {
						FrozenMatMulNT(one, a[i*k:(i+1)*k], w, 1, false)
						for j := range one {
							if math.Float32bits(one[j]) != math.Float32bits(c[i*n+j]) {
								t.Fatalf("%s %dx%dx%d: C[%d,%d] = %v in the product, %v alone", level, m, n, k, i, j, c[i*n+j], one[j])
							}
						}
					}
				}
			}
		})
	}
}

// BenchmarkFrozenF32Decode times f32 products of SmolLM2's MLP up projection (1536×576)
// with 1 and 16 rows on all threads: W (3.5 MB) from memory or L3, as a decode step.
func BenchmarkFrozenF32Decode(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	n, k := 1536, 576
	w := NewFrozen(randSlice(rng, n*k), n, k, F32)
	for _, m := range []int{1, 16} {
		a, c := randSlice(rng, m*k), make([]float32, m*n)
		b.Run(fmt.Sprintf("m%d", m), func(b *testing.B) {
			b.SetBytes(int64(4 * n * k))
			for i := 0; i < b.N; i++ {
				FrozenMatMulNT(c, a, w, m, false)
			}
		})
	}
}

func BenchmarkFrozenF32DecodePaths(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	n, k := 1536, 576
	w := NewFrozen(randSlice(rng, n*k), n, k, F32)
	a, c := randSlice(rng, k), make([]float32, n)
	b.Run("z", func(b *testing.B) {
		b.SetBytes(int64(4 * n * k))
		for i := 0; i < b.N; i++ {
			w.zProduct(c, a, 1, false)
		}
	})
	b.Run("avx2tile", func(b *testing.B) {
		b.SetBytes(int64(4 * n * k))
		for i := 0; i < b.N; i++ {
			split(n, n*k, 4, func(lo, hi int) { w.f32Tiles(c, a, 1, lo, hi, false) })
		}
	})
	b.Run("old", func(b *testing.B) {
		b.SetBytes(int64(4 * n * k))
		for i := 0; i < b.N; i++ {
			matMulNT32(c, a, w.f32, 1, n, k, false)
		}
	})
}
