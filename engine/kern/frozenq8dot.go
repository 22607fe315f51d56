package kern

import (
	"encoding/binary"
	"unsafe"
)

// The one-row integer dots of q8_0 weights: a decode step's product (one to three rows
// of A) on AVX512-VNNI. The float dots widen every weight to float32 (six instructions
// a block of 32 on 16-wide vectors, BenchmarkFrozenDotCompute: about 17 weights per
// core-nanosecond on the Zen 4 of docs/performance.md), which two cores need nearly all
// of the memory's time for; llama.cpp multiplies bytes instead, and so does this.
//
// A row of A is quantised as the integer tiles quantise it (quantActBlock: blocks of 32,
// d_a = max|a|/127), and each output is the tile's sum in the tile's order: per block
// the exact Σq_a·q_w in int32, t = (d_a·d_w)·float32(Σ), sum += t, block after block,
// no fused multiply-add. So a row of A gets the same bits alone (decode) as in a prompt
// of many rows (the tiles, q8IntMinRows and more): what a token scores does not depend
// on the batch it is computed in. dotsQ8Go is the reference the assembly is tested
// against, and the path of tests that force the integer products without VNNI.

// Q8IntDecode reports whether sampling products of one to three rows with q8_0 weights
// (decode steps) quantise their activations to 8-bit blocks on this machine (the
// integer dots, on AVX512-VNNI); elsewhere they multiply the float32 activations. Other
// formats' decode products multiply float32 activations everywhere.
func Q8IntDecode() bool { return useVNNI || forceQ8Int }

// q8DotMaxRows is the most rows of A the dots take: from q8IntMinRows the tiles do.
const q8DotMaxRows = q8IntMinRows - 1

// q8Dottable reports whether a product of m rows with W, rounding A (round: not a
// training product), takes the one-row integer dots.
func (w *Frozen) q8Dottable(m int, round bool) bool {
	return round && w.Format == Q8_0 && m >= 1 && m <= q8DotMaxRows && w.Cols%QBlock == 0 &&
		(useVNNI || forceQ8Int)
}

// q8RowLen is the float32 words of one row of A quantised for the dots (q8Row).
func q8RowLen(k int) int { return k / QBlock * (2 + QBlock/4) }

// q8Row is the parts of a row of A quantised for the dots, kept in float32 words so
// that it passes where a row of A does (oneRow's functions): per block b, d_a at d[b],
// 128·Σq_a at c[b] (int32) and the 32 signed bytes q_a at q[32b:].
func q8Row(buf []float32, nb int) (d []float32, c []int32, q []byte) {
	buf = buf[:nb*(2+QBlock/4)]
	d = buf[:nb]
	c = unsafe.Slice((*int32)(unsafe.Pointer(&buf[nb])), nb)
	q = unsafe.Slice((*byte)(unsafe.Pointer(&buf[2*nb])), nb*QBlock)
	return d, c, q
}

// quantRow quantises x (whole blocks) into dst, laid out as q8Row.
func quantRow(dst, x []float32) {
	nb := len(x) / QBlock
	d, c, q := q8Row(dst, nb)
	if useVNNI {
		quantRowAVX512(&q[0], &c[0], &d[0], &x[0], nb)
		return
	}
	for b := 0; b < nb; b++ {
		var qs [QBlock]byte
		d[b] = quantActBlock(&qs, x[b*QBlock:][:QBlock])
		var s int32
		for j, v := range qs {
			q[b*QBlock+j] = v ^ 0x80
			s += int32(int8(v ^ 0x80))
		}
		c[b] = 128 * s
	}
}

// q8Dots sets (or adds, acc) outputs [lo, hi) of c = a·Wᵀ, a one row quantised by
// quantRow: oneRow's function for q8_0 on the integer path.
func (w *Frozen) q8Dots(c, a []float32, lo, hi int, acc bool) {
	const bb = 2 + QBlock
	nb := w.Cols / QBlock
	d, cs, q := q8Row(a, nb)
	_ = w.blk[hi*nb*bb-1]
	dotRows(c, lo, hi, hi-lo, acc, func(j int, out []float32) {
		dotsQ8(q, cs, d, w.blk[j*nb*bb:], nb, out)
	})
}

// dotsQ8 sets out[r] to the dot of the quantised row (q, c, d) with the len(out) rows
// of nb Q8_0 blocks at w.
func dotsQ8(q []byte, c []int32, d []float32, w []byte, nb int, out []float32) {
	if useVNNI {
		_ = w[len(out)*nb*(2+QBlock)-1]
		_, _, _ = q[nb*QBlock-1], c[nb-1], d[nb-1]
		dotsQ8VNNI(&q[0], &c[0], &d[0], &w[0], nb, len(out), &out[0])
		return
	}
	dotsQ8Go(q, c, d, w, nb, out)
}

// dotsQ8Go is dotsQ8 in Go, the reference of the assembly. c is unused: Σq_a·q_w is
// summed directly (the assembly offsets the weights and takes c off).
func dotsQ8Go(q []byte, c []int32, d []float32, w []byte, nb int, out []float32) {
	const bb = 2 + QBlock
	for r := range out {
		row := w[r*nb*bb:][:nb*bb]
		var sum float32
		for b := 0; b < nb; b++ {
			blk := row[b*bb:][:bb]
			var s int32
			for j, v := range blk[2:] {
				s += int32(int8(v)) * int32(int8(q[b*QBlock+j]))
			}
			scale := d[b] * FromF16(binary.LittleEndian.Uint16(blk))
			sum = float32(sum + float32(scale*float32(s))) // no fused multiply-add, as the tiles
		}
		out[r] = sum
	}
}

// q8RowsProduct is C[m×Rows] (+)= A·Wᵀ for the few rows of A the dots take: each row
// quantised once, the rows of W split across the cores, and every row of A run past a
// core's rows of W in groups that stay in L1.
func (w *Frozen) q8RowsProduct(c, a []float32, m int, acc bool) {
	n, k := w.Rows, w.Cols
	rl := q8RowLen(k)
	buf := getScratch(m * rl)
	defer putScratch(buf)
	qa := (*buf)[:m*rl]
	for i := 0; i < m; i++ {
		quantRow(qa[i*rl:][:rl], a[i*k:][:k])
	}
	const group = 16
	split(n, m*n*k, oneRowAlign, func(lo, hi int) {
		for j0 := lo; j0 < hi; j0 += group {
			j1 := min(j0+group, hi)
			for i := 0; i < m; i++ {
				w.q8Dots(c[i*n:][:n], qa[i*rl:][:rl], j0, j1, acc)
			}
		}
	})
}
