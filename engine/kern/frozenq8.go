package kern

import (
	"encoding/binary"
	"math"
	"sync"
	"unsafe"
)

// Products of several rows with q8_0 weights (and q4_1, q5_0 and q4_k: unpackedProduct) in integer
// arithmetic, on CPUs with AVX512-VNNI or (arm64) the ARMv8.2 dot product, as llama.cpp
// does:
// each row of A is quantised once per product to 8-bit blocks of 32 (a = d_a·q_a, d_a =
// max|a|/127, q_a rounded to nearest, ties to even), and a block pair contributes
// (d_a·d_w)·Σ q_a·q_w, the sum exact in int32 and one float32 multiply a block. The
// float paths widen every weight to float32 and run 16-wide FMAs; VPDPBUSD
// (AVX512-VNNI) multiplies 64 byte pairs and adds them in fours to 16 int32 lanes in
// one instruction.
//
// The kernel is an outer product: a tile of 16 rows of A (one int32 lane each) against
// 8 rows of W. A is repacked as it is quantised so that one 64-byte vector holds four
// consecutive bytes of a block for each of the 16 rows, and each step broadcasts four
// bytes of a row of W against it: every lane of every instruction is a useful product,
// with no horizontal sums. VPDPBUSD multiplies unsigned by signed bytes, so A is stored
// offset by 128 (q_a + 128 ∈ [1, 255]) and the block sum starts at −128·Σq_w, which
// cancels the offset exactly; those corrections and the weight scales widened to
// float32 are computed once per matrix (q8Table, 8 bytes a block beside the 34 of the
// weights).
//
// Numerics: the only change from the float paths is the activations' quantisation (a
// relative error of at most 1/254 of the block's largest value per element); the sums
// are exact and the float32 steps are fixed (s = d_a·d_w, t = s·float32(Σ), acc += t,
// blocks in order, no fused multiply-add), so every path gives the same bits:
// q8TileGo is the reference the assembly is tested against. On arm64, SDOT (signed by
// signed bytes, frozenq8_arm64.s) takes the same tiles: it removes A's offset as it loads
// it, so its int32 sums are the same numbers without the correction. Decode (one row) keeps the
// float dots, whose speed is the weights' bytes; machines without VNNI keep the float
// tiles (in registers on the Zen 4, VPMADDUBSW's sign trick ran 1.34× an FMA's
// multiply-adds, VPMADDWD on int16 pairs 1.70×, but with loads, broadcasts and each
// block's scaling an AVX2 tile counts fewer multiply-adds an instruction than the float
// tile; docs/performance.md, nineteenth pass).

// The integer tile's shape: rows of A (int32 lanes of a zmm) and rows of W.
const (
	q8TileRows = 16
	q8TileCols = 8
	// q8TileBytes is one block of one A tile: 16 rows × 32 bytes.
	q8TileBytes = q8TileRows * QBlock
)

// q8IntMinRows is the fewest rows of A the integer tiles take: below it the tile's 16
// lanes are mostly padding and the float tiles win (BenchmarkFrozenQ8Int, GFLOP per CPU
// second: 2 rows 25 vs 25, 4 rows 50 vs 43, 16 rows 216 vs 77; docs/performance.md).
const q8IntMinRows = 4

// q4IntMinRows is q8IntMinRows for q4_1, whose tiles also unpack W's nibbles and add the
// minimums' product once per call: at 4 rows 35 vs 40 GFLOP per CPU second for the float
// tiles, at 8 and more the integer tiles lead (BenchmarkFrozenQ4Int).
const q4IntMinRows = 8

// q5IntMinRows and q4kIntMinRows are q4IntMinRows for q5_0 and q4_k, whose rows are
// unpacked in Go (frozenq8k.go) at about 0.4 ns a weight on a core: the integer tiles
// lead from 32 rows for q5_0 (1536×576, GFLOP/s on 2 threads: 16 rows 71 vs 76 for the
// float tiles, 32 rows 130 vs 111, 128 rows 355 vs 177) and from 64 for q4_k (576×1536:
// 32 rows 104 vs 116, 64 rows 141 vs 129, 128 rows 247 vs 169; BenchmarkFrozenQ4Int on
// the Zen 4 of docs/performance.md).
const (
	q5IntMinRows  = 32
	q4kIntMinRows = 64
)

// intTiles reports whether a product of m rows with W takes the integer tiles.
func (w *Frozen) intTiles(m int) bool {
	switch {
	case !useVNNI && !useSDOT && !forceQ8Int:
		return false
	case w.Format == Q8_0:
		return m >= q8IntMinRows
	case w.Format == Q4_1:
		return m >= q4IntMinRows
	case w.Format == Q5_0:
		return m >= q5IntMinRows
	case w.Format == Q4_K:
		return m >= q4kIntMinRows
	}
	return false
}

// forceQ8Int routes products to the integer tiles without VNNI (the portable kernel):
// tests only.
var forceQ8Int = false

// q8Acts is A quantised for the integer tiles.
type q8Acts struct {
	q []byte    // [tile][block][group of 4 bytes][row][4]: q_a + 128
	d []float32 // [tile][block][row]: d_a (0 for padding rows)
}

var q8ActsPool sync.Pool

// quantActs quantises the m rows of A [m×k] into tiles of 16 rows, padding rows zero.
func quantActs(a []float32, m, k int) *q8Acts {
	nb := k / QBlock
	tiles := (m + q8TileRows - 1) / q8TileRows
	qa, _ := q8ActsPool.Get().(*q8Acts)
	if qa == nil {
		qa = new(q8Acts)
	}
	if nq := tiles * nb * q8TileBytes; cap(qa.q) < nq {
		qa.q = make([]byte, nq)
	} else {
		qa.q = qa.q[:nq]
	}
	if nd := tiles * nb * q8TileRows; cap(qa.d) < nd {
		qa.d = make([]float32, nd)
	} else {
		qa.d = qa.d[:nd]
	}
	split(tiles*q8TileRows, m*k*8, q8TileRows, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			quantActRow(qa, a, m, k, i)
		}
	})
	return qa
}

// quantActRow quantises row i of A (a zero row where i ≥ m) into its tile.
func quantActRow(qa *q8Acts, a []float32, m, k, i int) {
	nb := k / QBlock
	t, li := i/q8TileRows, i%q8TileRows
	q := qa.q[t*nb*q8TileBytes:][:nb*q8TileBytes]
	d := qa.d[t*nb*q8TileRows:][:nb*q8TileRows]
	if i < m && useVNNI {
		_ = a[i*k+k-1]
		quantActsAVX512(&q[li*4], &d[li], &a[i*k], nb)
		return
	}
	for b := 0; b < nb; b++ {
		var qs [QBlock]byte
		var db float32
		if i < m {
			db = quantActBlock(&qs, a[i*k+b*QBlock:][:QBlock])
		} else {
			for j := range qs {
				qs[j] = 128
			}
		}
		d[b*q8TileRows+li] = db
		blk := q[b*q8TileBytes:][:q8TileBytes]
		for g := 0; g < QBlock/4; g++ {
			copy(blk[(g*q8TileRows+li)*4:][:4], qs[4*g:4*g+4])
		}
	}
}

// quantActBlock quantises 32 activations: q = round(x·127/max|x|), ties to even, stored
// offset by 128; it returns d = max|x|/127. A NaN makes d NaN, so the product's outputs
// are NaN as the float paths' are. quantActsAVX512 is this in assembly, bit for bit.
func quantActBlock(qs *[QBlock]byte, x []float32) float32 {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	var id float32
	if amax != 0 {
		id = 127 / amax
	}
	for j, v := range x {
		r := math.RoundToEven(float64(v * id))
		if !(r >= -127 && r <= 127) { // NaN, or Inf·0: d carries it; −128 as VPMOVSDB saturates it
			r = -128
		}
		qs[j] = byte(int8(r)) ^ 0x80
	}
	return d
}

// q8Table is W's per-block constants for the integer tiles, in groups of 8 rows: for
// group G, block b and row j of the group, the weight scale as a float32 and the int32
// −128·Σq_w, at [((G·nb + b)·8 + j)·2]. Rows past the last are zero.
func (w *Frozen) q8Table() []uint32 {
	w.q8once.Do(func() {
		nb := w.Cols / QBlock
		const bb = 2 + QBlock
		groups := (w.Rows + q8TileCols - 1) / q8TileCols
		tab := make([]uint32, groups*nb*q8TileCols*2)
		split(w.Rows, w.Rows*w.Cols, q8TileCols, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				g, j := r/q8TileCols, r%q8TileCols
				for b := 0; b < nb; b++ {
					blk := w.blk[(r*nb+b)*bb:][:bb]
					s := sumInt8(blk[2:])
					e := tab[((g*nb+b)*q8TileCols+j)*2:]
					e[0] = math.Float32bits(FromF16(binary.LittleEndian.Uint16(blk)))
					e[1] = uint32(-128 * s)
				}
			}
		})
		w.q8tab = tab
	})
	return w.q8tab
}

// sumInt8 is Σ int8(q) over a block's 32 weights, eight at a time in a uint64: each
// byte offset by 128 to unsigned, bytes added in pairs to 16-bit lanes, the lanes summed
// by a multiply (at most 32·255, which fits the top lane).
func sumInt8(q []byte) int32 {
	const lo8, ones16 = 0x00ff00ff00ff00ff, 0x0001000100010001
	var t uint64
	for i := 0; i < QBlock; i += 8 {
		x := binary.LittleEndian.Uint64(q[i:]) ^ 0x8080808080808080
		t += x&lo8 + (x>>8)&lo8
	}
	return int32(t*ones16>>48) - QBlock*128
}

// q8Product is C[m×Rows] (+)= A·Wᵀ on the integer tiles.
func (w *Frozen) q8Product(c, a []float32, m int, acc bool) {
	n, k := w.Rows, w.Cols
	nb := k / QBlock
	const bb = 2 + QBlock
	tab := w.q8Table()
	qa := quantActs(a, m, k)
	defer q8ActsPool.Put(qa)
	tiles := (m + q8TileRows - 1) / q8TileRows
	groups := (n + q8TileCols - 1) / q8TileCols
	split(groups, m*n*k, 1, func(lo, hi int) {
		var out [q8TileRows * q8TileCols]float32
		for g := lo; g < hi; g++ {
			j := g * q8TileCols
			cols := min(q8TileCols, n-j)
			wp := w.blk[j*nb*bb:]
			if cols < q8TileCols { // the last rows of W, padded with zero blocks
				pad := make([]byte, q8TileCols*nb*bb)
				copy(pad, w.blk[j*nb*bb:])
				wp = pad
			}
			for t := 0; t < tiles; t++ {
				q8Tile(&qa.q[t*nb*q8TileBytes], &qa.d[t*nb*q8TileRows], &wp[0], nb*bb, &tab[g*nb*q8TileCols*2], nb, &out[0])
				storeIntTile(c, &out, t*q8TileRows, j, min(q8TileRows, m-t*q8TileRows), cols, n, acc)
			}
		}
	})
}

// storeIntTile writes (or adds) the rows×cols corner of an integer tile's out (row r of
// A, row x of W at out[16x + r]) to C at (i0, j); a whole group of 8 unrolled, as a
// per-element loop took a third of a 128-row product's time.
func storeIntTile(c []float32, out *[q8TileRows * q8TileCols]float32, i0, j, rows, cols, n int, acc bool) {
	for r := 0; r < rows; r++ {
		o := (*[7*q8TileRows + 1]float32)(out[r:])
		if cols < q8TileCols {
			cr := c[(i0+r)*n+j:][:cols]
			for x := range cr {
				if acc {
					cr[x] += o[x*q8TileRows]
				} else {
					cr[x] = o[x*q8TileRows]
				}
			}
			continue
		}
		cr := (*[q8TileCols]float32)(c[(i0+r)*n+j:])
		if acc {
			cr[0] += o[0]
			cr[1] += o[16]
			cr[2] += o[32]
			cr[3] += o[48]
			cr[4] += o[64]
			cr[5] += o[80]
			cr[6] += o[96]
			cr[7] += o[112]
		} else {
			cr[0], cr[1], cr[2], cr[3] = o[0], o[16], o[32], o[48]
			cr[4], cr[5], cr[6], cr[7] = o[64], o[80], o[96], o[112]
		}
	}
}

// q8Tile runs the integer tile: the assembly with VNNI (amd64) or the dot product
// (arm64), else the portable kernel.
func q8Tile(a *byte, d *float32, w *byte, ldw int, tab *uint32, nb int, out *float32) {
	if useVNNI {
		q8TileVNNI(a, d, w, ldw, tab, nb, out)
		return
	}
	if useSDOT {
		q8TileSDOT(a, d, w, ldw, tab, nb, out)
		return
	}
	q8TileGo(a, d, w, ldw, tab, nb, out)
}

// q8TileGo is the integer tile in Go, the reference of the assembly: out[j·16 + i] is
// row i of the A tile (a: nb blocks of 512 bytes, d: nb×16 scales) times row j of W (8
// rows of nb Q8_0 blocks, ldw bytes apart; tab: the group's q8Table entries).
func q8TileGo(a *byte, d *float32, w *byte, ldw int, tab *uint32, nb int, out *float32) {
	as := unsafe.Slice(a, nb*q8TileBytes)
	ds := unsafe.Slice(d, nb*q8TileRows)
	ws := unsafe.Slice(w, (q8TileCols-1)*ldw+nb*(2+QBlock))
	ts := unsafe.Slice(tab, nb*q8TileCols*2)
	o := unsafe.Slice(out, q8TileRows*q8TileCols)
	for j := 0; j < q8TileCols; j++ {
		for i := 0; i < q8TileRows; i++ {
			var sum float32
			for b := 0; b < nb; b++ {
				e := ts[(b*q8TileCols+j)*2:]
				s := int32(e[1])
				wq := ws[j*ldw+b*(2+QBlock)+2:][:QBlock]
				ab := as[b*q8TileBytes:]
				for p := 0; p < QBlock; p++ {
					s += int32(ab[(p/4*q8TileRows+i)*4+p%4]) * int32(int8(wq[p]))
				}
				scale := ds[b*q8TileRows+i] * math.Float32frombits(e[0])
				sum = float32(sum + float32(scale*float32(s))) // no fused multiply-add, as the assembly
			}
			o[j*q8TileRows+i] = sum
		}
	}
}

// Q8IntActivations reports whether forward products of several rows with q8_0 or q4_1
// weights quantise their activations to 8-bit blocks on this machine (the integer tiles,
// on AVX512-VNNI or arm64's dot product); elsewhere they multiply the float32 activations.
func Q8IntActivations() bool { return useVNNI || useSDOT || forceQ8Int }

// unpackedProduct is C[m×Rows] (+)= A·Wᵀ on the integer tiles for the formats whose
// weights the tile cannot read as stored (q4_1, q5_0, q4_k: w.unpackRow). A weight of
// each block of 32 is d_w·q_w + m_w with q_w a small integer (m_w = 0 for q5_0), so a block pair's
// products sum to d_a·d_w·Σq_a·q_w + m_w·(d_a·Σq_a): the first is the q8_0 tile on W's
// weights unpacked to bytes (8 rows at a time, into L1, with their scales and
// corrections), the second, where the format has minimums, a float32 product of A's
// block sums [m×nb] with W's minimums [Rows×nb], added after.
func (w *Frozen) unpackedProduct(c, a []float32, m int, acc bool) {
	n, k := w.Rows, w.Cols
	nb := k / QBlock
	const ub = 2 + QBlock
	qa := quantActs(a, m, k)
	defer q8ActsPool.Put(qa)
	tiles := (m + q8TileRows - 1) / q8TileRows
	groups := (n + q8TileCols - 1) / q8TileCols
	var mw []float32
	if w.Format != Q5_0 { // q5_0's offset, −16, is folded into its bytes
		mbuf := getScratch(n * nb)
		defer putScratch(mbuf)
		mw = (*mbuf)[:n*nb]
	}
	split(groups, m*n*k, 1, func(lo, hi int) {
		var out [q8TileRows * q8TileCols]float32
		wb := make([]byte, q8TileCols*nb*ub)
		tab := make([]uint32, nb*q8TileCols*2)
		for g := lo; g < hi; g++ {
			j := g * q8TileCols
			cols := min(q8TileCols, n-j)
			if cols < q8TileCols {
				clear(wb)
				clear(tab)
			}
			w.unpackRows(wb, tab, mw, j, cols)
			for t := 0; t < tiles; t++ {
				q8Tile(&qa.q[t*nb*q8TileBytes], &qa.d[t*nb*q8TileRows], &wb[0], nb*ub, &tab[0], nb, &out[0])
				storeIntTile(c, &out, t*q8TileRows, j, min(q8TileRows, m-t*q8TileRows), cols, n, acc)
			}
		}
	})
	if mw == nil {
		return
	}
	// The minimums' term: s_a[i, b] = d_a·Σq_a of A's block b in row i.
	sbuf := getScratch(m * nb)
	defer putScratch(sbuf)
	sa := (*sbuf)[:m*nb]
	for i := 0; i < m; i++ {
		t, li := i/q8TileRows, i%q8TileRows
		for b := 0; b < nb; b++ {
			blk := qa.q[(t*nb+b)*q8TileBytes:][:q8TileBytes]
			var s int32
			for p := 0; p < QBlock; p++ {
				s += int32(int8(blk[(p/4*q8TileRows+li)*4+p%4] ^ 0x80))
			}
			sa[i*nb+b] = qa.d[(t*nb+b)*q8TileRows+li] * float32(s)
		}
	}
	matMulNT32(c, sa, mw, m, n, nb, true)
}

// unpackRows unpacks rows [j, j+cols) of W (unpackRow) into wb, tab and (where the
// format has minimums) mw: an interleaved Q4_K matrix's a super-block of every row at a
// time, which reads each group-block's lines while they are in L1.
func (w *Frozen) unpackRows(wb []byte, tab []uint32, mw []float32, j, cols int) {
	const ub = 2 + QBlock
	nb := w.Cols / QBlock
	if w.ilv != nil && w.Format == Q4_K {
		nsb := nb / 8
		for sb := 0; sb < nsb; sb++ {
			for r := j; r < j+cols; r++ {
				grp := w.ilv[r/ilvGroup*nsb*q4kGroupBytes:][:nsb*q4kGroupBytes]
				unpackQ4KIGo(wb[(r-j)*nb*ub:][:nb*ub], grp, r%ilvGroup, sb, tab[2*(r-j):], mw[r*nb:][:nb])
			}
		}
		return
	}
	for r := 0; r < cols; r++ {
		var mr []float32
		if mw != nil {
			mr = mw[(j+r)*nb:][:nb]
		}
		w.unpackRow(wb[r*nb*ub:][:nb*ub], j+r, tab[2*r:], mr)
	}
}

// unpackRow writes row r of W as the q8_0 tile reads a row: block b's 32 weights q_w as
// bytes at dst[34b+2:] (weight j at byte j), its scale d_w as float32 and −128·Σq_w at
// tab[16b], tab[16b+1] (the row's entries in its group's q8Table layout), and its
// minimum m_w at mw[b] (q5_0 has none: mw is nil).
func (w *Frozen) unpackRow(dst []byte, r int, tab []uint32, mw []float32) {
	nb := w.Cols / QBlock
	rowBytes := w.Cols / w.Format.blockLen() * w.Format.blockBytes()
	switch w.Format {
	case Q4_1:
		unpackQ4(dst, w.blk[r*rowBytes:][:rowBytes], nb, tab, mw)
	case Q5_0:
		if w.ilv != nil {
			unpackQ5IGo(dst, w.ilv[r/ilvGroup*nb*q5GroupBytes:][:nb*q5GroupBytes], r%ilvGroup, nb, tab)
			return
		}
		unpackQ5Go(dst, w.blk[r*rowBytes:][:rowBytes], nb, tab)
	case Q4_K:
		if w.ilv != nil {
			grp := w.ilv[r/ilvGroup*nb/8*q4kGroupBytes:][:nb/8*q4kGroupBytes]
			for sb := 0; sb < nb/8; sb++ {
				unpackQ4KIGo(dst, grp, r%ilvGroup, sb, tab, mw)
			}
			return
		}
		unpackQ4KGo(dst, w.blk[r*rowBytes:][:rowBytes], nb/8, tab, mw)
	}
}

// unpackQ4 unpacks one row of nb Q4_1 blocks for the integer tile: the assembly with
// VNNI (AVX, F16C) or the dot product (NEON), else unpackQ4Go.
func unpackQ4(dst, src []byte, nb int, tab []uint32, mw []float32) {
	if useVNNI || useSDOT {
		_ = dst[nb*(2+QBlock)-1]
		_ = src[nb*(4+QBlock/2)-1]
		_ = tab[(nb-1)*q8TileCols*2+1]
		_ = mw[nb-1]
		unpackQ4AVX(&dst[0], &src[0], nb, &tab[0], &mw[0])
		return
	}
	unpackQ4Go(dst, src, nb, tab, mw)
}

// unpackQ4Go writes block b of a Q4_1 row as the q8_0 tile reads a row of W: its 32
// four-bit weights as bytes at dst[34b+2:] (weight j at byte j), its scale as float32 and
// −128·Σq at tab[16b], tab[16b+1] (the row's entries in its group's q8Table layout), and
// its minimum at mw[b].
func unpackQ4Go(dst, src []byte, nb int, tab []uint32, mw []float32) {
	const bb, ub = 4 + QBlock/2, 2 + QBlock
	for b := 0; b < nb; b++ {
		blk := src[b*bb:][:bb]
		out := dst[b*ub:][:ub]
		var s int32
		for j := 0; j < QBlock/2; j++ {
			lo, hi := blk[4+j]&0xF, blk[4+j]>>4
			out[2+j], out[2+QBlock/2+j] = lo, hi
			s += int32(lo) + int32(hi)
		}
		tab[b*q8TileCols*2] = math.Float32bits(FromF16(binary.LittleEndian.Uint16(blk)))
		tab[b*q8TileCols*2+1] = uint32(-128 * s)
		mw[b] = FromF16(binary.LittleEndian.Uint16(blk[2:]))
	}
}
