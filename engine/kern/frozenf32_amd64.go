//go:build amd64 && !purego

package kern

// useTileF32 routes products with f32 Frozen weights to the float32 tiles
// (frozenf32_amd64.s). A variable so tests can force the other paths.
var useTileF32 = useAVX2

// tileF32AVX computes the 3×4 tile out[4r+j] = Σ_p a_r[p]·w_j[p] over n (a multiple of
// 8) for three rows of A and four float32 rows of W, ldw bytes apart.
//
//go:noescape
func tileF32AVX(a0, a1, a2 *float32, w *float32, ldw, n int, out *float32)

// tile1F32AVX is row 0 of tileF32AVX alone: out[j] = Σ_p a0[p]·w_j[p], bit for bit.
//
//go:noescape
func tile1F32AVX(a0 *float32, w *float32, ldw, n int, out *float32)

// dotsF32AVX sets out[r] = Σ_p a[p]·w[r·n+p] for rows rows of W (n a multiple of 8),
// each bit for bit one output of tileF32AVX.
//
//go:noescape
func dotsF32AVX(a, w *float32, n, rows int, out *float32)
