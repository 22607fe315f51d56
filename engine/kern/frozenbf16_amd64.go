//go:build amd64 && !purego

package kern

// roundBF16AVX sets dst[i] = ToBF16(src[i]) for n a multiple of 8 (AVX2).
//
//go:noescape
func roundBF16AVX(dst *uint16, src *float32, n int)

// roundWideBF16AVX sets dst[i] = FromBF16(ToBF16(src[i])) for n a multiple of 8 (AVX2).
//
//go:noescape
func roundWideBF16AVX(dst, src *float32, n int)

// hasRowDots says dotsBF16AVX is assembly here (NEON has only the one-row dot).
const hasRowDots = true

// dotsBF16AVX sets out[r] = Σ_i x[i]·w[r·n+i] for rows bfloat16 rows of n weights (a
// multiple of 16): dotBF16AVX per row, bit for bit, in one call.
//
//go:noescape
func dotsBF16AVX(x *float32, w *uint16, n, rows int, out *float32)
