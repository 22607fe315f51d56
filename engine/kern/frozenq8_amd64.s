//go:build amd64 && !purego

#include "textflag.h"

// The integer tile for q8_0 weights (frozenq8.go): 16 rows of quantised A, one int32
// lane each, against 8 rows of W. VPDPBUSD (AVX512-VNNI) multiplies the unsigned bytes
// of its first source (A, offset by 128) by the signed bytes of its second (four bytes
// of a row of W, broadcast to every lane) and adds each lane's four products to the
// accumulator, which starts a block at W's −128·Σq_w correction.
//
// Registers: Z0–Z7 the block's eight 4-byte groups of A; Z8–Z15 the int32 sums of W's
// rows 0–7; Z16–Z23 their float32 outputs; Z24 A's scales; Z25 a scale product.

// DPG adds group g of A (zg, bytes off+2 of each W block) to the eight rows' sums.
#define DPG(off, zg) \
	VPDPBUSD.BCST off(R8), zg, Z8 \
	VPDPBUSD.BCST off(R8)(R9*1), zg, Z9 \
	VPDPBUSD.BCST off(R8)(R9*2), zg, Z10 \
	VPDPBUSD.BCST off(R8)(R10*1), zg, Z11 \
	VPDPBUSD.BCST off(R11), zg, Z12 \
	VPDPBUSD.BCST off(R11)(R9*1), zg, Z13 \
	VPDPBUSD.BCST off(R11)(R9*2), zg, Z14 \
	VPDPBUSD.BCST off(R11)(R10*1), zg, Z15

// SCALE adds row j's block to its outputs: zo += float32(zi)·(d_a·d_w), d_w at off(BX).
#define SCALE(off, zi, zo) \
	VCVTDQ2PS zi, zi \
	VMULPS.BCST off(BX), Z24, Z25 \
	VMULPS Z25, zi, zi \
	VADDPS zi, zo, zo

// func q8TileVNNI(a *byte, d *float32, w *byte, ldw int, tab *uint32, nb int, out *float32)
TEXT ·q8TileVNNI(SB), NOSPLIT, $0-56
	MOVQ a+0(FP), SI
	MOVQ d+8(FP), DX
	MOVQ w+16(FP), R8
	MOVQ ldw+24(FP), R9
	MOVQ tab+32(FP), BX
	MOVQ nb+40(FP), CX
	MOVQ out+48(FP), DI
	LEAQ (R9)(R9*2), R10
	LEAQ (R8)(R9*4), R11
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

block:
	VMOVDQU32 0(SI), Z0
	VMOVDQU32 64(SI), Z1
	VMOVDQU32 128(SI), Z2
	VMOVDQU32 192(SI), Z3
	VMOVDQU32 256(SI), Z4
	VMOVDQU32 320(SI), Z5
	VMOVDQU32 384(SI), Z6
	VMOVDQU32 448(SI), Z7
	VMOVUPS (DX), Z24
	VPBROADCASTD 4(BX), Z8
	VPBROADCASTD 12(BX), Z9
	VPBROADCASTD 20(BX), Z10
	VPBROADCASTD 28(BX), Z11
	VPBROADCASTD 36(BX), Z12
	VPBROADCASTD 44(BX), Z13
	VPBROADCASTD 52(BX), Z14
	VPBROADCASTD 60(BX), Z15
	DPG(2, Z0)
	DPG(6, Z1)
	DPG(10, Z2)
	DPG(14, Z3)
	DPG(18, Z4)
	DPG(22, Z5)
	DPG(26, Z6)
	DPG(30, Z7)
	SCALE(0, Z8, Z16)
	SCALE(8, Z9, Z17)
	SCALE(16, Z10, Z18)
	SCALE(24, Z11, Z19)
	SCALE(32, Z12, Z20)
	SCALE(40, Z13, Z21)
	SCALE(48, Z14, Z22)
	SCALE(56, Z15, Z23)
	ADDQ $512, SI
	ADDQ $64, DX
	ADDQ $34, R8
	ADDQ $34, R11
	ADDQ $64, BX
	DECQ CX
	JNZ block

	VMOVUPS Z16, 0(DI)
	VMOVUPS Z17, 64(DI)
	VMOVUPS Z18, 128(DI)
	VMOVUPS Z19, 192(DI)
	VMOVUPS Z20, 256(DI)
	VMOVUPS Z21, 320(DI)
	VMOVUPS Z22, 384(DI)
	VMOVUPS Z23, 448(DI)
	VZEROUPPER
	RET

// func quantActsAVX512(q *byte, d *float32, x *float32, nb int)
//
// quantActBlock for nb blocks of one row of A, bit for bit: q is the row's first 4-byte
// slot in its tile (group g of block b at q + 512b + 64g), d its first scale (block b at
// d + 64b). max|x| is taken on the bits (|x| as unsigned integers orders as the floats,
// and a NaN is above every number, so it reaches d as Go's max takes it); VCVTPS2DQ
// rounds to nearest even, as math.RoundToEven, and a NaN or an overflow becomes
// 0x80000000, which VPMOVSDB saturates to −128, the portable code's value for them.
TEXT ·quantActsAVX512(SB), NOSPLIT, $0-32
	MOVQ q+0(FP), DI
	MOVQ d+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ nb+24(FP), CX
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z6
	MOVL $0x42fe0000, AX // 127.0
	VMOVD AX, X7
	MOVL $0x80808080, AX
	VMOVD AX, X8
	VPBROADCASTD X8, Y8

qblock:
	VMOVUPS 0(SI), Z0
	VMOVUPS 64(SI), Z1
	VPANDD Z6, Z0, Z2
	VPANDD Z6, Z1, Z3
	VPMAXUD Z3, Z2, Z2
	VEXTRACTI64X4 $1, Z2, Y3
	VPMAXUD Y3, Y2, Y2
	VEXTRACTI128 $1, Y2, X3
	VPMAXUD X3, X2, X2
	VPSHUFD $0x4e, X2, X3
	VPMAXUD X3, X2, X2
	VPSHUFD $0xb1, X2, X3
	VPMAXUD X3, X2, X2
	VDIVSS X7, X2, X4 // d = max/127
	VMOVSS X4, (DX)
	VXORPS X5, X5, X5
	VMOVD X2, AX
	TESTL AX, AX
	JZ qzero
	VDIVSS X2, X7, X5 // 127/max

qzero:
	VBROADCASTSS X5, Z5
	VMULPS Z5, Z0, Z0
	VMULPS Z5, Z1, Z1
	VCVTPS2DQ Z0, Z0
	VCVTPS2DQ Z1, Z1
	VPMOVSDB Z0, X0
	VPMOVSDB Z1, X1
	VINSERTI128 $1, X1, Y0, Y0
	VPXOR Y8, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VMOVD X0, 0(DI)
	VPEXTRD $1, X0, 64(DI)
	VPEXTRD $2, X0, 128(DI)
	VPEXTRD $3, X0, 192(DI)
	VMOVD X1, 256(DI)
	VPEXTRD $1, X1, 320(DI)
	VPEXTRD $2, X1, 384(DI)
	VPEXTRD $3, X1, 448(DI)
	ADDQ $128, SI
	ADDQ $512, DI
	ADDQ $64, DX
	DECQ CX
	JNZ qblock
	VZEROUPPER
	RET

// func unpackQ4AVX(dst *byte, src *byte, nb int, tab *uint32, mw *float32)
//
// unpackQ4Go for one row of nb Q4_1 blocks, bit for bit: each block's 32 nibbles as
// bytes at dst+2 of a 34-byte block (weight j at byte j: low nibbles first), its scale
// as float32 and −128·Σq at tab (64 bytes a block), its minimum as float32 at mw.
TEXT ·unpackQ4AVX(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ nb+16(FP), CX
	MOVQ tab+24(FP), BX
	MOVQ mw+32(FP), DX
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X15
	VPBROADCASTD X15, X15
	VPXOR X14, X14, X14

ublock:
	VMOVDQU 4(SI), X0
	VPAND X15, X0, X1
	VPSRLW $4, X0, X2
	VPAND X15, X2, X2
	VMOVDQU X1, 2(DI)
	VMOVDQU X2, 18(DI)
	VPADDB X2, X1, X3
	VPSADBW X14, X3, X3
	VPSHUFD $0x4e, X3, X4
	VPADDQ X4, X3, X3
	VMOVD X3, AX
	NEGL AX
	SHLL $7, AX
	MOVL AX, 4(BX)
	MOVWLZX 0(SI), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMOVSS X5, 0(BX)
	MOVWLZX 2(SI), AX
	VMOVD AX, X6
	VCVTPH2PS X6, X6
	VMOVSS X6, 0(DX)
	ADDQ $20, SI
	ADDQ $34, DI
	ADDQ $64, BX
	ADDQ $4, DX
	DECQ CX
	JNZ ublock
	VZEROUPPER
	RET
