package kern

import "sync"

// Block matrices interleaved by sixteen rows for the one-row integer dots (AVX512-VNNI):
// Q5_0 (frozenq5i.go) and Q4_K (frozenq4ki.go). The row-at-a-time dots reduce each
// block's lanes to one row's sum; stored so that a vector's sixteen lanes are sixteen rows,
// a block of sixteen rows needs no horizontal sums, and each lane adds its row's terms in
// the row-at-a-time order, so the outputs keep their bits. A group of ilvGroup rows is
// the row's blocks' count of group-blocks, group-block b holding block b of every row of
// the group (sixteen times a block's bytes: the file's bytes, moved). A matrix is stored
// so where the dots run and its rows are whole groups; what reads a row otherwise (the
// GEMMs' widening, the prompt tiles' unpacking, Blocks) reads it where the layout keeps
// it or puts its blocks back together (kBlock, kRows).

// ilvGroup is the rows of W a vector of the interleaved dots holds, one a lane.
const ilvGroup = 16

// ilvFormat reports whether matrices in format f are interleaved where the dots run.
func ilvFormat(f WeightFormat) bool { return f == Q5_0 || f == Q4_K }

// ilvRows reports whether a matrix of rows rows is interleaved here.
func ilvRows(rows int) bool { return useVNNI && rows%ilvGroup == 0 && rows > 0 }

// interleaveRows writes the file-ordered rows src ([rows][nb] blocks of format f) to dst
// interleaved (rows a multiple of ilvGroup).
func interleaveRows(f WeightFormat, dst, src []byte, rows, nb int) {
	bb := f.blockBytes()
	gb := ilvGroup * bb
	for r := 0; r < rows; r++ {
		g, l := r/ilvGroup, r%ilvGroup
		for b := 0; b < nb; b++ {
			blk, o := src[(r*nb+b)*bb:][:bb], dst[(g*nb+b)*gb:][:gb]
			if f == Q5_0 {
				placeQ5(o, blk, l)
			} else {
				placeQ4K(o, blk, l)
			}
		}
	}
}

// kBlock is block b of row r as the file holds it: where it lies, or (interleaved) put
// together in dst (at least a block's bytes).
func (w *Frozen) kBlock(dst []byte, r, b int) []byte {
	bb := w.Format.blockBytes()
	nb := w.Cols / w.Format.blockLen()
	if w.ilv == nil {
		return w.blk[(r*nb+b)*bb:][:bb]
	}
	o := w.ilv[(r/ilvGroup*nb+b)*ilvGroup*bb:][:ilvGroup*bb]
	if w.Format == Q5_0 {
		putQ5Block(dst, o, r%ilvGroup)
	} else {
		putQ4KBlock(dst, o, r%ilvGroup)
	}
	return dst[:bb]
}

// kRows is blocks [b0, b1) of rows [r0, r1) as the file holds them ([row][block]): a
// slice of the stored bytes when they are in that order (b0 = 0 and b1 = nb, or one
// row), else put together in buf, grown as needed.
func (w *Frozen) kRows(buf *[]byte, r0, r1, b0, b1 int) []byte {
	bb := w.Format.blockBytes()
	nb := w.Cols / w.Format.blockLen()
	if w.ilv == nil && (r1-r0 == 1 || b0 == 0 && b1 == nb) {
		return w.blk[(r0*nb+b0)*bb : ((r1-1)*nb+b1)*bb]
	}
	n := (r1 - r0) * (b1 - b0) * bb
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	dst := (*buf)[:n]
	for r := r0; r < r1; r++ {
		for b := b0; b < b1; b++ {
			w.kBlock(dst[((r-r0)*(b1-b0)+b-b0)*bb:], r, b)
		}
	}
	return dst
}

// kRowsPool recycles kRows' buffers.
var kRowsPool = sync.Pool{New: func() any { return new([]byte) }}

// ilvDots is intDots for an interleaved matrix: outputs [lo, hi) of c = a·Wᵀ, a one row
// quantised by quantRow. Whole groups go straight to c; a group cut by lo or hi (a split
// is aligned to oneRowAlign, so only outside a decode step) through a buffer.
func (w *Frozen) ilvDots(c, a []float32, lo, hi int, acc bool) {
	nb := w.Cols / w.Format.blockLen()
	gb := nb * ilvGroup * w.Format.blockBytes()
	d, cs, q := q8Row(a, w.Cols/QBlock)
	dots := dotsQ5I
	if w.Format == Q4_K {
		dots = dotsQ4KI
	}
	dotRows(c, lo, hi, hi-lo, acc, func(j int, out []float32) {
		for len(out) > 0 {
			g := j / ilvGroup
			if j%ilvGroup == 0 && len(out) >= ilvGroup {
				n := len(out) / ilvGroup
				dots(q, cs, d, w.ilv[g*gb:], nb, out[:n*ilvGroup])
				j, out = j+n*ilvGroup, out[n*ilvGroup:]
				continue
			}
			var all [ilvGroup]float32
			dots(q, cs, d, w.ilv[g*gb:], nb, all[:])
			n := copy(out, all[j%ilvGroup:])
			j, out = j+n, out[n:]
		}
	})
}

// A format's interleaved dots: dots(q, c, d, w, n, out) sets out (whole groups of
// ilvGroup) to the dots of the quantised row (q, c, d: q8Row) with the len(out)/ilvGroup
// groups of n group-blocks at w, through the assembly with VNNI, else the Go twin; bit for
// bit the row-at-a-time dots' (dotsQ5Go, dotsQ4KGo) over the same rows.
var (
	dotsQ5I  = ilvDotsOf(Q5_0, dotsQ5IVNNI, dotsQ5IGo)
	dotsQ4KI = ilvDotsOf(Q4_K, dotsQ4KIVNNI, dotsQ4KIGo)
)

// ilvDotsOf is format f's interleaved dots from its assembly and its Go twin (intDotsOf's
// counterpart).
func ilvDotsOf(f WeightFormat, vnni func(q *byte, c *int32, d *float32, w *byte, n, groups int, out *float32),
	twin func(q []byte, c []int32, d []float32, w []byte, n int, out []float32)) func(q []byte, c []int32, d []float32, w []byte, n int, out []float32) {
	per, gb := f.blockLen()/QBlock, ilvGroup*f.blockBytes() // A's blocks to one of W's; a group-block's bytes
	return func(q []byte, c []int32, d []float32, w []byte, n int, out []float32) {
		if !useVNNI {
			twin(q, c, d, w, n, out)
			return
		}
		groups := len(out) / ilvGroup
		_ = w[groups*n*gb-1]
		_, _, _ = q[n*per*QBlock-1], c[n*per-1], d[n*per-1]
		vnni(&q[0], &c[0], &d[0], &w[0], n, groups, &out[0])
	}
}
