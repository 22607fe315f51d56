package kern

import "encoding/binary"

// GGUF's K-quant Q4_K and the formats llama.cpp's Q4_K_M mixes with it (Q6_K for some
// tensors, Q5_0 and Q8_0 where rows are not whole super-blocks), kept as blocks so that
// a Q4_K_M file computes with its own bytes:
//
//	q4_k  4.5 bits a weight: super-blocks of 256 along a row, 144 bytes: a half scale d,
//	      a half dmin, 12 bytes packing eight 6-bit scales sc and mins m, and 128 bytes of
//	      4-bit q; sub-block s (32 weights) is w = d·sc_s·q − dmin·m_s.
//	q6_k  6.5625 bits: super-blocks of 256, 210 bytes: 128 bytes of low nibbles, 64 of
//	      high 2-bit pairs, 16 int8 scales (one per 16 weights) and a half d; w = d·sc·(q−32).
//	q5_0  5.5 bits: blocks of 32, 22 bytes: a half d, 32 high bits, 16 bytes of nibbles;
//	      w = d·(q−16).
//
// Quantising into q4_k is llama.cpp's reference quantiser (quantize_row_q4_K_ref: per
// sub-block an error-minimising scale and minimum, make_qkx2_quants), into q6_k its
// quantize_row_q6_K_ref (make_qx_quants per 16 weights), into q5_0 its
// quantize_row_q5_0_ref. A matrix asked for in q4_k whose rows are not whole
// super-blocks is stored in q5_0, one asked for in q6_k in q8_0 (llama.cpp's own
// fallbacks), and in bf16 when they are not whole blocks of 32 either. q6_k is not a
// format configuration chooses: the engine's q4_k mixes it in as llama.cpp's Q4_K_M does
// (engine/weights.go).
//
// The kernels: the decode dots of q4_k, q6_k and q5_0, and the widening of q4_k and
// q5_0, are AVX2 assembly on amd64 (frozenq4k_amd64.s) and NEON on arm64
// (frozenq4k_arm64.s), the K-quants' scales unpacked to float32 in Go first, and so is
// q6_k's widening; every kernel on other machines (and -tags purego) is portable Go. Two or more rows widen W into the 16-wide tiles (AVX-512) or the packed
// GEMM's panels, as the other block formats do.

// QKBlock is the number of weights in one super-block of Q4_K and Q6_K.
const QKBlock = 256

// blockLen is the weights one block of a block format holds.
func (f WeightFormat) blockLen() int {
	if f == Q4_K || f == Q6_K {
		return QKBlock
	}
	return QBlock
}

// DequantBlock writes the weights of one block of Q4_K, Q6_K or Q5_0 (blk: the block's
// bytes as GGUF stores them) to dst (256, 256 or 32 values): the one dequantiser of these
// formats, which the GGUF reader uses too. Other formats leave dst as it is.
func (f WeightFormat) DequantBlock(dst []float32, blk []byte) { f.deqBlock(dst, blk) }

// deqBlock writes the weights of one block of f (blk, blockBytes long) to dst
// (blockLen long).
func (f WeightFormat) deqBlock(dst []float32, blk []byte) {
	switch f {
	case Q4_K:
		deqQ4K(dst, blk)
	case Q6_K:
		deqQ6K(dst, blk)
	case Q5_0:
		deqQ5(dst, blk)
	}
}

// rowSegK is rowSeg for this file's formats: whole blocks straight into dst, a partial
// one through scratch on the stack.
func (w *Frozen) rowSegK(dst []float32, r, c0 int) {
	n := len(dst)
	bl, bb := w.Format.blockLen(), w.Format.blockBytes()
	nb := w.Cols / bl
	var tmp [QKBlock]float32
	var kb [144]byte // a block put back together (Q4_K's are the largest of these formats' kept interleaved)
	for i := 0; i < n; {
		c := c0 + i
		b, j := c/bl, c%bl
		cnt := min(bl-j, n-i)
		var blk []byte
		if w.ilv != nil {
			blk = w.kBlock(kb[:], r, b)
		} else {
			blk = w.blk[(r*nb+b)*bb:][:bb]
		}
		switch {
		case j == 0 && cnt == bl:
			w.Format.deqBlock(dst[i:i+bl], blk)
		case w.Format == Q4_K:
			// Only the 32-weight sub-blocks the segment touches: the packed GEMM's
			// backward panels take 16 columns of a row at a time.
			for s := j / 32; s*32 < j+cnt; s++ {
				deqQ4KSub(tmp[s*32:s*32+32], blk, s)
			}
			copy(dst[i:i+cnt], tmp[j:j+cnt])
		case w.Format == Q6_K:
			// Only the 16-weight groups the segment touches, as for Q4_K.
			for g := j / 16; g*16 < j+cnt; g++ {
				deqQ6KGroup(tmp[g*16:g*16+16], blk, g)
			}
			copy(dst[i:i+cnt], tmp[j:j+cnt])
		default:
			w.Format.deqBlock(tmp[:bl], blk)
			copy(dst[i:i+cnt], tmp[j:j+cnt])
		}
		i += cnt
	}
}

// dotRowK is dotRow for this file's formats.
func (w *Frozen) dotRowK(x []float32, r int) float32 {
	bl, bb := w.Format.blockLen(), w.Format.blockBytes()
	nb := w.Cols / bl
	row := w.blk
	if w.ilv != nil {
		buf := kRowsPool.Get().(*[]byte)
		defer kRowsPool.Put(buf)
		row = w.kRows(buf, r, r+1, 0, nb)
	} else {
		row = row[r*nb*bb : (r+1)*nb*bb]
	}
	fast := useAVX2 && useF16C
	switch {
	case w.Format == Q4_K && fast:
		return dotQ4KFast(x, row)
	case w.Format == Q4_K:
		return dotQ4KGo(x, row)
	case w.Format == Q6_K && fast:
		return dotQ6KFast(x, row)
	case w.Format == Q6_K:
		return dotQ6KGo(x, row)
	case useAVX512:
		var s float32
		dotsQ5x512(&x[0], &row[0], nb, 1, &s)
		return s
	case fast:
		return dotQ5AVX(&x[0], &row[0], nb)
	}
	return dotQ5Go(x, row)
}

// q5Dots computes columns [lo, hi) of the one row c = a·Wᵀ for Q5_0 weights on
// AVX-512: the rows in one call of dotsQ5x512, W streamed row after row. A Q4_K_M file
// of a model whose widths are not multiples of 256 (SmolLM2-135M: 576) holds most of its
// matrices as Q5_0, so this is most of such a model's decode step.
func (w *Frozen) q5Dots(c, a []float32, lo, hi int, acc bool) {
	nb := w.Cols / QBlock
	_ = a[w.Cols-1]
	buf := kRowsPool.Get().(*[]byte)
	defer kRowsPool.Put(buf)
	most := hi - lo
	if w.ilv != nil {
		most = ilvGroup // rows put back together a group at a time
	}
	dotRows(c, lo, hi, most, acc, func(j int, out []float32) {
		rows := w.kRows(buf, j, j+len(out), 0, nb)
		dotsQ5x512(&a[0], &rows[0], nb, len(out), &out[0])
	})
}

// q4kChunk is the super-blocks whose scales the assembly takes unpacked at a time.
const q4kChunk = 32

// unpackQ4KScales writes the eight 6-bit scales and mins of each of the n super-blocks
// at blk to sc as float32 (d·sc_j, dmin·m_j: deqQ4K's d1 and o1), 16 a super-block.
func unpackQ4KScales(sc []float32, blk []byte, n int) {
	_ = sc[:16*n]
	const bb = 144
	for b := 0; b < n; b++ {
		bl := blk[b*bb:]
		d, dmin := FromF16(binary.LittleEndian.Uint16(bl)), FromF16(binary.LittleEndian.Uint16(bl[2:]))
		q := (*[12]byte)(bl[4:16])
		o := (*[16]float32)(sc[16*b:])
		// scaleMinK4 unrolled: sub-blocks 0–3 in the low six bits of bytes 0–7, 4–7 in
		// the nibbles of bytes 8–11 with their top two bits above 0–7's.
		for j := 0; j < 4; j++ {
			o[2*j], o[2*j+1] = d*float32(q[j]&63), dmin*float32(q[j+4]&63)
			o[8+2*j] = d * float32(q[j+8]&0xF|(q[j]>>6)<<4)
			o[9+2*j] = dmin * float32(q[j+8]>>4|(q[j+4]>>6)<<4)
		}
	}
}

// unpackQ4KIScales is unpackQ4KScales for lane l of the n group-blocks grp of an
// interleaved Q4_K matrix (frozenq4ki.go).
func unpackQ4KIScales(sc []float32, grp []byte, l, n int) {
	var blk [16]byte
	le := binary.LittleEndian
	for b := 0; b < n; b++ {
		o := grp[b*q4kGroupBytes:][:q4kGroupBytes]
		le.PutUint16(blk[:], le.Uint16(o[2*l:]))
		le.PutUint16(blk[2:], le.Uint16(o[32+2*l:]))
		for j := 0; j < 3; j++ {
			le.PutUint32(blk[4+4*j:], le.Uint32(o[64+64*j+4*l:]))
		}
		unpackQ4KScales(sc[16*b:], blk[:], 1)
	}
}

// dotQ4KFast is the assembly's dot over a row, q4kChunk super-blocks at a time.
func dotQ4KFast(x []float32, row []byte) float32 {
	const bb = 144
	var sc [q4kChunk * 16]float32
	var s float32
	nb := len(row) / bb
	for b0 := 0; b0 < nb; b0 += q4kChunk {
		n := min(q4kChunk, nb-b0)
		unpackQ4KScales(sc[:], row[b0*bb:], n)
		s += dotQ4KAVX(&x[b0*QKBlock], &row[b0*bb], &sc[0], n)
	}
	return s
}

// dotQ6KFast is the assembly's Q6_K dot over a row, its scales unpacked to float32
// (d·sc_i) q4kChunk super-blocks at a time.
func dotQ6KFast(x []float32, row []byte) float32 {
	const bb = 210
	var sc [q4kChunk * 16]float32
	var s float32
	nb := len(row) / bb
	for b0 := 0; b0 < nb; b0 += q4kChunk {
		n := min(q4kChunk, nb-b0)
		unpackQ6KScales(sc[:], row[b0*bb:], n)
		s += dotQ6KAVX(&x[b0*QKBlock], &row[b0*bb], &sc[0], n)
	}
	return s
}

// unpackQ6KScales writes the sixteen scales of each of the n Q6_K super-blocks at blk to
// sc as float32 d·sc_i (deqQ6K's first product), 16 a super-block.
func unpackQ6KScales(sc []float32, blk []byte, n int) {
	_ = sc[:16*n]
	const bb = 210
	for b := 0; b < n; b++ {
		bl := blk[b*bb:]
		d := FromF16(binary.LittleEndian.Uint16(bl[208:]))
		for i, v := range bl[192:208] {
			sc[16*b+i] = d * float32(int8(v))
		}
	}
}

// unpackQ6KPairs writes the sixteen scales of each of the n Q6_K super-blocks at blk to
// sc as float32 pairs (d·sc_i, −32·d·sc_i), 32 floats a super-block: dotsQ6Kx512 makes
// each weight (q − 32)·d·sc_i as one FMA of q with them, the same rounding as deqQ6K's
// (the second is exact, a power of two times the first).
func unpackQ6KPairs(sc []float32, blk []byte, n int) {
	const bb = 210
	_ = sc[:32*n]
	for b := 0; b < n; b++ {
		bl := blk[b*bb:]
		d := FromF16(binary.LittleEndian.Uint16(bl[208:]))
		o := (*[32]float32)(sc[32*b:])
		for i, v := range bl[192:208] {
			s := d * float32(int8(v))
			o[2*i], o[2*i+1] = s, -32*s
		}
	}
}

// kDotRows is the rows of W whose scales kDots unpacks at a time (their float32 scales
// stay in L1 while the rows stream past).
const kDotRows = 32

// kDots computes columns [lo, hi) of the one row c = a·Wᵀ for Q4_K and Q6_K weights on
// AVX-512: the scales of kDotRows rows unpacked to float32, then those rows in one call
// of dotsQ4Kx512 or dotsQ6Kx512 (16 weights a vector; the AVX2 dots, 8 a vector with
// their scales unpacked per row, took 4–5× as long).
func (w *Frozen) kDots(c, a []float32, lo, hi int, acc bool) {
	nb := w.Cols / QKBlock
	per := 16
	if w.Format == Q6_K {
		per = 32
	}
	_ = a[w.Cols-1]
	buf := getScratch(kDotRows * nb * per)
	defer putScratch(buf)
	rows := kRowsPool.Get().(*[]byte)
	defer kRowsPool.Put(rows)
	dotRows(c, lo, hi, kDotRows, acc, func(j int, out []float32) {
		r := len(out)
		blk, sc := w.kRows(rows, j, j+r, 0, nb), (*buf)[:r*nb*per]
		if w.Format == Q6_K {
			unpackQ6KPairs(sc, blk, r*nb)
			dotsQ6Kx512(&a[0], &blk[0], &sc[0], nb, r, &out[0])
		} else {
			unpackQ4KScales(sc, blk, r*nb)
			dotsQ4Kx512(&a[0], &blk[0], &sc[0], nb, r, &out[0])
		}
	})
}

// widenK is widen for this file's formats: whole blocks of q4_k, q6_k and q5_0 through
// the assembly, anything else through rowSegK.
func (w *Frozen) widenK(dst []float32, r, c0 int) {
	n := len(dst)
	bl, bb := w.Format.blockLen(), w.Format.blockBytes()
	if !useAVX2 || !useF16C || n == 0 || c0%bl != 0 || n%bl != 0 || w.ilv != nil && !q5IAsm {
		w.rowSegK(dst, r, c0)
		return
	}
	if w.Format == Q5_0 && w.ilv == nil {
		widenQ5AVX(&dst[0], &w.blk[(r*w.Cols+c0)/bl*bb], n/bl)
		return
	}
	if w.Format == Q5_0 {
		nb := w.Cols / QBlock
		widenQ5IAVX(&dst[0], &w.ilv[(r/ilvGroup*nb+c0/bl)*q5GroupBytes], r%ilvGroup, n/bl)
		return
	}
	off := (r*w.Cols + c0) / bl * bb
	var sc [q4kChunk * 16]float32
	for b0 := 0; b0 < n/bl; b0 += q4kChunk {
		k := min(q4kChunk, n/bl-b0)
		if w.ilv != nil { // Q4_K interleaved: the lane's words where the layout keeps them
			nb := w.Cols / QKBlock
			grp := w.ilv[(r/ilvGroup*nb+c0/bl+b0)*q4kGroupBytes:][:k*q4kGroupBytes]
			unpackQ4KIScales(sc[:], grp, r%ilvGroup, k)
			widenQ4KIAVX(&dst[b0*bl], &grp[0], r%ilvGroup, &sc[0], k)
			continue
		}
		if w.Format == Q6_K {
			unpackQ6KScales(sc[:], w.blk[off+b0*bb:], k)
			widenQ6KAVX(&dst[b0*bl], &w.blk[off+b0*bb], &sc[0], k)
			continue
		}
		unpackQ4KScales(sc[:], w.blk[off+b0*bb:], k)
		widenQ4KAVX(&dst[b0*bl], &w.blk[off+b0*bb], &sc[0], k)
	}
}

// scaleMinK4 is llama.cpp's get_scale_min_k4: the j-th 6-bit scale and min of a Q4_K
// super-block's 12 bytes.
func scaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return (s[j+4] & 0xF) | (s[j-4]>>6)<<4, (s[j+4] >> 4) | (s[j]>>6)<<4
}

// deqQ4K is llama.cpp's dequantize_row_q4_K for one super-block.
func deqQ4K(y []float32, b []byte) {
	d, dmin := FromF16(binary.LittleEndian.Uint16(b)), FromF16(binary.LittleEndian.Uint16(b[2:]))
	sc := b[4:16]
	qs := b[16:144]
	y = y[:QKBlock]
	for j := 0; j < QKBlock; j += 64 {
		s1, m1 := scaleMinK4(j/32, sc)
		s2, m2 := scaleMinK4(j/32+1, sc)
		d1, o1 := d*float32(s1), dmin*float32(m1)
		d2, o2 := d*float32(s2), dmin*float32(m2)
		q := qs[j/2 : j/2+32]
		lo, hi := y[j:j+32], y[j+32:j+64]
		for l, v := range q {
			// The product rounded before the subtraction (no fused multiply-add), as
			// widenQ4KAVX computes it.
			lo[l] = float32(d1*float32(v&0xF)) - o1
			hi[l] = float32(d2*float32(v>>4)) - o2
		}
	}
}

// deqQ4KSub is deqQ4K for sub-block s (weights 32s…32s+31) alone.
func deqQ4KSub(y []float32, b []byte, s int) {
	d, dmin := FromF16(binary.LittleEndian.Uint16(b)), FromF16(binary.LittleEndian.Uint16(b[2:]))
	sc, m := scaleMinK4(s, b[4:16])
	d1, o1 := d*float32(sc), dmin*float32(m)
	q := b[16+32*(s/2) : 16+32*(s/2)+32]
	y = y[:32]
	if s%2 == 0 {
		for l, v := range q {
			y[l] = float32(d1*float32(v&0xF)) - o1
		}
		return
	}
	for l, v := range q {
		y[l] = float32(d1*float32(v>>4)) - o1
	}
}

// dotQ4KGo is the dot of x with a row of Q4_K super-blocks: per sub-block
// d·sc·Σ x·q − dmin·m·Σ x.
func dotQ4KGo(x []float32, row []byte) float32 {
	const bb = 144
	var s float32
	for b := 0; b < len(row)/bb; b++ {
		blk := row[b*bb : b*bb+bb]
		xs := x[b*QKBlock : b*QKBlock+QKBlock]
		d, dmin := FromF16(binary.LittleEndian.Uint16(blk)), FromF16(binary.LittleEndian.Uint16(blk[2:]))
		sc := blk[4:16]
		var sq, sm float32
		for g := 0; g < 4; g++ {
			q := blk[16+32*g : 16+32*g+32]
			xa, xb := xs[64*g:64*g+32], xs[64*g+32:64*g+64]
			var ta0, ta1, tb0, tb1, sa0, sa1, sb0, sb1 float32
			for l := 0; l < 32; l += 2 {
				q0, q1 := q[l], q[l+1]
				ta0 += xa[l] * float32(q0&0xF)
				ta1 += xa[l+1] * float32(q1&0xF)
				tb0 += xb[l] * float32(q0>>4)
				tb1 += xb[l+1] * float32(q1>>4)
				sa0 += xa[l]
				sa1 += xa[l+1]
				sb0 += xb[l]
				sb1 += xb[l+1]
			}
			s1, m1 := scaleMinK4(2*g, sc)
			s2, m2 := scaleMinK4(2*g+1, sc)
			sq += float32(s1)*(ta0+ta1) + float32(s2)*(tb0+tb1)
			sm += float32(m1)*(sa0+sa1) + float32(m2)*(sb0+sb1)
		}
		s += d*sq - dmin*sm
	}
	return s
}

// deqQ6K is llama.cpp's dequantize_row_q6_K for one super-block.
func deqQ6K(y []float32, b []byte) {
	ql := b[0:128]
	qh := b[128:192]
	sc := b[192:208]
	d := FromF16(binary.LittleEndian.Uint16(b[208:]))
	for n := 0; n < 2; n++ {
		l0, h0, s0, y0 := ql[n*64:], qh[n*32:], sc[n*8:], y[n*128:n*128+128]
		for l := 0; l < 32; l++ {
			is := l / 16
			q1 := int(l0[l]&0xF|(h0[l]>>0&3)<<4) - 32
			q2 := int(l0[l+32]&0xF|(h0[l]>>2&3)<<4) - 32
			q3 := int(l0[l]>>4|(h0[l]>>4&3)<<4) - 32
			q4 := int(l0[l+32]>>4|(h0[l]>>6&3)<<4) - 32
			y0[l] = d * float32(int8(s0[is])) * float32(q1)
			y0[l+32] = d * float32(int8(s0[is+2])) * float32(q2)
			y0[l+64] = d * float32(int8(s0[is+4])) * float32(q3)
			y0[l+96] = d * float32(int8(s0[is+6])) * float32(q4)
		}
	}
}

// deqQ6KGroup is deqQ6K for group g (weights 16g…16g+15, one scale) alone: in half
// n = g/8, quarter k = g%8/2 (low nibbles of ql[l] for k = 0, of ql[l+32] for 1, high
// nibbles for 2 and 3; bits 2k, 2k+1 of qh[l]), lanes l = 16·(g%2)….
func deqQ6KGroup(y []float32, b []byte, g int) {
	n, k, l0 := g/8, g%8/2, 16*(g%2)
	ql := b[n*64+32*(k&1)+l0:][:16]
	qh := b[128+n*32+l0:][:16]
	d := FromF16(binary.LittleEndian.Uint16(b[208:]))
	s := float32(int8(b[192+g]))
	sh := uint(4 * (k / 2))
	y = y[:16]
	for l := range y {
		q := int(ql[l]>>sh&0xF|(qh[l]>>(2*k)&3)<<4) - 32
		y[l] = d * s * float32(q)
	}
}

// dotQ6KGo is the dot of x with a row of Q6_K super-blocks: d·Σ_g sc_g·Σ x·(q−32) over
// the sixteen groups of 16.
func dotQ6KGo(x []float32, row []byte) float32 {
	const bb = 210
	var s float32
	for b := 0; b < len(row)/bb; b++ {
		blk := row[b*bb : b*bb+bb]
		xs := x[b*QKBlock : b*QKBlock+QKBlock]
		d := FromF16(binary.LittleEndian.Uint16(blk[208:]))
		var sb float32
		for n := 0; n < 2; n++ {
			l0, h0, s0, x0 := blk[n*64:n*64+64], blk[128+n*32:128+n*32+32], blk[192+n*8:192+n*8+8], xs[n*128:n*128+128]
			for half := 0; half < 2; half++ {
				var t1, t2, t3, t4 float32
				for l := 16 * half; l < 16*half+16; l++ {
					lo, hi, h := l0[l], l0[l+32], h0[l]
					t1 += x0[l] * float32(int(lo&0xF|(h&3)<<4)-32)
					t2 += x0[l+32] * float32(int(hi&0xF|(h>>2&3)<<4)-32)
					t3 += x0[l+64] * float32(int(lo>>4|(h>>4&3)<<4)-32)
					t4 += x0[l+96] * float32(int(hi>>4|(h>>6&3)<<4)-32)
				}
				sb += float32(int8(s0[half]))*t1 + float32(int8(s0[half+2]))*t2 +
					float32(int8(s0[half+4]))*t3 + float32(int8(s0[half+6]))*t4
			}
		}
		s += d * sb
	}
	return s
}

// deqQ5 is llama.cpp's dequantize_row_q5_0 for one block.
func deqQ5(y []float32, b []byte) {
	d := FromF16(binary.LittleEndian.Uint16(b))
	qh := binary.LittleEndian.Uint32(b[2:])
	qs := b[6:22]
	y = y[:QBlock]
	for j := 0; j < 16; j++ {
		lo := int(qs[j]&0xF) | int((qh>>j)&1)<<4
		hi := int(qs[j]>>4) | int((qh>>(j+16))&1)<<4
		y[j] = d * float32(lo-16)
		y[j+16] = d * float32(hi-16)
	}
}

// dotQ5Go is the dot of x with a row of Q5_0 blocks: Σ_b d_b·Σ_j x·(q−16).
func dotQ5Go(x []float32, row []byte) float32 {
	const bb = 22
	var s float32
	for b := 0; b < len(row)/bb; b++ {
		blk := row[b*bb : b*bb+bb]
		xs := x[b*QBlock : b*QBlock+QBlock]
		qh := binary.LittleEndian.Uint32(blk[2:])
		qs := blk[6:22]
		var t0, t1 float32
		for j := 0; j < 16; j++ {
			lo := int(qs[j]&0xF) | int((qh>>j)&1)<<4
			hi := int(qs[j]>>4) | int((qh>>(j+16))&1)<<4
			t0 += xs[j] * float32(lo-16)
			t1 += xs[j+16] * float32(hi-16)
		}
		s += FromF16(binary.LittleEndian.Uint16(blk)) * (t0 + t1)
	}
	return s
}
