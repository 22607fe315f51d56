package kern

import "encoding/binary"

// Q4_K interleaved by sixteen rows for the one-row integer dots (frozenilv.go). The
// row-at-a-time dots (dotsQ4KVNNI) add each super-block's eight sub-blocks' lanes by
// VPHADDD and unpack its scales in registers, about 68 instructions for 256 weights: 25
// weights a core-nanosecond with W in L2 (BenchmarkKQuantDot), under what the memory
// gives two cores for a Q4_K_M file of whole super-blocks (a 7B model's). Sixteen rows a
// vector, a super-block of sixteen rows takes about 300 instructions, none of them
// horizontal, each lane computing dotsQ4KGo's terms in its order.
//
// Group-block sb (a super-block of each of the sixteen rows, q4kGroupBytes):
//
//	[0, 32)       the rows' half scales d, row r's at 2r; [32, 64) their dmin;
//	[64, 256)     three words of 64 bytes: word j, lane r (64+64j+4r) holds bytes
//	              4j…4j+3 of row r's twelve bytes of 6-bit scales and minimums;
//	[256, 2304)   32 words of 64 bytes: word 4i+u, lane r (256+64(4i+u)+4r) holds bytes
//	              32u+4i…32u+4i+3 of row r's 128 bytes of nibbles, whose low nibbles are
//	              weights 4i… of sub-block 2u and high ones of sub-block 2u+1: in the order
//	              the assembly reads them (four sub-block pairs apart, so that no
//	              accumulator waits on the one before), front to back, as the prefetchers
//	              want (read in the file's order, 512 bytes apart, the dots ran at 20 GB/s
//	              from memory where the rows' one did at 25).
const q4kGroupBytes = ilvGroup * 144

// placeQ4K writes the file's super-block blk as lane l of the group-block o.
func placeQ4K(o, blk []byte, l int) {
	copy(o[2*l:], blk[:2])
	copy(o[32+2*l:], blk[2:4])
	for j := 0; j < 3; j++ {
		copy(o[64+64*j+4*l:][:4], blk[4+4*j:][:4])
	}
	for p := 0; p < 32; p++ {
		copy(o[256+64*q4kWord(p)+4*l:][:4], blk[16+4*p:][:4])
	}
}

// putQ4KBlock writes lane l's super-block of the group-block o to dst[:144] as the file
// holds it.
func putQ4KBlock(dst, o []byte, l int) {
	_, _ = dst[143], o[q4kGroupBytes-1]
	le := binary.LittleEndian
	le.PutUint16(dst, le.Uint16(o[2*l:]))
	le.PutUint16(dst[2:], le.Uint16(o[32+2*l:]))
	for j := 0; j < 3; j++ {
		le.PutUint32(dst[4+4*j:], le.Uint32(o[64+64*j+4*l:]))
	}
	q := o[256+4*l:]
	for p := 0; p < 32; p++ {
		le.PutUint32(dst[16+4*p:], le.Uint32(q[64*q4kWord(p):]))
	}
}

// q4kWord is where the file's word p of a row's nibbles (bytes 4p…4p+3: sub-block pair
// p/8, weights 4(p%8)…) lies among a group-block's 32 words.
func q4kWord(p int) int { return 4*(p%8) + p/8 }

// dotsQ4KIGo is dotsQ4KI in Go, the reference of the assembly: each lane's super-block put
// back together and dotsQ4KGo's arithmetic on it.
func dotsQ4KIGo(q []byte, c []int32, d []float32, w []byte, nsb int, out []float32) {
	var blk [144]byte
	row := make([]byte, nsb*144)
	for g := 0; g < len(out)/ilvGroup; g++ {
		for l := 0; l < ilvGroup; l++ {
			for sb := 0; sb < nsb; sb++ {
				putQ4KBlock(blk[:], w[(g*nsb+sb)*q4kGroupBytes:], l)
				copy(row[sb*144:], blk[:])
			}
			dotsQ4KGo(q, c, d, row, nsb, out[g*ilvGroup+l:][:1])
		}
	}
}
