//go:build arm64 && !purego

#include "textflag.h"

// The integer tile for q8_0 (and unpacked q4_1) weights (frozenq8.go) with the ARMv8.2
// dot product: SDOT by element multiplies the sixteen signed bytes of Vn by four signed
// bytes of Vm (one 32-bit element, broadcast) and adds each lane's four products to an
// int32 lane. A's 4-byte groups are laid out for it already (one vector: four rows × four
// bytes); A is stored offset by 128 for VPDPBUSD's unsigned operand, so each vector is
// XORed with 0x80 back to q_a as it is loaded, and the block's sum Σ q_a·q_w is exact
// without W's −128·Σq_w correction (the same int32 the portable tile reaches through it).
// The float32 steps are q8TileGo's: s = d_a·d_w, t = s·float32(Σ), acc += t, blocks in
// order, no fused multiply-add, so the outputs are its bits.
//
// The 16×8 tile is four passes of 16 rows × 2 rows of W: V0-V7 the float32 outputs (W row
// 2p in V0-V3, 2p+1 in V4-V7, four rows of A a vector), V8-V15 the block's int32 sums in
// the same order, V16-V19 the two W blocks, V20-V23 a group of A, V24-V27 A's block
// scales, V28 the pair's table entries (d_w in lanes 0 and 2), V29 a scale product, V31
// 0x80 in every byte.

// SDOTE(d, n, m, i): SDOT Vd.4S, Vn.16B, Vm.4B[i]
#define SDOTE(d, n, m, i) WORD $(0x4F80E000 | (((i)&1)<<21) | ((m)<<16) | (((i)>>1)<<11) | ((n)<<5) | (d))
#define FMULE(d, n, m, i) WORD $(0x4F809000 | (((i)&1)<<21) | ((m)<<16) | (((i)>>1)<<11) | ((n)<<5) | (d))
#define FADD4(d, n, m) WORD $(0x4E20D400 | ((m)<<16) | ((n)<<5) | (d))
#define FMUL4(d, n, m) WORD $(0x6E20DC00 | ((m)<<16) | ((n)<<5) | (d))
#define SCVTF4(d, n) WORD $(0x4E21D800 | ((n)<<5) | (d))

// SDG adds group g of A (loaded here into V20-V23, offset removed) times bytes 4g…4g+3 of
// both W blocks (element i of Vm0 and Vm1) to the int32 sums.
#define SDG(m0, m1, i) \
	VLD1.P 64(R10), [V20.B16, V21.B16, V22.B16, V23.B16] \
	VEOR   V31.B16, V20.B16, V20.B16 \
	VEOR   V31.B16, V21.B16, V21.B16 \
	VEOR   V31.B16, V22.B16, V22.B16 \
	VEOR   V31.B16, V23.B16, V23.B16 \
	SDOTE(8, 20, m0, i) \
	SDOTE(9, 21, m0, i) \
	SDOTE(10, 22, m0, i) \
	SDOTE(11, 23, m0, i) \
	SDOTE(12, 20, m1, i) \
	SDOTE(13, 21, m1, i) \
	SDOTE(14, 22, m1, i) \
	SDOTE(15, 23, m1, i)

// SCL adds int32 sums Vi (rows of A with scales Vd) times d_w (lane l of V28) into Vo.
#define SCL(i, d, l, o) \
	FMULE(29, d, 28, l) \
	SCVTF4(i, i) \
	FMUL4(i, i, 29) \
	FADD4(o, o, i)

// func q8TileSDOT(a *byte, d *float32, w *byte, ldw int, tab *uint32, nb int, out *float32)
TEXT ·q8TileSDOT(SB), NOSPLIT, $0-56
	MOVD  a+0(FP), R0
	MOVD  d+8(FP), R1
	MOVD  w+16(FP), R2
	MOVD  ldw+24(FP), R3
	MOVD  tab+32(FP), R4
	MOVD  nb+40(FP), R5
	MOVD  out+48(FP), R6
	VMOVI $0x80, V31.B16
	MOVD  $4, R7

pair:
	VEOR V0.B16, V0.B16, V0.B16
	VEOR V1.B16, V1.B16, V1.B16
	VEOR V2.B16, V2.B16, V2.B16
	VEOR V3.B16, V3.B16, V3.B16
	VEOR V4.B16, V4.B16, V4.B16
	VEOR V5.B16, V5.B16, V5.B16
	VEOR V6.B16, V6.B16, V6.B16
	VEOR V7.B16, V7.B16, V7.B16
	MOVD R0, R10
	MOVD R1, R11
	ADD  $2, R2, R12
	ADD  R3, R12, R13
	MOVD R4, R14
	MOVD R5, R8
	CBZ  R8, store

block:
	VEOR   V8.B16, V8.B16, V8.B16
	VEOR   V9.B16, V9.B16, V9.B16
	VEOR   V10.B16, V10.B16, V10.B16
	VEOR   V11.B16, V11.B16, V11.B16
	VEOR   V12.B16, V12.B16, V12.B16
	VEOR   V13.B16, V13.B16, V13.B16
	VEOR   V14.B16, V14.B16, V14.B16
	VEOR   V15.B16, V15.B16, V15.B16
	VLD1   (R12), [V16.B16, V17.B16]
	VLD1   (R13), [V18.B16, V19.B16]
	ADD    $34, R12
	ADD    $34, R13
	SDG(16, 18, 0)
	SDG(16, 18, 1)
	SDG(16, 18, 2)
	SDG(16, 18, 3)
	SDG(17, 19, 0)
	SDG(17, 19, 1)
	SDG(17, 19, 2)
	SDG(17, 19, 3)
	VLD1.P 64(R11), [V24.S4, V25.S4, V26.S4, V27.S4]
	VLD1   (R14), [V28.S4]
	ADD    $64, R14
	SCL(8, 24, 0, 0)
	SCL(9, 25, 0, 1)
	SCL(10, 26, 0, 2)
	SCL(11, 27, 0, 3)
	SCL(12, 24, 2, 4)
	SCL(13, 25, 2, 5)
	SCL(14, 26, 2, 6)
	SCL(15, 27, 2, 7)
	SUBS   $1, R8
	BNE    block

store:
	VST1.P [V0.S4, V1.S4, V2.S4, V3.S4], 64(R6)
	VST1.P [V4.S4, V5.S4, V6.S4, V7.S4], 64(R6)
	ADD    R3, R2
	ADD    R3, R2
	ADD    $16, R4
	SUBS   $1, R7
	BNE    pair
	RET

#define FCVTSH(d, n) WORD $(0x1EE24000 | ((n)<<5) | (d))

// func unpackQ4AVX(dst *byte, src *byte, nb int, tab *uint32, mw *float32)
//
// unpackQ4Go in NEON, bit for bit: per Q4_1 block (half d, half m, 16 bytes of nibbles)
// its 32 four-bit weights as bytes at dst[34b+2:] (low nibbles, then high), d widened by
// FCVT and −128·Σq (UADDLV of both halves) at tab[16b], tab[16b+1], and m at mw[b].
TEXT ·unpackQ4AVX(SB), NOSPLIT, $0-40
	MOVD  dst+0(FP), R0
	MOVD  src+8(FP), R1
	MOVD  nb+16(FP), R2
	MOVD  tab+24(FP), R3
	MOVD  mw+32(FP), R4
	VMOVI $15, V31.B16
	CBZ   R2, unpackdone

unpackblock:
	MOVHU   (R1), R5
	MOVHU   2(R1), R6
	ADD     $4, R1, R7
	VLD1    (R7), [V0.B16]
	ADD     $20, R1
	VAND    V31.B16, V0.B16, V1.B16
	VUSHR   $4, V0.B16, V2.B16
	ADD     $2, R0, R8
	VST1    [V1.B16, V2.B16], (R8)
	ADD     $34, R0
	VUADDLV V1.B16, V3
	VUADDLV V2.B16, V4
	VMOV    V3.H[0], R9
	VMOV    V4.H[0], R10
	ADD     R10, R9
	LSL     $7, R9
	NEG     R9, R9
	MOVW    R9, 4(R3)
	FMOVS   R5, F5
	FCVTSH(5, 5)
	FMOVS   F5, (R3)
	ADD     $64, R3
	FMOVS   R6, F6
	FCVTSH(6, 6)
	FMOVS.P F6, 4(R4)
	SUBS    $1, R2
	BNE     unpackblock

unpackdone:
	RET
