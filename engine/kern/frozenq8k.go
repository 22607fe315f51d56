package kern

import (
	"encoding/binary"
	"math"
)

// The integer tiles' unpacking of a Q4_K_M file's prompt formats (unpackedProduct): in
// SmolLM2's Q4_K_M, q5_0 holds the rows of 576 (q, k, o, gate, up and most of v) and q4_k
// half of ffn_down, where the float tiles widened every weight to float32 (a 128-token
// prompt 0.92× llama.cpp's on the Zen 4 of docs/performance.md). Go with eight weights a
// uint64: a row is unpacked once per product and read by every 16-row tile of A. q6_k
// (the other half of ffn_down) keeps the float tiles: its scales change every 16
// weights, where the tile has one per 32.

// q5High[b] is bits 4–7 of q−16 in int8 for eight weights whose fifth bits are b's bits:
// 0x00 where the bit is set (q ≥ 16, q−16 = q & 15), 0xF0 where it is clear (q−16 =
// (q & 15) − 16 = (q & 15) | 0xF0 in two's complement).
var q5High = func() (t [256]uint64) {
	for b := range t {
		for i := range 8 {
			if b>>i&1 == 0 {
				t[b] |= 0xF0 << (8 * i)
			}
		}
	}
	return t
}()

// nibbles masks the low four bits of each byte of a uint64.
const nibbles = 0x0f0f0f0f0f0f0f0f

// unpackQ5Go writes block b of a Q5_0 row as the q8_0 tile reads a row of W: its 32
// weights q−16 as int8 bytes at dst[34b+2:], its scale as float32 and −128·Σ(q−16) at
// tab[16b], tab[16b+1]. The offset is in the bytes, so there is no minimum's term.
func unpackQ5Go(dst, src []byte, nb int, tab []uint32) {
	const bb, ub = 2 + 4 + QBlock/2, 2 + QBlock
	for b := 0; b < nb; b++ {
		blk := src[b*bb:][:bb]
		out := dst[b*ub:][:ub]
		qh := binary.LittleEndian.Uint32(blk[2:])
		x0, x1 := binary.LittleEndian.Uint64(blk[6:]), binary.LittleEndian.Uint64(blk[14:])
		binary.LittleEndian.PutUint64(out[2:], x0&nibbles|q5High[qh&0xFF])
		binary.LittleEndian.PutUint64(out[10:], x1&nibbles|q5High[qh>>8&0xFF])
		binary.LittleEndian.PutUint64(out[18:], x0>>4&nibbles|q5High[qh>>16&0xFF])
		binary.LittleEndian.PutUint64(out[26:], x1>>4&nibbles|q5High[qh>>24])
		tab[b*q8TileCols*2] = math.Float32bits(FromF16(binary.LittleEndian.Uint16(blk)))
		tab[b*q8TileCols*2+1] = uint32(-128 * sumInt8(out[2:]))
	}
}

// unpackQ5IGo is unpackQ5Go for lane l of a group of an interleaved Q5_0 matrix
// (frozenq5i.go), grp the group's nb group-blocks: the same words, read where the layout
// keeps them.
func unpackQ5IGo(dst, grp []byte, l, nb int, tab []uint32) {
	const ub = 2 + QBlock
	le := binary.LittleEndian
	for b := 0; b < nb; b++ {
		o := grp[b*q5GroupBytes:][:q5GroupBytes]
		q := o[4*l:][:292] // the lane's words at 32, 96, 160, 224 (nibbles) and 288 (fifth bits)
		out := dst[b*ub:][:ub]
		qh := le.Uint32(q[288:])
		x0 := uint64(le.Uint32(q[32:])) | uint64(le.Uint32(q[96:]))<<32
		x1 := uint64(le.Uint32(q[160:])) | uint64(le.Uint32(q[224:]))<<32
		le.PutUint64(out[2:], x0&nibbles|q5High[qh&0xFF])
		le.PutUint64(out[10:], x1&nibbles|q5High[qh>>8&0xFF])
		le.PutUint64(out[18:], x0>>4&nibbles|q5High[qh>>16&0xFF])
		le.PutUint64(out[26:], x1>>4&nibbles|q5High[qh>>24])
		tab[b*q8TileCols*2] = math.Float32bits(FromF16(le.Uint16(o[2*l:])))
		tab[b*q8TileCols*2+1] = uint32(-128 * sumInt8(out[2:]))
	}
}

// unpackQ4KGo writes the nsb super-blocks of a Q4_K row as 8·nsb blocks of 32 for the
// q8_0 tile: sub-block s's four-bit weights q as bytes at dst[34(8·sb+s)+2:], its scale
// d·sc_s as float32 and −128·Σq in tab, and its minimum −dmin·m_s in mw: the values
// deqQ4K's float32 steps give (w = d·sc_s·q − dmin·m_s).
func unpackQ4KGo(dst, src []byte, nsb int, tab []uint32, mw []float32) {
	const bb, ub = 144, 2 + QBlock
	for sb := 0; sb < nsb; sb++ {
		blk := src[sb*bb:][:bb]
		d, dmin := FromF16(binary.LittleEndian.Uint16(blk)), FromF16(binary.LittleEndian.Uint16(blk[2:]))
		for s := 0; s < 8; s++ {
			sc, m := scaleMinK4(s, blk[4:16])
			b := sb*8 + s
			out := dst[b*ub:][:ub]
			q := blk[16+32*(s/2):][:32]
			shift := 4 * uint(s%2) // even sub-blocks are the low nibbles
			for i := 0; i < QBlock; i += 8 {
				binary.LittleEndian.PutUint64(out[2+i:], binary.LittleEndian.Uint64(q[i:])>>shift&nibbles)
			}
			tab[b*q8TileCols*2] = math.Float32bits(d * float32(sc))
			tab[b*q8TileCols*2+1] = uint32(-128 * sumInt8(out[2:]))
			mw[b] = -(dmin * float32(m))
		}
	}
}

// unpackQ4KIGo is unpackQ4KGo for super-block sb of lane l of a group of an interleaved
// Q4_K matrix (frozenq4ki.go), grp the group's group-blocks: the same words, read where
// the layout keeps them. The caller runs a group-block's lanes one after the other
// (unpackRows), so that its lines stay in L1 for all of them.
func unpackQ4KIGo(dst, grp []byte, l, sb int, tab []uint32, mw []float32) {
	const ub = 2 + QBlock
	le := binary.LittleEndian
	var sc [12]byte
	o := grp[sb*q4kGroupBytes:][:q4kGroupBytes]
	d, dmin := FromF16(le.Uint16(o[2*l:])), FromF16(le.Uint16(o[32+2*l:]))
	for j := 0; j < 3; j++ {
		le.PutUint32(sc[4*j:], le.Uint32(o[64+64*j+4*l:]))
	}
	qs := o[256+4*l:]
	for u := 0; u < 4; u++ { // a pair of sub-blocks: the low nibbles of 32 bytes, then the high
		q := qs[64*u:][:64*28+4] // the pair's words 8u+j lie at 4j+u (q4kWord)
		x0 := uint64(le.Uint32(q[0:])) | uint64(le.Uint32(q[256:]))<<32
		x1 := uint64(le.Uint32(q[512:])) | uint64(le.Uint32(q[768:]))<<32
		x2 := uint64(le.Uint32(q[1024:])) | uint64(le.Uint32(q[1280:]))<<32
		x3 := uint64(le.Uint32(q[1536:])) | uint64(le.Uint32(q[1792:]))<<32
		for h := 0; h < 2; h++ {
			s := 2*u + h
			scale, m := scaleMinK4(s, sc[:])
			b := sb*8 + s
			out := dst[b*ub:][:ub]
			sh := 4 * uint(h)
			le.PutUint64(out[2:], x0>>sh&nibbles)
			le.PutUint64(out[10:], x1>>sh&nibbles)
			le.PutUint64(out[18:], x2>>sh&nibbles)
			le.PutUint64(out[26:], x3>>sh&nibbles)
			tab[b*q8TileCols*2] = math.Float32bits(d * float32(scale))
			tab[b*q8TileCols*2+1] = uint32(-128 * sumInt8(out[2:]))
			mw[b] = -(dmin * float32(m))
		}
	}
}
