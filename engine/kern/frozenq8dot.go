package kern

import (
	"encoding/binary"
	"unsafe"
)

// The one-row integer dots of the block formats (q8_0, q4_1, q5_0, q4_k, q6_k): a decode
// step's product (one to three rows of A) on AVX512-VNNI. The float dots widen every
// weight to float32 (six instructions a block of 32 on 16-wide vectors,
// BenchmarkFrozenDotCompute: about 17 weights per core-nanosecond on the Zen 4 of
// docs/performance.md), which two cores need nearly all of the memory's time for; q5_0's,
// q4_1's, q4_k's and q6_k's (7–15 weights a core-nanosecond) were slower than the memory.
// llama.cpp multiplies bytes instead, and so does this.
//
// A row of A is quantised as the integer tiles quantise it (quantActBlock: blocks of 32,
// d_a = max|a|/127), once per product. q8_0's and q5_0's outputs are the tiles' sums in
// the tiles' order: per block the exact Σq_a·q_w in int32, t = (d_a·d_w)·float32(Σ),
// sum += t, block after block, no fused multiply-add. So a row of A gets the same bits
// alone (decode) as in a prompt of many rows (from q8IntMinRows and q5IntMinRows): what a
// token scores does not depend on the batch it is computed in. q4_1's minimums and the
// K-quants' sub-block scales are added by the tiles in other ways, so those dots keep
// their block sums in four or eight float32 lanes instead, summed at the row's end. Each
// assembly kernel has a Go twin it is tested against bit for bit (dotsQ8Go and the
// others), which tests that force the integer products without VNNI run. Q5_0 and Q4_K
// matrices kept interleaved by sixteen rows take sixteen rows a vector instead, with the
// same bits (frozenilv.go).

// Q8IntDecode reports whether sampling products of one to three rows (decode steps) with
// weights in format f quantise their activations to 8-bit blocks on this machine: the
// block formats on AVX512-VNNI (the integer dots). Elsewhere, and in bf16 and f32, they
// multiply the float32 activations.
func Q8IntDecode(f WeightFormat) bool {
	return (f == Q8_0 || f == Q4_1 || f == Q5_0 || f == Q4_K || f == Q6_K) && (useVNNI || forceQ8Int)
}

// intDotMaxRows is the most rows of A the dots take: from q8IntMinRows the tiles do.
const intDotMaxRows = q8IntMinRows - 1

// intDottable reports whether a product of m rows with W, rounding A (round: not a
// training product), takes the one-row integer dots.
func (w *Frozen) intDottable(m int, round bool) bool {
	return round && Q8IntDecode(w.Format) && m >= 1 && m <= intDotMaxRows && w.Cols%QBlock == 0
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

// intDots sets (or adds, acc) outputs [lo, hi) of c = a·Wᵀ, a one row quantised by
// quantRow: oneRow's function for the block formats on the integer path.
func (w *Frozen) intDots(c, a []float32, lo, hi int, acc bool) {
	if w.ilv != nil {
		w.ilvDots(c, a, lo, hi, acc)
		return
	}
	bb, nw := w.Format.blockBytes(), w.Cols/w.Format.blockLen()
	d, cs, q := q8Row(a, w.Cols/QBlock)
	_ = w.blk[hi*nw*bb-1]
	dots := dotsQ8
	switch w.Format {
	case Q4_1:
		dots = dotsQ4
	case Q5_0:
		dots = dotsQ5
	case Q4_K:
		dots = dotsQ4K
	case Q6_K:
		dots = dotsQ6K
	}
	dotRows(c, lo, hi, hi-lo, acc, func(j int, out []float32) {
		dots(q, cs, d, w.blk[j*nw*bb:], nw, out)
	})
}

// A format's dots: dots(q, c, d, w, n, out) sets out[r] to the dot of the quantised row
// (q, c, d: q8Row) with the len(out) rows of n blocks (super-blocks for q4_k and q6_k) at
// w, through the assembly with VNNI, else the Go twin. q8_0 and q5_0 give the tiles' bits;
// q4_1, q4_k and q6_k, whose minimums and sub-block scales the tiles add otherwise, keep
// their block sums in four or eight float32 lanes, summed at the row's end.
var (
	dotsQ8  = intDotsOf(Q8_0, dotsQ8VNNI, dotsQ8Go)
	dotsQ4  = intDotsOf(Q4_1, dotsQ4VNNI, dotsQ4Go)
	dotsQ5  = intDotsOf(Q5_0, dotsQ5VNNI, dotsQ5Go)
	dotsQ4K = intDotsOf(Q4_K, dotsQ4KVNNI, dotsQ4KGo)
	dotsQ6K = intDotsOf(Q6_K, dotsQ6KVNNI, dotsQ6KGo)
)

// intDotsOf is format f's dots from its assembly and its Go twin.
func intDotsOf(f WeightFormat, vnni func(q *byte, c *int32, d *float32, w *byte, n, rows int, out *float32),
	twin func(q []byte, c []int32, d []float32, w []byte, n int, out []float32)) func(q []byte, c []int32, d []float32, w []byte, n int, out []float32) {
	per := f.blockLen() / QBlock // A's blocks to one of W's
	return func(q []byte, c []int32, d []float32, w []byte, n int, out []float32) {
		if !useVNNI {
			twin(q, c, d, w, n, out)
			return
		}
		_ = w[len(out)*n*f.blockBytes()-1]
		_, _, _ = q[n*per*QBlock-1], c[n*per-1], d[n*per-1]
		vnni(&q[0], &c[0], &d[0], &w[0], n, len(out), &out[0])
	}
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

// dotsQ5Go is dotsQ5 in Go, the reference of the assembly: each row unpacked to q−16 in
// bytes as the tiles unpack it (unpackQ5Go), its scales beside them, then dotsQ8Go.
func dotsQ5Go(q []byte, c []int32, d []float32, w []byte, nb int, out []float32) {
	const ub = 2 + QBlock
	bb := Q5_0.blockBytes()
	row := make([]byte, nb*ub)
	tab := make([]uint32, nb*q8TileCols*2)
	for r := range out {
		src := w[r*nb*bb:][:nb*bb]
		unpackQ5Go(row, src, nb, tab)
		for b := 0; b < nb; b++ {
			copy(row[b*ub:][:2], src[b*bb:][:2]) // the half scale, as a Q8_0 block holds it
		}
		dotsQ8Go(q, c, d, row, nb, out[r:r+1])
	}
}

// dotsQ4Go is dotsQ4 in Go, the reference of the assembly: per block b the exact S =
// Σq_w·q_a and A = Σq_a, t = (d_w·d_a)·float32(S) + m_w·(d_a·float32(A)), acc[b%4] += t for
// the row's whole groups of four blocks and acc[0] += t for the blocks after them; then
// (acc[0]+acc[2]) + (acc[1]+acc[3]).
func dotsQ4Go(q []byte, c []int32, d []float32, w []byte, nb int, out []float32) {
	bb := Q4_1.blockBytes()
	for r := range out {
		row := w[r*nb*bb:][:nb*bb]
		var acc [4]float32
		for b := 0; b < nb; b++ {
			blk := row[b*bb:][:bb]
			var s int32
			for j := 0; j < QBlock/2; j++ {
				s += int32(blk[4+j]&0xF)*int32(int8(q[b*QBlock+j])) + int32(blk[4+j]>>4)*int32(int8(q[b*QBlock+QBlock/2+j]))
			}
			dw, mw := FromF16(binary.LittleEndian.Uint16(blk)), FromF16(binary.LittleEndian.Uint16(blk[2:]))
			t := float32(float32(float32(dw*d[b])*float32(s)) + float32(mw*float32(d[b]*float32(c[b]>>7))))
			lane := b % 4
			if b >= nb&^3 {
				lane = 0
			}
			acc[lane] = float32(acc[lane] + t)
		}
		out[r] = float32(acc[0]+acc[2]) + float32(acc[1]+acc[3])
	}
}

// dotsQ4KGo is dotsQ4K in Go, the reference of the assembly: per sub-block s of 32
// weights (A's block b), the exact S = Σq_w·q_a and A = Σq_a, t = d·float32(sc·S) −
// dmin·float32(m·A) (both products exact in float32: at most 63·32·15·127), acc[s] +=
// t·d_a; the eight accumulators summed as a tree at the row's end.
func dotsQ4KGo(q []byte, c []int32, d []float32, w []byte, nsb int, out []float32) {
	const bb = 144
	for r := range out {
		row := w[r*nsb*bb:][:nsb*bb]
		var acc [8]float32
		for sb := 0; sb < nsb; sb++ {
			blk := row[sb*bb:][:bb]
			dd, dmin := FromF16(binary.LittleEndian.Uint16(blk)), FromF16(binary.LittleEndian.Uint16(blk[2:]))
			for s := 0; s < 8; s++ {
				b := sb*8 + s
				sc, m := scaleMinK4(s, blk[4:16])
				qs := blk[16+32*(s/2):][:32]
				var sum int32
				for j, v := range qs {
					sum += int32(v>>(4*(s%2))&0xF) * int32(int8(q[b*QBlock+j]))
				}
				t := float32(float32(float32(int32(sc)*sum)*dd) - float32(float32(int32(m)*(c[b]>>7))*dmin))
				acc[s] = float32(acc[s] + float32(t*d[b]))
			}
		}
		lo := [4]float32{acc[0] + acc[4], acc[1] + acc[5], acc[2] + acc[6], acc[3] + acc[7]}
		out[r] = float32(lo[0]+lo[2]) + float32(lo[1]+lo[3])
	}
}

// dotsQ6KGo is dotsQ6K in Go, the reference of the assembly: for block k of half n of a
// super-block (A's block b) and lane L (its weights 4L…4L+3, deqQ6K's q), v = sc·Σ(q−32)·q_a
// exact in int32 with sc the scale of weights 16·(L/4)…, then acc[L] += float32(v)·(d_a·d);
// the eight accumulators summed as a tree at the row's end.
func dotsQ6KGo(q []byte, _ []int32, d []float32, w []byte, nsb int, out []float32) {
	const bb = 210
	for r := range out {
		row := w[r*nsb*bb:][:nsb*bb]
		var acc [8]float32
		for sb := 0; sb < nsb; sb++ {
			blk := row[sb*bb:][:bb]
			dd := FromF16(binary.LittleEndian.Uint16(blk[208:]))
			for n := 0; n < 2; n++ {
				ql, qh, sc := blk[64*n:][:64], blk[128+32*n:][:32], blk[192+8*n:][:8]
				for k := 0; k < 4; k++ {
					b := sb*8 + 4*n + k
					s := float32(d[b] * dd)
					for lane := 0; lane < 8; lane++ {
						var v int32
						for l := 4 * lane; l < 4*lane+4; l++ {
							lo := ql[l+32*(k&1)] >> (4 * (k / 2)) & 0xF
							u := int32(lo | (qh[l]>>(2*k)&3)<<4)
							v += (u - 32) * int32(int8(q[b*QBlock+l]))
						}
						v *= int32(int8(sc[2*k+lane/4]))
						acc[lane] = float32(acc[lane] + float32(float32(v)*s))
					}
				}
			}
		}
		lo := [4]float32{acc[0] + acc[4], acc[1] + acc[5], acc[2] + acc[6], acc[3] + acc[7]}
		out[r] = float32(lo[0]+lo[2]) + float32(lo[1]+lo[3])
	}
}

// intRowsProduct is C[m×Rows] (+)= A·Wᵀ for the few rows of A the dots take: each row
// quantised once, the rows of W split across the cores, and every row of A run past a
// core's rows of W in groups that stay in L1.
func (w *Frozen) intRowsProduct(c, a []float32, m int, acc bool) {
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
				w.intDots(c[i*n:][:n], qa[i*rl:][:rl], j0, j1, acc)
			}
		}
	})
}
