package kern

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// interleavedQ4K is a Q4_K matrix of rows×k stored interleaved whatever the machine, with
// its file-ordered bytes; every row's first super-block has its scales and minimums at
// their limits (sub-block 0's scale 63 and minimum 0, those of 4–7 from their top bits).
func interleavedQ4K(t *testing.T, rng *rand.Rand, rows, k int) (*Frozen, []byte) {
	t.Helper()
	w := NewFrozen(randSlice(rng, rows*k), rows, k, Q4_K)
	if w.Format != Q4_K {
		t.Fatalf("%d×%d is %s, want q4_k", rows, k, w.Format)
	}
	file := append([]byte(nil), w.Blocks()...)
	for r := 0; r < rows; r++ {
		blk := file[r*k/QKBlock*144:]
		blk[4], blk[8], blk[12] = 0xFF, 0x00, 0xFF
	}
	w.ilv, w.blk = make([]byte, len(file)), nil
	interleaveRows(Q4_K, w.ilv, file, rows, k/QKBlock)
	return w, file
}

// TestQ4KInterleave: the interleaved Q4_K layout holds the file's bytes, and its dots give
// dotsQ4KGo's bits over the same rows at every level, for whole groups, ranges that cut
// a group and with acc, a NaN in A included.
func TestQ4KInterleave(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 7))
	for _, s := range []struct{ rows, nsb int }{{16, 1}, {16, 6}, {48, 2}, {32, 3}} {
		k := s.nsb * QKBlock
		w, file := interleavedQ4K(t, rng, s.rows, k)
		if !bytes.Equal(w.Blocks(), file) {
			t.Fatalf("%d×%d: Blocks differs from the file's bytes", s.rows, k)
		}
		var buf []byte
		r1 := min(19, s.rows)
		if got := w.kRows(&buf, 3, r1, s.nsb-1, s.nsb); !bytes.Equal(got, rowsOfSize(file, 3, r1, s.nsb-1, s.nsb, s.nsb, 144)) {
			t.Fatalf("%d×%d: rows 3–%d, the last super-block differ", s.rows, k, r1)
		}
		for _, nan := range []bool{false, true} {
			a := randSlice(rng, k)
			clear(a[QBlock : 2*QBlock])
			if nan {
				a[k-1] = float32(math.NaN())
			}
			row := make([]float32, q8RowLen(k))
			quantRow(row, a)
			d, c, q := q8Row(row, k/QBlock)
			want := make([]float32, s.rows)
			dotsQ4KGo(q, c, d, file, s.nsb, want)
			for _, level := range q8Levels() {
				name := fmt.Sprintf("%d×%d nan=%v %s", s.rows, k, nan, level)
				got := make([]float32, s.rows)
				atQ8Level(level, func() { dotsQ4KI(q, c, d, w.ilv, s.nsb, got) })
				sameBitsOrNaN(t, name, got, want)
				part := make([]float32, s.rows)
				for j := range part {
					part[j] = 1
				}
				lo, hi := 5, s.rows-3
				atQ8Level(level, func() { w.ilvDots(part, row, lo, hi, true) })
				for j := range part {
					wj := float32(1)
					if j >= lo && j < hi {
						wj += want[j]
					}
					if math.Float32bits(part[j]) != math.Float32bits(wj) && !(part[j] != part[j] && wj != wj) {
						t.Fatalf("%s outputs %d–%d with acc: C[%d] = %g, want %g", name, lo, hi, j, part[j], wj)
					}
				}
			}
		}
	}
}

// TestQ4KInterleaveMutations: every part of a Q4_K group-block is read at every level —
// d and dmin, each of the three scale words (a low scale, a minimum, the top bits that
// sub-blocks 4–7 take), a low and a high nibble of the first and last word — in the
// first group and a later one, the first lane and the last.
func TestQ4KInterleaveMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 8))
	const rows, nsb = 32, 2
	w, _ := interleavedQ4K(t, rng, rows, nsb*QKBlock)
	row := make([]float32, q8RowLen(nsb*QKBlock))
	quantRow(row, randSlice(rng, nsb*QKBlock))
	d, c, q := q8Row(row, nsb*8)
	for _, level := range q8Levels() {
		run := func(blk []byte) []float32 {
			out := make([]float32, rows)
			atQ8Level(level, func() { dotsQ4KI(q, c, d, blk, nsb, out) })
			return out
		}
		base := run(w.ilv)
		type flip struct {
			off  int
			bits byte
		}
		var flips []flip
		for _, g := range []int{0, nsb*q4kGroupBytes + q4kGroupBytes} { // group 0 super-block 0, group 1 super-block 1
			for _, l := range []int{0, 15} {
				flips = append(flips,
					flip{g + 2*l + 1, 0x04}, flip{g + 32 + 2*l + 1, 0x04}, // d, dmin
					flip{g + 64 + 4*l, 0x01}, flip{g + 64 + 4*l + 3, 0x80}, // scale 0; top bits of scale 3 (sub-block 7's)
					flip{g + 128 + 4*l + 1, 0x02}, flip{g + 192 + 4*l + 2, 0x10}, // minimum 1; sub-block 6's minimum
					flip{g + 256 + 4*l, 0x01}, flip{g + 256 + 64*31 + 4*l + 3, 0x80}) // nibbles
			}
		}
		for _, f := range flips {
			b2 := append([]byte(nil), w.ilv...)
			b2[f.off] ^= f.bits
			got := run(b2)
			same := true
			for j := range got {
				same = same && math.Float32bits(got[j]) == math.Float32bits(base[j])
			}
			if same {
				t.Errorf("%s: flipping %#x of byte %d left every output as it was", level, f.bits, f.off)
			}
		}
	}
}

// TestQ4KInterleaveRows: widening at every kernel level, rowSeg, the prompt tiles'
// unpacking and the float one-row dots give on an interleaved Q4_K matrix the bits they
// give on the file's bytes.
func TestQ4KInterleaveRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 9))
	const rows, nsb = 32, 3
	k := nsb * QKBlock
	w, file := interleavedQ4K(t, rng, rows, k)
	plain := &Frozen{Format: Q4_K, Rows: rows, Cols: k, blk: file}
	for _, r := range []int{0, 7, 15, 16, 31} {
		want := make([]float32, k)
		plain.Row(want, r)
		for _, seg := range [][2]int{{0, k}, {256, 512}, {32, 64}, {100, 300}, {5, 3}} {
			got := make([]float32, seg[1])
			w.rowSeg(got, r, seg[0])
			sameBits(t, fmt.Sprintf("rowSeg row %d seg %v", r, seg), got, want[seg[0]:seg[0]+seg[1]])
			for _, level := range kernelLevels {
				atLevel(level, func() { w.widen(got, r, seg[0]) })
				sameBits(t, fmt.Sprintf("widen %s row %d seg %v", level, r, seg), got, want[seg[0]:seg[0]+seg[1]])
			}
		}
		const ub = 2 + QBlock
		nb := k / QBlock
		gotU, wantU := make([]byte, nb*ub), make([]byte, nb*ub)
		gotT, wantT := make([]uint32, nb*q8TileCols*2), make([]uint32, nb*q8TileCols*2)
		gotM, wantM := make([]float32, nb), make([]float32, nb)
		w.unpackRow(gotU, r, gotT, gotM)
		plain.unpackRow(wantU, r, wantT, wantM)
		if !bytes.Equal(gotU, wantU) || fmt.Sprint(gotT, gotM) != fmt.Sprint(wantT, wantM) {
			t.Fatalf("unpackRow row %d differs from the file's bytes'", r)
		}
	}
	if !useAVX512 {
		return
	}
	a := randSlice(rng, k)
	got, want := make([]float32, rows), make([]float32, rows)
	w.kDots(got, a, 3, 29, false)
	plain.kDots(want, a, 3, 29, false)
	sameBits(t, "kDots", got, want)
}

func sameBitsOrNaN(t *testing.T, name string, got, want []float32) {
	t.Helper()
	for j := range got {
		if math.Float32bits(got[j]) != math.Float32bits(want[j]) && !(got[j] != got[j] && want[j] != want[j]) {
			t.Fatalf("%s: C[%d] = %g, want %g", name, j, got[j], want[j])
		}
	}
}
