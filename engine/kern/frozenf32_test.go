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
// included. The portable and NEON paths do not promise it (they are skipped). bf16
// weights promise it on the widened AVX-512 tiles (bf16tiles.go), forced here where
// the machine has AVX-512.
func TestFrozenF32RowAlone(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	defer func(old int) { bf16ZForce = old }(bf16ZForce)
	bf16ZForce = 1
	for _, f := range []WeightFormat{F32, BF16} {
		for _, level := range []string{"native", "avx2"} {
			atLevel(level, func() {
				switch {
				case f == BF16 && !useAVX512:
					t.Logf("%s %s: no AVX-512 (row independence not promised for bf16)", f, level)
					return
				case !useTileF32 && !useAVX512:
					t.Logf("%s: no float32 tiles on this machine (portable or NEON products; row independence not promised)", level)
					return
				}
				maxRows := f32TileMaxRows
				if useAVX512 {
					maxRows = zTileMaxRows
				}
				for _, s := range [][2]int{{70, 576}, {47, 64}, {9, 1536}} {
					n, k := s[0], s[1]
					w := NewFrozen(randSlice(rng, n*k), n, k, f)
					for _, m := range []int{2, 3, 4, 5, 7, 16, 31, 128, maxRows - 1} {
						if m >= maxRows {
							continue
						}
						a := randSlice(rng, m*k)
						c := make([]float32, m*n)
						FrozenMatMulNT(c, a, w, m, false)
						one := make([]float32, n)
						for i := 0; i < m; i++ {
							FrozenMatMulNT(one, a[i*k:(i+1)*k], w, 1, false)
							for j := range one {
								if math.Float32bits(one[j]) != math.Float32bits(c[i*n+j]) {
									t.Fatalf("%s %s %dx%dx%d: C[%d,%d] = %v in the product, %v alone", f, level, m, n, k, i, j, c[i*n+j], one[j])
								}
							}
						}
					}
				}
			})
		}
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

// TestRowDots checks the one-row products that read W's rows in one call (dotsBF16AVX,
// dotsF32AVX, dotsF32x512) bit for bit against one dot per row (dotRow for bfloat16, the
// same product's own kernels otherwise), with and without accumulating into C, over more
// rows than their 64-row accumulation buffer and rows with a 16-element tail.
func TestRowDots(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, level := range kernelLevels {
		atLevel(level, func() {
			for _, f := range []WeightFormat{F32, BF16} {
				for _, s := range [][2]int{{150, 576}, {70, 48}, {5, 32}} {
					n, k := s[0], s[1]
					w := NewFrozen(randSlice(rng, n*k), n, k, f)
					a := randSlice(rng, k)
					x := forwardActs(w, a, 1)
					init := randSlice(rng, n)
					two := make([]float32, 2*n) // the row among two: for f32, the tiles' sums
					FrozenMatMulNT(two, append(append([]float32(nil), a...), a...), w, 2, false)
					for _, acc := range []bool{false, true} {
						c := append([]float32(nil), init...)
						FrozenMatMulNT(c, a, w, 1, acc)
						for j := 0; j < n; j++ {
							var want float32
							if f == BF16 {
								want = w.dotRow(x, j)
							} else {
								want = two[j]
							}
							if acc {
								want += init[j]
							}
							if math.Float32bits(c[j]) != math.Float32bits(want) && (f == BF16 || w.f32Dottable()) {
								t.Fatalf("%s %s %dx%d acc=%v: C[%d] = %v, want %v", level, f, n, k, acc, j, c[j], want)
							}
						}
					}
				}
			}
		})
	}
}

// BenchmarkRowDots times a one-row product on one goroutine, W (1536×576) in the LLC:
// the row dots in one call against a call per row. Weights per CPU nanosecond.
func BenchmarkRowDots(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	n, k := 1536, 576
	src := randSlice(rng, n*k)
	x := randSlice(rng, k)
	c := make([]float32, n)
	for _, f := range []WeightFormat{F32, BF16} {
		w := NewFrozen(src, n, k, f)
		for _, calls := range []string{"one", "per-row"} {
			b.Run(f.String()+"/"+calls, func(b *testing.B) {
				t0 := cpuTime()
				for i := 0; i < b.N; i++ {
					switch {
					case calls == "per-row":
						for j := range c {
							c[j] = w.dotRow(x, j)
						}
					case f == BF16:
						w.bf16Dots(c, x, 0, n, false)
					default:
						w.f32Dots(c, x, 0, n, false)
					}
				}
				b.ReportMetric(float64(n*k)*float64(b.N)/float64((cpuTime()-t0).Nanoseconds()), "weights/cpu-ns")
			})
		}
	}
}

// BenchmarkFrozenGEMVLevels is BenchmarkFrozenGEMV (W leaves the cache) for bf16 and f32
// at each instruction-set level: the 16-wide one-row kernels against the 8-wide ones.
func BenchmarkFrozenGEMVLevels(b *testing.B) {
	for _, f := range []WeightFormat{BF16, F32} {
		for _, level := range kernelLevels[:2] {
			b.Run(f.String()+"/"+level, func(b *testing.B) {
				atLevel(level, func() { benchFrozen(b, f, 1, 32*1536, 576) })
			})
		}
	}
}
