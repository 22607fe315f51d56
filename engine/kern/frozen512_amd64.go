//go:build amd64 && !purego

package kern

import "golang.org/x/sys/cpu"

// useDPBF16 routes products of two or more rows with bfloat16 weights to tileDPBF16
// (frozen512_amd64.s): AVX-512 with its BF16 extension, and VL for the reduction's
// 256-bit forms of the upper registers. A variable so tests can force the AVX2 path.
var useDPBF16 = useAVX512 && cpu.X86.HasAVX512BF16 && cpu.X86.HasAVX512VL

// tileDPBF16 computes the 4×4 tile out[4r+j] = Σ_p a_r[p]·w_j[p] over 32·k32 elements
// of four bfloat16 rows of A (lda bytes apart) and four of W (ldw bytes apart).
//
//go:noescape
func tileDPBF16(a *uint16, lda int, w *uint16, ldw, k32 int, out *float32)

// tileF32x512 is tileDPBF16 for float32 rows (16·k16 elements) with 16-wide FMAs.
//
//go:noescape
func tileF32x512(a *float32, lda int, w *float32, ldw, k16 int, out *float32)

// tile1F32x512 is row 0 of tileF32x512 alone: out[j] = Σ_p a[p]·w_j[p], bit for bit.
//
//go:noescape
func tile1F32x512(a *float32, w *float32, ldw, k16 int, out *float32)

// dotsF32x512 sets out[r] = Σ_p a[p]·w[r·16·k16+p] for rows rows of W, each bit for
// bit one output of tileF32x512.
//
//go:noescape
func dotsF32x512(a, w *float32, k16, rows int, out *float32)

// dotsBF16x512 is dotsBF16AVX with 16-wide vectors, for n a multiple of 32.
//
//go:noescape
func dotsBF16x512(x *float32, w *uint16, n, rows int, out *float32)

// widenQ8AVX512 is widenQ8AVX with 16-wide vectors.
//
//go:noescape
func widenQ8AVX512(dst *float32, blk *byte, nb int)

// widenQ4AVX512 is widenQ4AVX with 16-wide vectors.
//
//go:noescape
func widenQ4AVX512(dst *float32, blk *byte, nb int)

// dotsQ5x512 sets out[r] = Σ_b d_b·Σ_j x_j·(q_j − 16) for rows consecutive rows of nb
// Q5_0 blocks at blk (AVX-512F).
//
//go:noescape
func dotsQ5x512(x *float32, blk *byte, nb, rows int, out *float32)

// dotsQ4Kx512 sets out[r] = Σ x·w for rows consecutive rows of nb Q4_K super-blocks at
// blk, their scales and mins unpacked in sc by unpackQ4KScales (AVX-512F).
//
//go:noescape
func dotsQ4Kx512(x *float32, blk *byte, sc *float32, nb, rows int, out *float32)

// dotsQ6Kx512 is dotsQ4Kx512 for Q6_K super-blocks, their scales unpacked in sc by
// unpackQ6KPairs.
//
//go:noescape
func dotsQ6Kx512(x *float32, blk *byte, sc *float32, nb, rows int, out *float32)

// dotsBF16z sets out[r] = Σ_p x[p]·w[r·16·k16+p] for rows bfloat16 rows of W, each bit
// for bit dotsF32x512 over the widened row.
//
//go:noescape
func dotsBF16z(x *float32, w *uint16, k16, rows int, out *float32)
