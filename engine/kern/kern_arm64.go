//go:build arm64 && !purego

package kern

import "unsafe"

// useAVX2 is the switch the shared dispatch (fast.go, gemm.go, frozenmm.go, exp.go)
// reads for "the vector assembly is on"; on arm64 it routes to the NEON assembly in
// kern_arm64.s. Advanced SIMD is part of every ARMv8-A processor, so it is on unless a
// test forces the portable path (withGeneric, atLevel("portable")). The name is shared
// with amd64 so that one dispatch serves both; Path reports "neon" here.
var useAVX2 = true

// sgemm6x16 computes the 6×16 tile C (+)= Apanel·Bpanel over k packed steps: a holds six
// floats per step, b sixteen, c is the tile's top-left element with row stride ldc. load
// adds the tile into C instead of overwriting it.
//
//go:noescape
func sgemm6x16(k int, a, b, c *float32, ldc int, load bool)

// sgemm6x16s is sgemm6x16 reading A and B where they are: A[r, p] at a + r·ars + p·aps
// bytes, B's step p (16 floats) at b + p·bps bytes (gemm.go's in-place products).
//
//go:noescape
func sgemm6x16s(k int, a *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, load bool)

// dot32AVX returns Σ a[i]·b[i] over len(a); the caller guarantees len(b) >= len(a).
//
//go:noescape
func dot32AVX(a, b []float32) float32

// axpy32AVX computes y += alpha·x over len(x); the caller guarantees len(y) >= len(x).
//
//go:noescape
func axpy32AVX(alpha float32, x, y []float32)

// dotBF16AVX returns Σ x[i]·w[i] for bfloat16 w over n, a multiple of 8.
//
//go:noescape
func dotBF16AVX(x *float32, w *uint16, n int) float32

// widenBF16AVX widens n bfloat16 (a multiple of 8) to dst.
//
//go:noescape
func widenBF16AVX(dst *float32, src *uint16, n int)

// The panel packs stay in Go on arm64: they move data once per panel, and the driver
// spends its time in sgemm6x16.

func packNT16(d, b *float32, ldb, kb8 int) {
	ds := unsafe.Slice(d, kb8*8*nr)
	bs := unsafe.Slice(b, (nr-1)*ldb+kb8*8)
	for x := 0; x < nr; x++ {
		for p, v := range bs[x*ldb : x*ldb+kb8*8] {
			ds[p*nr+x] = v
		}
	}
}

func packNN16(d, b *float32, ldb, kb int) {
	ds := unsafe.Slice(d, kb*nr)
	bs := unsafe.Slice(b, (kb-1)*ldb+nr)
	for p := 0; p < kb; p++ {
		copy(ds[p*nr:p*nr+nr], bs[p*ldb:])
	}
}

func packA6(d, a *float32, lda, kb8 int) {
	ds := unsafe.Slice(d, kb8*8*mr)
	as := unsafe.Slice(a, (mr-1)*lda+kb8*8)
	for r := 0; r < mr; r++ {
		for p, v := range as[r*lda : r*lda+kb8*8] {
			ds[p*mr+r] = v
		}
	}
}

// tileBF16AVX computes the 3×4 tile out[4r+j] = Σ_p a_r[p]·w_j[p] over n (a multiple of
// 4) for three rows of A and four bfloat16 rows of W, ldw bytes apart.
//
//go:noescape
func tileBF16AVX(a0, a1, a2 *float32, w *uint16, ldw, n int, out *float32)

// useF16C gates the block formats' kernels (their scales are half precision). FCVT
// between half and single precision is part of every ARMv8-A FPU, so it is on: the Q8_0
// and Q4_1 dots, widen and 3×4 tiles are NEON (kern_arm64.s).
var useF16C = true

// dotQ8AVX returns the dot of x[:32·nb] with nb Q8_0 blocks.
//
//go:noescape
func dotQ8AVX(x *float32, blk *byte, nb int) float32

// dotQ4AVX returns the dot of x[:32·nb] with nb Q4_1 blocks.
//
//go:noescape
func dotQ4AVX(x *float32, blk *byte, nb int) float32

// widenQ8AVX writes the 32·nb weights of nb Q8_0 blocks to dst (the packed GEMM's panels).
//
//go:noescape
func widenQ8AVX(dst *float32, blk *byte, nb int)

// widenQ4AVX writes the 32·nb weights of nb Q4_1 blocks to dst.
//
//go:noescape
func widenQ4AVX(dst *float32, blk *byte, nb int)

// tileQ8AVX is tileBF16AVX for rows of n Q8_0 blocks.
//
//go:noescape
func tileQ8AVX(a0, a1, a2 *float32, w *byte, ldw, n int, out *float32)

// tileQ4AVX is tileBF16AVX for rows of n Q4_1 blocks.
//
//go:noescape
func tileQ4AVX(a0, a1, a2 *float32, w *byte, ldw, n int, out *float32)

// useAVX512 is false on arm64 (an amd64 width).
var useAVX512 = false

func dotQ8AVX512(x *float32, blk *byte, nb int) float32 { return dotQ8AVX(x, blk, nb) }

func dotQ4AVX512(x *float32, blk *byte, nb int) float32 { return dotQ4AVX(x, blk, nb) }

// exp32AVX sets dst[i] = exp(src[i]·scale + bias) for n elements, n a multiple of 4
// (Cephes' expf, as exp32Go).
//
//go:noescape
func exp32AVX(dst, src *float32, n int, scale, bias float32)

// max32AVX is Max's portable fold here (no NEON version yet): NaN comes back in m.
func max32AVX(x *float32, n int) (float32, bool) { return maxGo(unsafe.Slice(x, n)), false }

func exp32AVX512(dst, src *float32, n int, scale, bias float32) { exp32AVX(dst, src, n, scale, bias) }

// subMul32AVX is SubMul's portable loop here (no NEON version yet).
func subMul32AVX(x, p *float32, n int, d, s float32) {
	subMulGo(unsafe.Slice(x, n), unsafe.Slice(p, n), d, s)
}

// swiglu32AVX is SwiGLU's portable loop here (no NEON version yet).
func swiglu32AVX(a, gate, up, e *float32, n int) {
	swigluGo(unsafe.Slice(a, n), unsafe.Slice(gate, n), unsafe.Slice(up, n), unsafe.Slice(e, n))
}

// swigluBack32AVX is SwiGLUBack's portable loop here (no NEON version yet).
func swigluBack32AVX(dg, du, da, gate, up, e *float32, n int) {
	swigluBackGo(unsafe.Slice(dg, n), unsafe.Slice(du, n), unsafe.Slice(da, n), unsafe.Slice(gate, n), unsafe.Slice(up, n), unsafe.Slice(e, n))
}
