package kern

import (
	"encoding/binary"
	"runtime"
)

// Products with a Frozen matrix W [Rows×Cols] as the weight operand. Few rows of A (a
// decode step) take one fused dot product per output, widening W in registers as it
// streams past: the memory-bound path, where W's bytes are the cost. More rows take the
// packed GEMM, W widened to float32 as its panels are packed, once per call.

// FrozenMatMulNT computes C[m×Rows] (+)= A[m×Cols]·Wᵀ: a Linear's forward pass when
// sampling. With bfloat16 weights A is rounded to bfloat16 first (frozenbf16.go), and
// q8_0/q4_1 products of several rows on AVX512-VNNI quantise A to 8 bits (frozenq8.go),
// as llama.cpp does.
func FrozenMatMulNT(c, a []float32, w *Frozen, m int, acc bool) {
	frozenMatMulNT(c, a, w, m, acc, true)
}

// FrozenMatMulNTWide is FrozenMatMulNT with A multiplied in float32 whatever W's format:
// W is widened, A never rounded or quantised. Training's forward products take it, as PyTorch's
// reference does (bfloat16 weights widened, float32 activations): rounding the
// activations of every product to bfloat16 would perturb the loss and every gradient by
// about 2⁻⁹ relative per product, which a training run accumulates.
func FrozenMatMulNTWide(c, a []float32, w *Frozen, m int, acc bool) {
	frozenMatMulNT(c, a, w, m, acc, false)
}

// frozenMatMulNT is FrozenMatMulNT; when round it may lower A's precision as the
// weight format's fast path does (bf16 rounding, 8-bit quantisation), else never.
func frozenMatMulNT(c, a []float32, w *Frozen, m int, acc, round bool) {
	defer runtime.KeepAlive(w) // its memory is unmapped when it is collected (weightmem.go)
	n, k := w.Rows, w.Cols
	if m == 1 && n > 0 {
		if f, prep := w.oneRow(round); f != nil {
			_ = c[n-1]
			_ = a[k-1]
			if prep != prepNone {
				buf := getScratch(prep.prepLen(k))
				defer putScratch(buf)
				prep.prepare(*buf, a, k)
				a = *buf
			}
			split(n, n*k, oneRowAlign, func(lo, hi int) { f(c, a, lo, hi, acc) })
			return
		}
	}
	if n > 0 && w.intDottable(m, round) { // two or three rows: the one-row dots, row by row
		_ = c[m*n-1]
		_ = a[m*k-1]
		w.intRowsProduct(c, a, m, acc)
		return
	}
	if round && m > 0 && n > 0 && w.intTiles(m) { // every size: 286 vs 83 GFLOP/cpu-s at 512 rows
		_ = c[m*n-1]
		_ = a[m*k-1]
		if w.Format != Q8_0 {
			w.unpackedProduct(c, a, m, acc) // weights unpacked to bytes first (frozenq8.go)
		} else {
			w.q8Product(c, a, m, acc) // integer arithmetic (frozenq8.go)
		}
		return
	}
	if round && m > 0 && n > 0 && w.Format == BF16 {
		_ = c[m*n-1]
		_ = a[m*k-1]
		if w.dpTileable(m) {
			w.dpProduct(c, a, m, acc)
			return
		}
		// Every other path multiplies the rounded activations the BF16 tiles would, in
		// float32 (frozenbf16.go).
		buf := getScratch(m * k)
		defer putScratch(buf)
		roundBF16(nil, *buf, a[:m*k])
		a = *buf
	}
	if m > 0 && n > 0 && m < zTileMaxRows && w.zTileable(m) {
		_ = c[m*n-1]
		_ = a[m*k-1]
		w.zProduct(c, a, m, acc)
		return
	}
	if w.f32Tiled(m) && n > 0 {
		_ = c[m*n-1]
		_ = a[m*k-1]
		split(n, m*n*k, 4, func(lo, hi int) { w.f32Tiles(c, a, m, lo, hi, acc) })
		return
	}
	if w.Format == F32 {
		if usePacked(m, n, k) {
			w.packed(c, a, m, acc, true)
			return
		}
		matMulNT32(c, a, w.f32, m, n, k, acc)
		return
	}
	if m <= 0 || n <= 0 {
		return
	}
	_ = c[m*n-1]
	_ = a[m*k-1]
	switch {
	case m >= w.tileMaxRows() && useAVX2:
		w.packed(c, a, m, acc, true)
		return
	case m >= 2 && w.tiled():
		split(n, m*n*k, 4, func(lo, hi int) { w.tiles(c, a, m, lo, hi, acc) })
		return
	}
	// Rows of W in groups small enough to stay in L1 while every row of A passes.
	const group = 16
	split(n, m*n*k, group, func(lo, hi int) {
		for j0 := lo; j0 < hi; j0 += group {
			j1 := min(j0+group, hi)
			for i := 0; i < m; i++ {
				x := a[i*k : i*k+k]
				cr := c[i*n : i*n+n]
				for j := j0; j < j1; j++ {
					s := w.dotRow(x, j)
					if acc {
						cr[j] += s
					} else {
						cr[j] = s
					}
				}
			}
		}
	})
}

// tileMaxRows is the rows of A from which the packed GEMM beats the 3×4 tiles: packing
// widens and transposes each weight once per call, which many rows amortise, and its
// 6×16 micro-kernel needs fewer loads per multiply-add than the tiles, which read A
// from memory in every step. Measured per CPU second (BenchmarkFrozenTileVsPacked):
// bf16 tiles 64 vs packed 52 GFLOP/s at 16 rows, 68 vs 70 at 32; q8_0 and q4_1 even at
// 16 rows.
func (w *Frozen) tileMaxRows() int {
	if w.Format == BF16 {
		return 32
	}
	return 16
}

// tiled reports whether the 3×4 tile kernels take W.
func (w *Frozen) tiled() bool {
	switch w.Format {
	case BF16:
		return useAVX2 && w.Cols%8 == 0
	case Q8_0, Q4_1:
		return useAVX2 && useF16C
	}
	return false
}

// tiles computes columns [lo, hi) of C = A·Wᵀ (lo a multiple of 4): each group of four
// rows of W, widened in registers, meets every row of A three at a time while it is in
// L1, with no packing.
func (w *Frozen) tiles(c, a []float32, m, lo, hi int, acc bool) {
	n, k := w.Rows, w.Cols
	var out [12]float32
	j := lo
	for ; j+4 <= hi; j += 4 {
		for i := 0; i < m; i += 3 {
			rows := min(3, m-i)
			a0 := &a[i*k]
			a1, a2 := a0, a0 // a short last group repeats a row and drops its sums
			if rows > 1 {
				a1 = &a[(i+1)*k]
			}
			if rows > 2 {
				a2 = &a[(i+2)*k]
			}
			w.tile(a0, a1, a2, j, &out[0])
			for r := 0; r < rows; r++ {
				cr := c[(i+r)*n+j:][:4]
				if acc {
					cr[0] += out[4*r]
					cr[1] += out[4*r+1]
					cr[2] += out[4*r+2]
					cr[3] += out[4*r+3]
				} else {
					copy(cr, out[4*r:4*r+4])
				}
			}
		}
	}
	for ; j < hi; j++ {
		for i := 0; i < m; i++ {
			s := w.dotRow(a[i*k:i*k+k], j)
			if acc {
				c[i*n+j] += s
			} else {
				c[i*n+j] = s
			}
		}
	}
}

// tile runs the 3×4 kernel of W's format on rows j…j+3 of W.
func (w *Frozen) tile(a0, a1, a2 *float32, j int, out *float32) {
	k := w.Cols
	switch w.Format {
	case BF16:
		tileBF16AVX(a0, a1, a2, &w.bf[j*k], 2*k, k, out)
	case Q8_0, Q4_1:
		bb := w.Format.blockBytes()
		nb := k / QBlock
		row := w.blk[j*nb*bb : (j+4)*nb*bb] // the kernel reads these four rows
		if w.Format == Q8_0 {
			tileQ8AVX(a0, a1, a2, &row[0], nb*bb, nb, out)
		} else {
			tileQ4AVX(a0, a1, a2, &row[0], nb*bb, nb, out)
		}
	}
}

// FrozenMatMulNN computes C[m×Cols] (+)= A[m×Rows]·W: a Linear's input gradient
// dX = dY·W.
func FrozenMatMulNN(c, a []float32, w *Frozen, m int, acc bool) {
	defer runtime.KeepAlive(w)
	n, k := w.Cols, w.Rows
	if w.Format == F32 {
		if usePacked(m, n, k) {
			w.packed(c, a, m, acc, false)
			return
		}
		matMulNN32(c, a, w.f32, m, n, k, acc)
		return
	}
	if m <= 0 || n <= 0 {
		return
	}
	_ = c[m*n-1]
	_ = a[m*k-1]
	if usePacked(m, n, k) {
		w.packed(c, a, m, acc, false)
		return
	}
	// Row p of W scales into every row of C: widen it once per block of rows.
	split(m, m*n*k, 1, func(lo, hi int) {
		buf := getScratch(n)
		defer putScratch(buf)
		row := *buf
		if !acc {
			clear(c[lo*n : hi*n])
		}
		for p := 0; p < k; p++ {
			w.Row(row, p)
			for i := lo; i < hi; i++ {
				if av := a[i*k+p]; av != 0 {
					axpy32(av, row, c[i*n:i*n+n])
				}
			}
		}
	})
}

// packNT packs rows [j, j+cols) of W over columns [pc, pc+kb) as B = Wᵀ's panel:
// d[p*nr+x] = W[j+x, pc+p]. The rows are widened into scratch first, then transposed
// by the float32 packer.
func (w *Frozen) packNT(d []float32, j, cols, pc, kb int) {
	buf := getScratch(nr * kb)
	defer putScratch(buf)
	t := *buf
	for x := 0; x < cols; x++ {
		w.widen(t[x*kb:(x+1)*kb], j+x, pc)
	}
	packB(d, t, 0, cols, 0, kb, kb, true)
}

// packNN packs rows [pc, pc+kb) of W over columns [j, j+cols) as B = W's panel:
// d[p*nr+x] = W[pc+p, j+x].
func (w *Frozen) packNN(d []float32, j, cols, pc, kb int) {
	if cols < nr {
		clear(d)
	}
	for p := 0; p < kb; p++ {
		w.rowSeg(d[p*nr:p*nr+cols], pc+p, j)
	}
}

// widen writes elements [c0, c0+len(dst)) of row r to dst, through the assembly when the
// segment is whole blocks.
func (w *Frozen) widen(dst []float32, r, c0 int) {
	n := len(dst)
	if !useAVX2 || n == 0 {
		w.rowSeg(dst, r, c0)
		return
	}
	switch w.Format {
	case BF16:
		n16 := n &^ 15
		if n16 > 0 {
			widenBF16AVX(&dst[0], &w.bf[r*w.Cols+c0], n16)
		}
		if n16 < n {
			w.rowSeg(dst[n16:], r, c0+n16)
		}
	case Q8_0, Q4_1:
		if c0%QBlock != 0 || n%QBlock != 0 || !useF16C {
			w.rowSeg(dst, r, c0)
			return
		}
		bb := w.Format.blockBytes()
		off := (r*w.Cols + c0) / QBlock * bb
		switch {
		case w.Format == Q8_0 && useAVX512:
			widenQ8AVX512(&dst[0], &w.blk[off], n/QBlock)
		case w.Format == Q8_0:
			widenQ8AVX(&dst[0], &w.blk[off], n/QBlock)
		case useAVX512:
			widenQ4AVX512(&dst[0], &w.blk[off], n/QBlock)
		default:
			widenQ4AVX(&dst[0], &w.blk[off], n/QBlock)
		}
	case Q4_K, Q6_K, Q5_0:
		w.widenK(dst, r, c0)
	default:
		w.rowSeg(dst, r, c0)
	}
}

// dotRow is Σ x[p]·W[r, p] over a whole row.
func (w *Frozen) dotRow(x []float32, r int) float32 {
	k := w.Cols
	switch w.Format {
	case F32:
		return dot32(x, w.f32[r*k:(r+1)*k])
	case BF16:
		row := w.bf[r*k : (r+1)*k]
		if useAVX2 && hasRowDots && k%16 == 0 {
			var s float32
			w.bf16RowDots(&x[0], &row[0], 1, &s)
			return s
		}
		if useAVX2 && k >= 16 {
			k16 := k &^ 15
			s := dotBF16AVX(&x[0], &row[0], k16)
			if k16 < k {
				s += dotBF16Go(x[k16:], row[k16:])
			}
			return s
		}
		return dotBF16Go(x, row)
	case Q4_K, Q6_K, Q5_0:
		return w.dotRowK(x, r)
	default:
		bb := w.Format.blockBytes()
		nb := k / QBlock
		row := w.blk[r*nb*bb : (r+1)*nb*bb]
		if w.Format == Q8_0 {
			if useAVX512 {
				return dotQ8AVX512(&x[0], &row[0], nb)
			}
			if useAVX2 && useF16C {
				return dotQ8AVX(&x[0], &row[0], nb)
			}
			return dotQ8Go(x, row)
		}
		if useAVX512 {
			return dotQ4AVX512(&x[0], &row[0], nb)
		}
		if useAVX2 && useF16C {
			return dotQ4AVX(&x[0], &row[0], nb)
		}
		return dotQ4Go(x, row)
	}
}

// dotBF16Go is the portable Σ x[i]·bf16(w[i]).
func dotBF16Go(x []float32, w []uint16) float32 {
	w = w[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * FromBF16(w[i])
		s1 += x[i+1] * FromBF16(w[i+1])
		s2 += x[i+2] * FromBF16(w[i+2])
		s3 += x[i+3] * FromBF16(w[i+3])
	}
	for ; i < len(x); i++ {
		s0 += x[i] * FromBF16(w[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// dotQ8Go is the portable dot of x with a row of Q8_0 blocks: Σ_b d_b·Σ_j x·q.
func dotQ8Go(x []float32, row []byte) float32 {
	const bb = 2 + QBlock
	var s float32
	for b := 0; b < len(row)/bb; b++ {
		blk := row[b*bb : b*bb+bb]
		xs := x[b*QBlock : b*QBlock+QBlock]
		var t0, t1 float32
		for j := 0; j < QBlock; j += 2 {
			t0 += xs[j] * float32(int8(blk[2+j]))
			t1 += xs[j+1] * float32(int8(blk[3+j]))
		}
		s += FromF16(binary.LittleEndian.Uint16(blk)) * (t0 + t1)
	}
	return s
}

// dotQ4Go is the portable dot of x with a row of Q4_1 blocks: Σ_b d_b·Σ_j x·q + m_b·Σ_j x.
func dotQ4Go(x []float32, row []byte) float32 {
	const bb = 4 + QBlock/2
	var s float32
	for b := 0; b < len(row)/bb; b++ {
		blk := row[b*bb : b*bb+bb]
		xs := x[b*QBlock : b*QBlock+QBlock]
		var tq, tx float32
		for j := 0; j < QBlock/2; j++ {
			q := blk[4+j]
			tq += xs[j]*float32(q&0xF) + xs[j+QBlock/2]*float32(q>>4)
			tx += xs[j] + xs[j+QBlock/2]
		}
		d, m := FromF16(binary.LittleEndian.Uint16(blk)), FromF16(binary.LittleEndian.Uint16(blk[2:]))
		s += d*tq + m*tx
	}
	return s
}
