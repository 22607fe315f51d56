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

// exp32AVX sets dst[i] = exp(src[i]·scale + bias) for n elements, n a multiple of 8
// (Cephes' expf, as exp32Go).
//
//go:noescape
func exp32AVX(dst, src *float32, n int, scale, bias float32)
