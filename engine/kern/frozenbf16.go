package kern

import "sync"

// Sampling's products with bfloat16 weights round the activations to bfloat16 too, in
// every forward product (FrozenMatMulNT) and on every path: the weights' format decides
// the numerics, not the machine. Training's do not (FrozenMatMulNTWide: float32
// activations, as PyTorch's reference trains), nor does any input gradient. This is what llama.cpp's bf16 path does (it converts the
// activations to the weights' vec_dot_type) and what torch's bf16 autocast does; the
// sums stay float32. It buys the AVX-512 BF16 tiles, whose VDPBF16PS multiplies pairs
// of bfloat16 at twice an FMA's rate where a core runs it at full speed (bf16tiles.go
// measures which path is faster); machines without them multiply the same rounded
// values in float32, so every machine computes the same products up to summation order.

// bf16Pool recycles the rounded activations.
var bf16Pool sync.Pool

func getBF16(n int) *[]uint16 {
	if p, ok := bf16Pool.Get().(*[]uint16); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	s := make([]uint16, n)
	return &s
}

// roundBF16 rounds a[:m·k] to bfloat16 into dst (as bits) and, when wide is given, to
// float32 values again into wide.
func roundBF16(dst []uint16, wide, a []float32) {
	split(len(a), len(a)*8, 256, func(lo, hi int) {
		if useAVX2 {
			n8 := (hi - lo) &^ 7
			if n8 > 0 && dst != nil {
				roundBF16AVX(&dst[lo], &a[lo], n8)
			}
			if n8 > 0 && wide != nil {
				roundWideBF16AVX(&wide[lo], &a[lo], n8)
			}
			lo += n8
		}
		for i, v := range a[lo:hi] {
			h := ToBF16(v)
			if dst != nil {
				dst[lo+i] = h
			}
			if wide != nil {
				wide[lo+i] = FromBF16(h)
			}
		}
	})
}

// dpTileable reports whether the AVX-512 BF16 tiles take a product of m rows with W.
func (w *Frozen) dpTileable(m int) bool {
	return useDPBF16 && w.Format == BF16 && m >= 2 && w.Cols%32 == 0 && !bf16ZTiles()
}

// dpProduct is C[m×Rows] (+)= bf16(A)·Wᵀ on the AVX-512 BF16 tiles. A is rounded once
// into rows padded to a multiple of four (the pad rows zero); each thread takes a range
// of W's rows, four at a time, and meets every row of A with them while they are in L1.
func (w *Frozen) dpProduct(c, a []float32, m int, acc bool) {
	n, k := w.Rows, w.Cols
	m4 := roundUp(m, 4)
	p := getBF16(m4 * k)
	defer bf16Pool.Put(p)
	ab := *p
	roundBF16(ab[:m*k], nil, a[:m*k])
	clear(ab[m*k:])
	split(n, m*n*k, 4, func(lo, hi int) {
		var out [16]float32
		var pad []uint16
		for j := lo; j < hi; j += 4 {
			rows := min(4, hi-j)
			wp := &w.bf[j*k]
			if rows < 4 { // the last rows of W, padded with zero rows
				if pad == nil {
					pad = make([]uint16, 4*k)
				}
				clear(pad[copy(pad, w.bf[j*k:(j+rows)*k]):])
				wp = &pad[0]
			}
			for i := 0; i < m; i += 4 {
				tileDPBF16(&ab[i*k], 2*k, wp, 2*k, k/32, &out[0])
				storeTile(c, out[:], i, j, min(4, m-i), rows, n, acc)
			}
		}
	})
}

// bf16Dots computes columns [lo, hi) of the one row c = a·Wᵀ with dotsBF16AVX: W's rows
// streamed one after the other in one call, the sums of dotRow's dotBF16AVX.
func (w *Frozen) bf16Dots(c, a []float32, lo, hi int, acc bool) {
	k := w.Cols
	_ = a[k-1]
	_ = w.bf[hi*k-1]
	dotRows(c, lo, hi, hi-lo, acc, func(j int, out []float32) { w.bf16RowDots(&a[0], &w.bf[j*k], len(out), &out[0]) })
}

// bf16RowDots sets out[r] = Σ_i x[i]·W[j+r, i] for rows rows of W from &W[j, 0]: 16-wide
// where the CPU has AVX-512 and rows are whole 32-weight steps, else 8-wide. dotRow sums
// a row the same way, so a one-row product's outputs do not depend on which path took
// them.
func (w *Frozen) bf16RowDots(x *float32, wr *uint16, rows int, out *float32) {
	if w.Cols%16 == 0 && bf16ZTiles() {
		dotsBF16z(x, wr, w.Cols/16, rows, out)
		return
	}
	if useAVX512 && w.Cols%32 == 0 {
		dotsBF16x512(x, wr, w.Cols, rows, out)
		return
	}
	dotsBF16AVX(x, wr, w.Cols, rows, out)
}
