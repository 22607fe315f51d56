//go:build amd64 && !purego

package kern

import "golang.org/x/sys/cpu"

// useAVX2 routes the float32 kernels to the assembly in kern_amd64.s. It is a variable,
// not a constant, so tests can force the pure-Go fallback on a machine that has AVX2.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// sgemm6x16 computes the 6×16 tile C (+)= Apanel·Bpanel over k packed steps: a holds six
// floats per step, b sixteen, c is the tile's top-left element with row stride ldc. load
// adds the tile into C instead of overwriting it.
//
//go:noescape
func sgemm6x16(k int, a, b, c *float32, ldc int, load bool)

// dot32AVX returns Σ a[i]·b[i] over len(a); the caller guarantees len(b) >= len(a).
//
//go:noescape
func dot32AVX(a, b []float32) float32

// axpy32AVX computes y += alpha·x over len(x); the caller guarantees len(y) >= len(x).
//
//go:noescape
func axpy32AVX(alpha float32, x, y []float32)

// packNT16 packs a full 16-column panel of a transposed B (columns are rows of b, stride
// ldb) for 8·kb8 steps of k: d[p*16+x] = b[x*ldb+p].
//
//go:noescape
func packNT16(d, b *float32, ldb, kb8 int)

// packNN16 packs a full 16-column panel of a row-major B (row stride ldb) for kb steps
// of k: d[p*16+x] = b[p*ldb+x].
//
//go:noescape
func packNN16(d, b *float32, ldb, kb int)

// packA6 packs a full 6-row panel of a row-major A (row stride lda) for 8·kb8 steps of
// k: d[p*6+r] = a[r*lda+p].
//
//go:noescape
func packA6(d, a *float32, lda, kb8 int)

// useF16C gates the block formats' assembly, which widens their half-precision scales
// with VCVTPH2PS (every AVX2 processor has it; the check is for emulators).
var useF16C = cpu.X86.HasF16C

// dotBF16AVX returns Σ x[i]·w[i] for bfloat16 w over n, a multiple of 16.
//
//go:noescape
func dotBF16AVX(x *float32, w *uint16, n int) float32

// dotQ8AVX returns the dot of x[:32·nb] with nb Q8_0 blocks.
//
//go:noescape
func dotQ8AVX(x *float32, blk *byte, nb int) float32

// dotQ4AVX returns the dot of x[:32·nb] with nb Q4_1 blocks.
//
//go:noescape
func dotQ4AVX(x *float32, blk *byte, nb int) float32

// widenBF16AVX widens n bfloat16 (a multiple of 16) to dst.
//
//go:noescape
func widenBF16AVX(dst *float32, src *uint16, n int)

// widenQ8AVX writes the 32·nb weights of nb Q8_0 blocks to dst.
//
//go:noescape
func widenQ8AVX(dst *float32, blk *byte, nb int)

// widenQ4AVX writes the 32·nb weights of nb Q4_1 blocks to dst.
//
//go:noescape
func widenQ4AVX(dst *float32, blk *byte, nb int)

// tileBF16AVX computes the 3×4 tile out[4r+j] = Σ_p a_r[p]·w_j[p] over n (a multiple of
// 8) for three rows of A and four bfloat16 rows of W, ldw bytes apart.
//
//go:noescape
func tileBF16AVX(a0, a1, a2 *float32, w *uint16, ldw, n int, out *float32)

// tileQ8AVX is tileBF16AVX for rows of n Q8_0 blocks.
//
//go:noescape
func tileQ8AVX(a0, a1, a2 *float32, w *byte, ldw, n int, out *float32)

// tileQ4AVX is tileBF16AVX for rows of n Q4_1 blocks.
//
//go:noescape
func tileQ4AVX(a0, a1, a2 *float32, w *byte, ldw, n int, out *float32)

// useAVX512 routes the block formats' decode dots to their 16-wide versions.
var useAVX512 = useAVX2 && useF16C && cpu.X86.HasAVX512F

// dotQ8AVX512 is dotQ8AVX with 16-wide vectors.
//
//go:noescape
func dotQ8AVX512(x *float32, blk *byte, nb int) float32

// dotQ4AVX512 is dotQ4AVX with 16-wide vectors.
//
//go:noescape
func dotQ4AVX512(x *float32, blk *byte, nb int) float32

// exp32AVX sets dst[i] = exp(src[i]·scale + bias) for n elements, n a multiple of 8
// (Cephes' expf, as exp32Go).
//
//go:noescape
func exp32AVX(dst, src *float32, n int, scale, bias float32)

// max32AVX returns the largest of n floats from x (n a positive multiple of 32) and
// whether any of them is NaN; with a NaN, or −0 and +0 the largest, its m is not Max's.
//
//go:noescape
func max32AVX(x *float32, n int) (m float32, nan bool)

// exp32AVX512 is exp32AVX for n a positive multiple of 16, 16 lanes at a time, each
// result the same bits.
//
//go:noescape
func exp32AVX512(dst, src *float32, n int, scale, bias float32)

// subMul32AVX sets x[i] = p[i]·(x[i] − d)·s for n elements, n a positive multiple of 8.
//
//go:noescape
func subMul32AVX(x, p *float32, n int, d, s float32)

// swiglu32AVX is SwiGLU for n elements, n a positive multiple of 8.
//
//go:noescape
func swiglu32AVX(a, gate, up, e *float32, n int)

// swigluBack32AVX is SwiGLUBack for n elements, n a positive multiple of 8.
//
//go:noescape
func swigluBack32AVX(dg, du, da, gate, up, e *float32, n int)
