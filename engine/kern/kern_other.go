//go:build (!amd64 && !arm64) || purego

package kern

import "unsafe"

// useAVX2 is false without the assembly: every float32 kernel takes its pure-Go path.
var useAVX2 = false

// sgemm6x16 is the portable twin of the assembly micro-kernel, so the packed driver
// (and its tests) still build and run everywhere; it is never dispatched to here.
func sgemm6x16(k int, a, b, c *float32, ldc int, load bool) {
	ap := unsafe.Slice(a, k*mr)
	bp := unsafe.Slice(b, k*nr)
	var t [mr][nr]float32
	for p := 0; p < k; p++ {
		bv := bp[p*nr : p*nr+nr]
		for r := 0; r < mr; r++ {
			av := ap[p*mr+r]
			for j, x := range bv {
				t[r][j] += av * x
			}
		}
	}
	cs := unsafe.Slice(c, (mr-1)*ldc+nr)
	for r := 0; r < mr; r++ {
		row := cs[r*ldc : r*ldc+nr]
		for j := range row {
			if load {
				row[j] += t[r][j]
			} else {
				row[j] = t[r][j]
			}
		}
	}
}

func dot32AVX(a, b []float32) float32 { return dot32Go(a, b) }

func axpy32AVX(alpha float32, x, y []float32) { axpy32Go(alpha, x, y) }

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

// useF16C is false without the assembly.
var useF16C = false

// The block-format kernels' portable twins, so frozenmm.go builds everywhere; they are
// never dispatched to here.

func dotBF16AVX(x *float32, w *uint16, n int) float32 {
	return dotBF16Go(unsafe.Slice(x, n), unsafe.Slice(w, n))
}

func dotQ8AVX(x *float32, blk *byte, nb int) float32 {
	return dotQ8Go(unsafe.Slice(x, nb*QBlock), unsafe.Slice(blk, nb*(2+QBlock)))
}

func dotQ4AVX(x *float32, blk *byte, nb int) float32 {
	return dotQ4Go(unsafe.Slice(x, nb*QBlock), unsafe.Slice(blk, nb*(4+QBlock/2)))
}

func widenBF16AVX(dst *float32, src *uint16, n int) {
	d, s := unsafe.Slice(dst, n), unsafe.Slice(src, n)
	for i, v := range s {
		d[i] = FromBF16(v)
	}
}

func widenQ8AVX(dst *float32, blk *byte, nb int) {
	w := &Frozen{Format: Q8_0, Rows: 1, Cols: nb * QBlock, blk: unsafe.Slice(blk, nb*(2+QBlock))}
	w.Row(unsafe.Slice(dst, nb*QBlock), 0)
}

func widenQ4AVX(dst *float32, blk *byte, nb int) {
	w := &Frozen{Format: Q4_1, Rows: 1, Cols: nb * QBlock, blk: unsafe.Slice(blk, nb*(4+QBlock/2))}
	w.Row(unsafe.Slice(dst, nb*QBlock), 0)
}

// tileRows is the portable 3×4 tile: out[4r+j] = dot(a_r, row j of W), each row of W
// ldw bytes after the last, n its length in dot's units (weights or blocks).
func tileRows(a0, a1, a2 *float32, w unsafe.Pointer, ldw, k int, out *float32, dot func(x []float32, row unsafe.Pointer) float32) {
	o := unsafe.Slice(out, 12)
	for r, a := range []*float32{a0, a1, a2} {
		x := unsafe.Slice(a, k)
		for j := 0; j < 4; j++ {
			o[4*r+j] = dot(x, unsafe.Add(w, j*ldw))
		}
	}
}

func tileBF16AVX(a0, a1, a2 *float32, w *uint16, ldw, n int, out *float32) {
	tileRows(a0, a1, a2, unsafe.Pointer(w), ldw, n, out, func(x []float32, row unsafe.Pointer) float32 {
		return dotBF16Go(x, unsafe.Slice((*uint16)(row), n))
	})
}

func tileQ8AVX(a0, a1, a2 *float32, w *byte, ldw, n int, out *float32) {
	tileRows(a0, a1, a2, unsafe.Pointer(w), ldw, n*QBlock, out, func(x []float32, row unsafe.Pointer) float32 {
		return dotQ8Go(x, unsafe.Slice((*byte)(row), n*(2+QBlock)))
	})
}

func tileQ4AVX(a0, a1, a2 *float32, w *byte, ldw, n int, out *float32) {
	tileRows(a0, a1, a2, unsafe.Pointer(w), ldw, n*QBlock, out, func(x []float32, row unsafe.Pointer) float32 {
		return dotQ4Go(x, unsafe.Slice((*byte)(row), n*(4+QBlock/2)))
	})
}

// useAVX512 is false without the assembly.
var useAVX512 = false

func dotQ8AVX512(x *float32, blk *byte, nb int) float32 { return dotQ8AVX(x, blk, nb) }

func dotQ4AVX512(x *float32, blk *byte, nb int) float32 { return dotQ4AVX(x, blk, nb) }

func exp32AVX(dst, src *float32, n int, scale, bias float32) { panic("kern: no assembly") }

func max32AVX(x *float32, n int) (float32, bool) { panic("kern: no assembly") }

func exp32AVX512(dst, src *float32, n int, scale, bias float32) { panic("kern: no assembly") }

func subMul32AVX(x, p *float32, n int, d, s float32) { panic("kern: no assembly") }

func swiglu32AVX(a, gate, up, e *float32, n int) { panic("kern: no assembly") }

func swigluBack32AVX(dg, du, da, gate, up, e *float32, n int) { panic("kern: no assembly") }
