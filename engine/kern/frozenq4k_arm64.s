//go:build arm64 && !purego

#include "textflag.h"

// The K-quant kernels (frozenq4k.go) in NEON: the decode dots of Q4_K, Q6_K and Q5_0 and
// the widening of Q4_K and Q5_0, with the Go signatures of frozenq4k_amd64.s. Leaf
// functions using R0-R9 and the vector registers, as kern_arm64.s.
//
// Encodings Go's assembler has no mnemonic for (from the Arm ARM, checked with
// go tool objdump -gnu), named as in kern_arm64.s:
#define FMLAE(d, n, m, i) WORD $(0x4F801000 | (((i)&1)<<21) | ((m)<<16) | (((i)>>1)<<11) | ((n)<<5) | (d))
// FMLSE(d, n, m, i): FMLS Vd.4S, Vn.4S, Vm.S[i] (d −= n·m[i], by element)
#define FMLSE(d, n, m, i) WORD $(0x4F805000 | (((i)&1)<<21) | ((m)<<16) | (((i)>>1)<<11) | ((n)<<5) | (d))
#define FMULE(d, n, m, i) WORD $(0x4F809000 | (((i)&1)<<21) | ((m)<<16) | (((i)>>1)<<11) | ((n)<<5) | (d))
#define FADD4(d, n, m) WORD $(0x4E20D400 | ((m)<<16) | ((n)<<5) | (d))
// FSUB4(d, n, m): FSUB Vd.4S, Vn.4S, Vm.4S
#define FSUB4(d, n, m) WORD $(0x4EA0D400 | ((m)<<16) | ((n)<<5) | (d))
#define FMUL4(d, n, m) WORD $(0x6E20DC00 | ((m)<<16) | ((n)<<5) | (d))
#define FADDP4(d, n, m) WORD $(0x6E20D400 | ((m)<<16) | ((n)<<5) | (d))
#define FADDPS(d, n) WORD $(0x7E30D800 | ((n)<<5) | (d))
#define SXTL8(d, n) WORD $(0x0F08A400 | ((n)<<5) | (d))
#define SXTL8H(d, n) WORD $(0x4F08A400 | ((n)<<5) | (d))
#define SXTL16(d, n) WORD $(0x0F10A400 | ((n)<<5) | (d))
#define SXTL16H(d, n) WORD $(0x4F10A400 | ((n)<<5) | (d))
#define SCVTF4(d, n) WORD $(0x4E21D800 | ((n)<<5) | (d))
#define UCVTF4(d, n) WORD $(0x6E21D800 | ((n)<<5) | (d))
#define FCVTSH(d, n) WORD $(0x1EE24000 | ((n)<<5) | (d))
// CMTST16(d, n, m): CMTST Vd.16B, Vn.16B, Vm.16B (all ones where n AND m is not zero)
#define CMTST16(d, n, m) WORD $(0x4E208C00 | ((m)<<16) | ((n)<<5) | (d))

// Q8I2F(v, d) turns the eight int16 in Vv into floats in Vd and Vd+1.
#define Q8I2F(v, d) \
	SXTL16(d, v) \
	SXTL16H((d)+1, v) \
	SCVTF4(d, d) \
	SCVTF4((d)+1, (d)+1)

// NIB2F turns the 32 bytes of V2 and V3 (values below 256) into floats in V8-V15, in order.
#define NIB2F \
	VUXTL  V2.B8, V4.H8 \
	VUXTL2 V2.B16, V5.H8 \
	VUXTL  V3.B8, V6.H8 \
	VUXTL2 V3.B16, V7.H8 \
	VUXTL  V4.H4, V8.S4 \
	VUXTL2 V4.H8, V9.S4 \
	VUXTL  V5.H4, V10.S4 \
	VUXTL2 V5.H8, V11.S4 \
	VUXTL  V6.H4, V12.S4 \
	VUXTL2 V6.H8, V13.S4 \
	VUXTL  V7.H4, V14.S4 \
	VUXTL2 V7.H8, V15.S4 \
	UCVTF4(8, 8) \
	UCVTF4(9, 9) \
	UCVTF4(10, 10) \
	UCVTF4(11, 11) \
	UCVTF4(12, 12) \
	UCVTF4(13, 13) \
	UCVTF4(14, 14) \
	UCVTF4(15, 15)

// Q4KSUB takes one Q4_K sub-block: its 32 four-bit values in V2, V3 and the next 32
// floats of x (loaded into V16-V23 here). It leaves Σ x·q in V24 and Σ x in V26, four
// lanes each, for the caller to scale by element (d·sc and dmin·m).
#define Q4KSUB \
	VLD1.P 64(R0), [V16.S4, V17.S4, V18.S4, V19.S4] \
	VLD1.P 64(R0), [V20.S4, V21.S4, V22.S4, V23.S4] \
	NIB2F \
	FMUL4(24, 8, 16) \
	FMUL4(25, 9, 17) \
	VFMLA  V10.S4, V18.S4, V24.S4 \
	VFMLA  V11.S4, V19.S4, V25.S4 \
	VFMLA  V12.S4, V20.S4, V24.S4 \
	VFMLA  V13.S4, V21.S4, V25.S4 \
	VFMLA  V14.S4, V22.S4, V24.S4 \
	VFMLA  V15.S4, V23.S4, V25.S4 \
	FADD4(24, 24, 25) \
	FADD4(26, 16, 17) \
	FADD4(27, 18, 19) \
	FADD4(25, 20, 21) \
	FADD4(26, 26, 27) \
	FADD4(27, 22, 23) \
	FADD4(25, 25, 27) \
	FADD4(26, 26, 25)

// func dotQ4KAVX(x *float32, blk *byte, sc *float32, nb int) float32
//
// The dot of x with nb Q4_K super-blocks (144 bytes; the 4-bit values from byte 16),
// their scales and mins unpacked by the caller: per super-block 16 floats d·sc_j, dmin·m_j
// for sub-blocks j = 0…7, so one 4-lane load holds a group's two pairs. Group g's 32 bytes
// hold sub-block 2g in their low nibbles and 2g+1 in their high ones. Per sub-block,
// d·sc·Σx·q − dmin·m·Σx: V30 gathers the low sub-blocks, V29 the high ones.
TEXT ·dotQ4KAVX(SB), NOSPLIT, $0-36
	MOVD  x+0(FP), R0
	MOVD  blk+8(FP), R1
	MOVD  sc+16(FP), R2
	MOVD  nb+24(FP), R3
	VEOR  V30.B16, V30.B16, V30.B16
	VEOR  V29.B16, V29.B16, V29.B16
	VMOVI $15, V28.B16
	CBZ   R3, q4kdone

q4kblock:
	ADD  $16, R1
	MOVD $4, R4

q4kgroup:
	VLD1.P 32(R1), [V0.B16, V1.B16]
	VLD1.P 16(R2), [V31.S4]
	VAND   V28.B16, V0.B16, V2.B16
	VAND   V28.B16, V1.B16, V3.B16
	Q4KSUB
	FMLAE(30, 24, 31, 0)
	FMLSE(30, 26, 31, 1)
	VUSHR  $4, V0.B16, V2.B16
	VUSHR  $4, V1.B16, V3.B16
	Q4KSUB
	FMLAE(29, 24, 31, 2)
	FMLSE(29, 26, 31, 3)
	SUBS   $1, R4
	BNE    q4kgroup
	SUBS   $1, R3
	BNE    q4kblock

q4kdone:
	FADD4(30, 30, 29)
	FADDP4(30, 30, 30)
	FADDPS(30, 30)
	FMOVS F30, ret+32(FP)
	RET

// Q4KW writes one Q4_K sub-block, its values in V2, V3: (d·sc)·q rounded, then − dmin·m
// (lanes i and j = i+1 of V31), as deqQ4K computes it (no fused multiply-add).
#define Q4KW(i, j) \
	NIB2F \
	VDUP V31.S[j], V27.S4 \
	FMULE(8, 8, 31, i) \
	FMULE(9, 9, 31, i) \
	FMULE(10, 10, 31, i) \
	FMULE(11, 11, 31, i) \
	FMULE(12, 12, 31, i) \
	FMULE(13, 13, 31, i) \
	FMULE(14, 14, 31, i) \
	FMULE(15, 15, 31, i) \
	FSUB4(8, 8, 27) \
	FSUB4(9, 9, 27) \
	FSUB4(10, 10, 27) \
	FSUB4(11, 11, 27) \
	FSUB4(12, 12, 27) \
	FSUB4(13, 13, 27) \
	FSUB4(14, 14, 27) \
	FSUB4(15, 15, 27) \
	VST1.P [V8.S4, V9.S4, V10.S4, V11.S4], 64(R0) \
	VST1.P [V12.S4, V13.S4, V14.S4, V15.S4], 64(R0)

// func widenQ4KAVX(dst *float32, blk *byte, sc *float32, nb int)
//
// Writes the 256·nb weights of nb Q4_K super-blocks to dst, their scales and mins
// unpacked in sc as for dotQ4KAVX, bit for bit deqQ4K's.
TEXT ·widenQ4KAVX(SB), NOSPLIT, $0-32
	MOVD  dst+0(FP), R0
	MOVD  blk+8(FP), R1
	MOVD  sc+16(FP), R2
	MOVD  nb+24(FP), R3
	VMOVI $15, V28.B16
	CBZ   R3, w4kdone

w4kblock:
	ADD  $16, R1
	MOVD $4, R4

w4kgroup:
	VLD1.P 32(R1), [V0.B16, V1.B16]
	VLD1.P 16(R2), [V31.S4]
	VAND   V28.B16, V0.B16, V2.B16
	VAND   V28.B16, V1.B16, V3.B16
	Q4KW(0, 1)
	VUSHR  $4, V0.B16, V2.B16
	VUSHR  $4, V1.B16, V3.B16
	Q4KW(2, 3)
	SUBS   $1, R4
	BNE    w4kgroup
	SUBS   $1, R3
	BNE    w4kblock

w4kdone:
	RET

// q5idx picks, for weight j of a Q5_0 block, byte j/8 of qh (broadcast in every lane);
// q5bit is the bit j%8 of that byte.
DATA q5idx<>+0(SB)/8, $0x0000000000000000
DATA q5idx<>+8(SB)/8, $0x0101010101010101
DATA q5idx<>+16(SB)/8, $0x0202020202020202
DATA q5idx<>+24(SB)/8, $0x0303030303030303
GLOBL q5idx<>(SB), RODATA|NOPTR, $32
DATA q5bit<>+0(SB)/8, $0x8040201008040201
DATA q5bit<>+8(SB)/8, $0x8040201008040201
GLOBL q5bit<>(SB), RODATA|NOPTR, $16

// Q5LOAD decodes the Q5_0 block at R1 (22 bytes: half d, 32 bits qh, 16 bytes of nibbles;
// weight j < 16 is the low nibble of byte j with bit j of qh as its fifth bit, weight j+16
// the high nibble with bit j+16) into its 32 weights q − 16 as floats in V6-V13, leaves d
// in F26 and moves R1 to the next block. Constants: q5idx in V24, V25, q5bit in V23, 15 in
// V28 and 16 in V29 (bytes).
#define Q5LOAD \
	MOVHU  (R1), R3 \
	MOVWU  2(R1), R4 \
	ADD    $6, R1, R5 \
	VLD1   (R5), [V0.B16] \
	ADD    $22, R1 \
	VDUP   R4, V1.S4 \
	VTBL   V24.B16, [V1.B16], V2.B16 \
	VTBL   V25.B16, [V1.B16], V3.B16 \
	CMTST16(2, 2, 23) \
	CMTST16(3, 3, 23) \
	VAND   V29.B16, V2.B16, V2.B16 \
	VAND   V29.B16, V3.B16, V3.B16 \
	VAND   V28.B16, V0.B16, V4.B16 \
	VUSHR  $4, V0.B16, V5.B16 \
	VORR   V2.B16, V4.B16, V4.B16 \
	VORR   V3.B16, V5.B16, V5.B16 \
	VSUB   V29.B16, V4.B16, V4.B16 \
	VSUB   V29.B16, V5.B16, V5.B16 \
	SXTL8(2, 4) \
	SXTL8H(3, 4) \
	SXTL8(4, 5) \
	SXTL8H(5, 5) \
	Q8I2F(2, 6) \
	Q8I2F(3, 8) \
	Q8I2F(4, 10) \
	Q8I2F(5, 12) \
	FMOVS  R3, F26 \
	FCVTSH(26, 26)

#define Q5CONST \
	MOVD  $q5idx<>(SB), R5 \
	VLD1  (R5), [V24.B16, V25.B16] \
	MOVD  $q5bit<>(SB), R5 \
	VLD1  (R5), [V23.B16] \
	VMOVI $15, V28.B16 \
	VMOVI $16, V29.B16

// func dotQ5AVX(x *float32, blk *byte, nb int) float32
//
// Σ_b d_b·Σ_j x_j·(q_j − 16) over nb Q5_0 blocks: each block's sum in two accumulators
// (V14, V15), then times its d into V30 by element.
TEXT ·dotQ5AVX(SB), NOSPLIT, $0-28
	MOVD x+0(FP), R0
	MOVD blk+8(FP), R1
	MOVD nb+16(FP), R2
	Q5CONST
	VEOR V30.B16, V30.B16, V30.B16
	CBZ  R2, q5done

q5block:
	VLD1.P 64(R0), [V16.S4, V17.S4, V18.S4, V19.S4]
	Q5LOAD
	FMUL4(14, 6, 16)
	FMUL4(15, 7, 17)
	VFMLA  V8.S4, V18.S4, V14.S4
	VFMLA  V9.S4, V19.S4, V15.S4
	VLD1.P 64(R0), [V16.S4, V17.S4, V18.S4, V19.S4]
	VFMLA  V10.S4, V16.S4, V14.S4
	VFMLA  V11.S4, V17.S4, V15.S4
	VFMLA  V12.S4, V18.S4, V14.S4
	VFMLA  V13.S4, V19.S4, V15.S4
	FADD4(14, 14, 15)
	FMLAE(30, 14, 26, 0)
	SUBS   $1, R2
	BNE    q5block

q5done:
	FADDP4(30, 30, 30)
	FADDPS(30, 30)
	FMOVS F30, ret+24(FP)
	RET

// func widenQ5AVX(dst *float32, blk *byte, nb int)
//
// Writes the 32·nb weights of nb Q5_0 blocks to dst: d·(q − 16), as deqQ5.
TEXT ·widenQ5AVX(SB), NOSPLIT, $0-24
	MOVD dst+0(FP), R0
	MOVD blk+8(FP), R1
	MOVD nb+16(FP), R2
	Q5CONST
	CBZ  R2, w5done

w5block:
	Q5LOAD
	FMULE(6, 6, 26, 0)
	FMULE(7, 7, 26, 0)
	FMULE(8, 8, 26, 0)
	FMULE(9, 9, 26, 0)
	FMULE(10, 10, 26, 0)
	FMULE(11, 11, 26, 0)
	FMULE(12, 12, 26, 0)
	FMULE(13, 13, 26, 0)
	VST1.P [V6.S4, V7.S4, V8.S4, V9.S4], 64(R0)
	VST1.P [V10.S4, V11.S4, V12.S4, V13.S4], 64(R0)
	SUBS   $1, R2
	BNE    w5block

w5done:
	RET

// Q6F widens the 16 signed bytes of V6 to floats in V8-V11.
#define Q6F \
	SXTL8(20, 6) \
	SXTL8H(21, 6) \
	SXTL16(8, 20) \
	SXTL16H(9, 20) \
	SXTL16(10, 21) \
	SXTL16H(11, 21) \
	SCVTF4(8, 8) \
	SCVTF4(9, 9) \
	SCVTF4(10, 10) \
	SCVTF4(11, 11)

// Q6G takes 16 weights of a Q6_K half that share one scale: their 6-bit values minus 32
// as signed bytes in V6, the next 16 floats of x (loaded here into V16-V19) and the scale
// d·sc in lane i of Vs; Σ x·q (four lanes) times the scale is added into Vacc.
#define Q6G(s, i, acc) \
	VLD1.P 64(R0), [V16.S4, V17.S4, V18.S4, V19.S4] \
	Q6F \
	FMUL4(12, 8, 16) \
	FMUL4(14, 9, 17) \
	VFMLA V10.S4, V18.S4, V12.S4 \
	VFMLA V11.S4, V19.S4, V14.S4 \
	FADD4(12, 12, 14) \
	FMLAE(acc, 12, s, i)

// Q6LO builds in V6 the values of weights whose low four bits are the low nibbles of Vl
// and whose two high bits are qh (Vh) shifted left by sh and masked with 0x30 (V29),
// minus 32 (V13); Q6HI the same from the high nibbles, qh shifted right by sh.
#define Q6LO(l, h, sh) \
	VAND V28.B16, l, V6.B16 \
	VSHL $(sh), h, V7.B16 \
	VAND V29.B16, V7.B16, V7.B16 \
	VORR V7.B16, V6.B16, V6.B16 \
	VSUB V13.B16, V6.B16, V6.B16

#define Q6HI(l, h, sh) \
	VUSHR $4, l, V6.B16 \
	VUSHR $(sh), h, V7.B16 \
	VAND  V29.B16, V7.B16, V7.B16 \
	VORR  V7.B16, V6.B16, V6.B16 \
	VSUB  V13.B16, V6.B16, V6.B16

// Q6HI0 is Q6HI where qh's bits are in place (bits 4-5: no shift).
#define Q6HI0(l, h) \
	VUSHR $4, l, V6.B16 \
	VAND  V29.B16, h, V7.B16 \
	VORR  V7.B16, V6.B16, V6.B16 \
	VSUB  V13.B16, V6.B16, V6.B16

// Q6HALF takes one half of a Q6_K super-block (128 weights) through G (Q6G or Q6W): ql
// (64 bytes) at R5, qh (32) at R6, both advanced; its eight scales are lanes 0-3 of Vsa
// and of Vsb. Weight l (of 0…31)
// is the low nibble of ql[l] with qh[l] bits 0-1 above it, l+32 the low nibble of
// ql[l+32] with bits 2-3, l+64 the high nibble of ql[l] with bits 4-5, l+96 the high
// nibble of ql[l+32] with bits 6-7; each 16 share a scale, in the order of x.
#define Q6HALF(sa, sb, G) \
	VLD1.P 64(R5), [V0.B16, V1.B16, V2.B16, V3.B16] \
	VLD1.P 32(R6), [V4.B16, V5.B16] \
	Q6LO(V0.B16, V4.B16, 4) \
	G(sa, 0, 30) \
	Q6LO(V1.B16, V5.B16, 4) \
	G(sa, 1, 31) \
	Q6LO(V2.B16, V4.B16, 2) \
	G(sa, 2, 30) \
	Q6LO(V3.B16, V5.B16, 2) \
	G(sa, 3, 31) \
	Q6HI0(V0.B16, V4.B16) \
	G(sb, 0, 30) \
	Q6HI0(V1.B16, V5.B16) \
	G(sb, 1, 31) \
	Q6HI(V2.B16, V4.B16, 2) \
	G(sb, 2, 30) \
	Q6HI(V3.B16, V5.B16, 2) \
	G(sb, 3, 31)

// func dotQ6KAVX(x *float32, blk *byte, sc *float32, nb int) float32
//
// The dot of x with nb Q6_K super-blocks (210 bytes: ql[128], qh[64], int8 scales[16],
// half d), whose sixteen scales the caller has unpacked as floats d·sc_i in sc (loaded
// into V24-V27 per super-block): Σ_i d·sc_i·Σ x·(q − 32) over the groups of 16.
TEXT ·dotQ6KAVX(SB), NOSPLIT, $0-36
	MOVD  x+0(FP), R0
	MOVD  blk+8(FP), R1
	MOVD  sc+16(FP), R2
	MOVD  nb+24(FP), R3
	VMOVI $15, V28.B16
	VMOVI $0x30, V29.B16
	VMOVI $32, V13.B16
	VEOR  V30.B16, V30.B16, V30.B16
	VEOR  V31.B16, V31.B16, V31.B16
	CBZ   R3, q6kdone

q6kblock:
	VLD1.P 64(R2), [V24.S4, V25.S4, V26.S4, V27.S4]
	MOVD   R1, R5
	ADD    $128, R1, R6
	Q6HALF(24, 25, Q6G)
	Q6HALF(26, 27, Q6G)
	ADD    $210, R1
	SUBS   $1, R3
	BNE    q6kblock

q6kdone:
	FADD4(30, 30, 31)
	FADDP4(30, 30, 30)
	FADDPS(30, 30)
	FMOVS F30, ret+32(FP)
	RET

// Q6W writes 16 weights of a Q6_K half (as Q6G takes them) to dst at R0: (q − 32) times
// d·sc (lane i of Vs), one rounding, as deqQ6K's (d·sc)·q. acc is unused.
#define Q6W(s, i, acc) \
	Q6F \
	FMULE(8, 8, s, i) \
	FMULE(9, 9, s, i) \
	FMULE(10, 10, s, i) \
	FMULE(11, 11, s, i) \
	VST1.P [V8.S4, V9.S4, V10.S4, V11.S4], 64(R0)

// func widenQ6KAVX(dst *float32, blk *byte, sc *float32, nb int)
//
// Writes the 256·nb weights of nb Q6_K super-blocks to dst, their scales unpacked in sc
// as for dotQ6KAVX, bit for bit deqQ6K's.
TEXT ·widenQ6KAVX(SB), NOSPLIT, $0-32
	MOVD  dst+0(FP), R0
	MOVD  blk+8(FP), R1
	MOVD  sc+16(FP), R2
	MOVD  nb+24(FP), R3
	VMOVI $15, V28.B16
	VMOVI $0x30, V29.B16
	VMOVI $32, V13.B16
	CBZ   R3, w6kdone

w6kblock:
	VLD1.P 64(R2), [V24.S4, V25.S4, V26.S4, V27.S4]
	MOVD   R1, R5
	ADD    $128, R1, R6
	Q6HALF(24, 25, Q6W)
	Q6HALF(26, 27, Q6W)
	ADD    $210, R1
	SUBS   $1, R3
	BNE    w6kblock

w6kdone:
	RET
