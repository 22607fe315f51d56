package kern

import (
	"encoding/binary"
)

// Q5_0 rows interleaved by sixteen for the one-row integer dots. A Q4_K_M file of a model
// whose widths are not multiples of 256 (SmolLM2-135M: 576) holds most of its matrices as
// Q5_0, and the row-at-a-time dots (dotsQ5VNNI) spend about thirteen instructions a block:
// unpacking its fifth bits, adding its eight lanes and its scale's product into one
// float32 chain. That is 14 weights a core-nanosecond with W in L2
// (BenchmarkFrozenDotCompute), under what the memory gives two cores. Stored so that a
// vector's sixteen lanes are sixteen rows, a block of sixteen rows is a handful of
// instructions with no horizontal sums: each lane adds its row's t = (d_a·d_w)·float32(Σ)
// block after block, the order the row-at-a-time dots and the tiles keep, so every
// output keeps its bits.
//
// A group of sixteen rows is nb group-blocks of q5GroupBytes, group-block b holding
// block b of each of the rows:
//
//	[0, 32)     the sixteen half scales d_w, row r's at 2r;
//	[32, 288)   four quads of 64 bytes: quad i, lane r (bytes 32+64i+4r…) holds bytes
//	            4i…4i+3 of row r's sixteen bytes of nibbles, so a quad's low nibbles are
//	            weights 4i…4i+3 of every row and its high nibbles weights 16+4i…;
//	[288, 352)  the sixteen rows' fifth bits as the file holds them, row r's 32-bit
//	            word at 288+4r (the assembly turns them into byte masks, VPTESTMB).
//
// The same bytes as the file's blocks, moved (frozenilv.go).
const q5GroupBytes = ilvGroup * 22

// placeQ5 writes the file's block blk as lane l of the group-block o.
func placeQ5(o, blk []byte, l int) {
	copy(o[2*l:], blk[:2])
	for i := 0; i < 4; i++ {
		copy(o[32+64*i+4*l:][:4], blk[6+4*i:][:4])
	}
	copy(o[288+4*l:][:4], blk[2:6])
}

// putQ5Block writes lane l's block of the group-block o to dst[:22] as the file holds it.
func putQ5Block(dst, o []byte, l int) {
	_ = dst[21]
	le := binary.LittleEndian
	d, qh, x0, x1 := q5Parts(o, l)
	le.PutUint16(dst, d)
	le.PutUint32(dst[2:], qh)
	le.PutUint64(dst[6:], x0)
	le.PutUint64(dst[14:], x1)
}

// q5Parts is lane l's block of the group-block o: its half scale, its 32 fifth bits and
// its sixteen bytes of nibbles as two words (the file's bytes 6–13 and 14–21).
func q5Parts(o []byte, l int) (d uint16, qh uint32, x0, x1 uint64) {
	_ = o[q5GroupBytes-1]
	le := binary.LittleEndian
	d = le.Uint16(o[2*l:])
	x0 = uint64(le.Uint32(o[32+4*l:])) | uint64(le.Uint32(o[96+4*l:]))<<32
	x1 = uint64(le.Uint32(o[160+4*l:])) | uint64(le.Uint32(o[224+4*l:]))<<32
	return d, le.Uint32(o[288+4*l:]), x0, x1
}

// dotsQ5IGo is dotsQ5I in Go, the reference of the assembly: per lane (row) and block the
// exact S = Σq·q_a − 16·Σq_a (q the unsigned five bits), t = (d_a·d_w)·float32(S), sum +=
// t, as dotsQ5Go.
func dotsQ5IGo(q []byte, c []int32, d []float32, w []byte, nb int, out []float32) {
	for g := 0; g < len(out)/ilvGroup; g++ {
		for l := 0; l < ilvGroup; l++ {
			var sum float32
			for b := 0; b < nb; b++ {
				o := w[(g*nb+b)*q5GroupBytes:][:q5GroupBytes]
				var s int32
				for i := 0; i < 4; i++ {
					for j := 0; j < 4; j++ {
						nib := o[32+64*i+4*l+j]
						for half := 0; half < 2; half++ {
							t := i + 4*half // the mask and the weight's quad
							u := int32(nib >> (4 * half) & 0xF)
							u |= int32(binary.LittleEndian.Uint32(o[288+4*l:])>>(4*t+j)&1) << 4
							s += u * int32(int8(q[b*QBlock+4*t+j]))
						}
					}
				}
				s -= c[b] >> 3 // 16·Σq_a
				scale := d[b] * FromF16(binary.LittleEndian.Uint16(o[2*l:]))
				sum = float32(sum + float32(scale*float32(s)))
			}
			out[g*ilvGroup+l] = sum
		}
	}
}
