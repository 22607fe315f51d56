package kern

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// editBlocks runs f on w's blocks in the file's layout and keeps what it leaves there (a
// Q5_0 matrix kept interleaved is put back together, edited and interleaved again).
func editBlocks(w *Frozen, f func(blk []byte)) {
	if w.ilv == nil {
		f(w.blk)
		return
	}
	blk := w.Blocks()
	f(blk)
	interleaveRows(w.Format, w.ilv, blk, w.Rows, w.Cols/w.Format.blockLen())
}

// interleavedQ5 is a Q5_0 matrix of rows×k stored interleaved whatever the machine (the
// portable twin reads it where the assembly cannot run), with its file-ordered bytes.
func interleavedQ5(t *testing.T, rng *rand.Rand, rows, k int) (*Frozen, []byte) {
	t.Helper()
	w := NewFrozen(randSlice(rng, rows*k), rows, k, Q4_K)
	if w.Format != Q5_0 {
		t.Fatalf("%d×%d asked as q4_k is %s, want q5_0", rows, k, w.Format)
	}
	file := append([]byte(nil), w.Blocks()...)
	if w.ilv == nil {
		w.ilv = make([]byte, len(file))
		interleaveRows(Q5_0, w.ilv, file, rows, k/QBlock)
		w.blk = nil
	}
	return w, file
}

// TestQ5Interleave: the interleaved layout holds the file's bytes (every block and every
// run of rows and blocks put back together equals them), and its dots give dotsQ5Go's
// bits over the same rows at every level, for whole groups, for output ranges that cut
// a group, and with acc.
func TestQ5Interleave(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 16))
	for _, s := range []struct{ rows, nb int }{{16, 1}, {16, 18}, {48, 5}, {32, 50}} {
		k := s.nb * QBlock
		w, file := interleavedQ5(t, rng, s.rows, k)
		if !bytes.Equal(w.Blocks(), file) {
			t.Fatalf("%d×%d: Blocks differs from the file's bytes", s.rows, k)
		}
		var buf []byte
		if got := w.kRows(&buf, 3, 7, 1, s.nb); !bytes.Equal(got, rowsOf(file, 3, 7, 1, s.nb, s.nb)) {
			t.Fatalf("%d×%d: rows 3–7, blocks 1–%d differ", s.rows, k, s.nb)
		}
		a := randSlice(rng, k)
		a[3] = 0
		row := make([]float32, q8RowLen(k))
		quantRow(row, a)
		d, c, q := q8Row(row, s.nb)
		want := make([]float32, s.rows)
		dotsQ5Go(q, c, d, file, s.nb, want)
		for _, level := range q8Levels() {
			name := fmt.Sprintf("%d×%d %s", s.rows, k, level)
			got := make([]float32, s.rows)
			atQ8Level(level, func() { dotsQ5I(q, c, d, w.ilv, s.nb, got) })
			sameBits(t, name, got, want)
			for _, r := range [][2]int{{0, s.rows}, {5, s.rows - 3}, {17, 18}, {16, 32}} {
				if r[1] > s.rows || r[0] >= r[1] {
					continue
				}
				part := make([]float32, s.rows)
				for j := range part {
					part[j] = 1
				}
				atQ8Level(level, func() { w.ilvDots(part, row, r[0], r[1], true) })
				for j := range part {
					wj := float32(1)
					if j >= r[0] && j < r[1] {
						wj += want[j]
					}
					if math.Float32bits(part[j]) != math.Float32bits(wj) {
						t.Fatalf("%s outputs %d–%d with acc: C[%d] = %g, want %g", name, r[0], r[1], j, part[j], wj)
					}
				}
			}
		}
	}
}

// TestQ5InterleaveMutations: every part of a group-block is read by the interleaved dots
// at every level — a half scale's bit, a low nibble, a high nibble, a fifth bit of each
// mask, in the first group, a later group and the last row.
func TestQ5InterleaveMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 2))
	const rows, nb = 32, 3
	w, _ := interleavedQ5(t, rng, rows, nb*QBlock)
	row := make([]float32, q8RowLen(nb*QBlock))
	quantRow(row, randSlice(rng, nb*QBlock))
	d, c, q := q8Row(row, nb)
	for _, level := range q8Levels() {
		run := func(blk []byte) []float32 {
			out := make([]float32, rows)
			atQ8Level(level, func() { dotsQ5I(q, c, d, blk, nb, out) })
			return out
		}
		base := run(w.ilv)
		var offs []int
		for _, g := range []int{0, nb*q5GroupBytes + 2*q5GroupBytes} { // group 0 block 0, group 1 block 2
			offs = append(offs, g+1, g+31, g+32, g+32+64*3+63, g+288, g+288+8*7+7)
		}
		for _, off := range offs {
			for _, bit := range []byte{0x01, 0x10, 0x80} {
				b2 := append([]byte(nil), w.ilv...)
				b2[off] ^= bit
				got := run(b2)
				same := true
				for j := range got {
					same = same && math.Float32bits(got[j]) == math.Float32bits(base[j])
				}
				if same {
					t.Errorf("%s: flipping %#x of byte %d left every output as it was", level, bit, off)
				}
			}
		}
	}
}

// rowsOf is blocks [b0, b1) of rows [r0, r1) of file-ordered blocks, nb a row.
func rowsOf(file []byte, r0, r1, b0, b1, nb int) []byte {
	return rowsOfSize(file, r0, r1, b0, b1, nb, 22)
}

// rowsOfSize is rowsOf for blocks of bb bytes.
func rowsOfSize(file []byte, r0, r1, b0, b1, nb, bb int) []byte {
	var out []byte
	for r := r0; r < r1; r++ {
		out = append(out, file[(r*nb+b0)*bb:(r*nb+b1)*bb]...)
	}
	return out
}

// TestQ5InterleaveRows: what reads a row of an interleaved Q5_0 matrix — widening (the
// GEMMs' packing) at every kernel level, rowSeg, the prompt tiles' unpacking, the float
// one-row dots — gives the bits it gives on the file's bytes, over whole rows and
// segments, in the first group and a later one.
func TestQ5InterleaveRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 3))
	const rows, nb = 32, 18
	k := nb * QBlock
	w, file := interleavedQ5(t, rng, rows, k)
	plain, err := FrozenBlocks(Q5_0, append([]byte(nil), file...), rows, k)
	if err != nil {
		t.Fatal(err)
	}
	if plain.ilv != nil { // stored as the file's rows, whatever this machine would do
		plain.blk, plain.ilv = plain.Blocks(), nil
	}
	for _, r := range []int{0, 7, 15, 16, 31} {
		want := make([]float32, k)
		for b := 0; b < nb; b++ {
			deqQ5(want[b*QBlock:][:QBlock], file[(r*nb+b)*22:][:22])
		}
		for _, seg := range [][2]int{{0, k}, {64, 256}, {32, 64}, {100, 300}, {5, 3}} {
			got := make([]float32, seg[1])
			w.rowSeg(got, r, seg[0])
			sameBits(t, fmt.Sprintf("rowSeg row %d seg %v", r, seg), got, want[seg[0]:seg[0]+seg[1]])
			for _, level := range kernelLevels {
				atLevel(level, func() { w.widen(got, r, seg[0]) })
				sameBits(t, fmt.Sprintf("widen %s row %d seg %v", level, r, seg), got, want[seg[0]:seg[0]+seg[1]])
			}
		}
		const ub = 2 + QBlock
		gotU, wantU := make([]byte, nb*ub), make([]byte, nb*ub)
		gotT, wantT := make([]uint32, nb*q8TileCols*2), make([]uint32, nb*q8TileCols*2)
		w.unpackRow(gotU, r, gotT, nil)
		plain.unpackRow(wantU, r, wantT, nil)
		if !bytes.Equal(gotU, wantU) || fmt.Sprint(gotT) != fmt.Sprint(wantT) {
			t.Fatalf("unpackRow row %d differs from the file's bytes'", r)
		}
	}
	if !useAVX512 {
		return
	}
	a := randSlice(rng, k)
	got, want := make([]float32, rows), make([]float32, rows)
	w.q5Dots(got, a, 3, 29, false)
	plain.q5Dots(want, a, 3, 29, false)
	sameBits(t, "q5Dots", got, want)
}
