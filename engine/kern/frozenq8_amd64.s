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

// SPLATD sets every dword of y (x its low half) to imm (AX clobbered).
#define SPLATD(imm, x, y) \
	MOVL imm, AX \
	VMOVD AX, x \
	VPBROADCASTD x, y

// QUANTINIT loads quantActBlock's constants: Z6 the mask of |x|, X7 127.0, Y8 0x80 bytes.
#define QUANTINIT \
	MOVL $0x7fffffff, AX \
	VPBROADCASTD AX, Z6 \
	MOVL $0x42fe0000, AX \
	VMOVD AX, X7 \
	SPLATD($0x80808080, X8, Y8)

// QUANT32 quantises the block of 32 float32 at SI: d_a to (DX), the 32 signed bytes q_a
// to Y0 (quantActBlock's bytes before their offset).
#define QUANT32 \
	VMOVUPS 0(SI), Z0 \
	VMOVUPS 64(SI), Z1 \
	VPANDD Z6, Z0, Z2 \
	VPANDD Z6, Z1, Z3 \
	VPMAXUD Z3, Z2, Z2 \
	VEXTRACTI64X4 $1, Z2, Y3 \
	VPMAXUD Y3, Y2, Y2 \
	VEXTRACTI128 $1, Y2, X3 \
	VPMAXUD X3, X2, X2 \
	VPSHUFD $0x4e, X2, X3 \
	VPMAXUD X3, X2, X2 \
	VPSHUFD $0xb1, X2, X3 \
	VPMAXUD X3, X2, X2 \
	VDIVSS X7, X2, X4 \
	VMOVSS X4, (DX) \
	VXORPS X5, X5, X5 \
	VMOVD X2, AX \
	TESTL AX, AX \
	JZ 2(PC) \
	VDIVSS X2, X7, X5 \
	VBROADCASTSS X5, Z5 \
	VMULPS Z5, Z0, Z0 \
	VMULPS Z5, Z1, Z1 \
	VCVTPS2DQ Z0, Z0 \
	VCVTPS2DQ Z1, Z1 \
	VPMOVSDB Z0, X0 \
	VPMOVSDB Z1, X1 \
	VINSERTI128 $1, X1, Y0, Y0

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
	QUANTINIT

qblock:
	QUANT32
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

// func quantRowAVX512(q *byte, c *int32, d *float32, x *float32, nb int)
//
// quantActBlock for the nb blocks of one row in the one-row dots' layout (q8Row), bit
// for bit: block b's 32 bytes q_a (signed, not offset) at q + 32b, 128·Σq_a at c + 4b
// (VPSADBW sums the bytes offset to unsigned), d_a at d + 4b.
TEXT ·quantRowAVX512(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), DI
	MOVQ c+8(FP), R8
	MOVQ d+16(FP), DX
	MOVQ x+24(FP), SI
	MOVQ nb+32(FP), CX
	QUANTINIT
	VPXOR Y9, Y9, Y9

rblock:
	QUANT32
	VMOVDQU Y0, (DI)
	VPXOR Y8, Y0, Y1
	VPSADBW Y9, Y1, Y1
	VEXTRACTI128 $1, Y1, X2
	VPADDQ X2, X1, X1
	VPSHUFD $0x4e, X1, X2
	VPADDQ X2, X1, X1
	VMOVD X1, AX
	SUBL $4096, AX
	SHLL $7, AX
	MOVL AX, (R8)
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $4, R8
	ADDQ $4, DX
	DECQ CX
	JNZ rblock
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

// STORESUM8 stores the sum of Y10's eight float32 lanes at (BX): ((0+4)+(2+6)) +
// ((1+5)+(3+7)), the Go twins' order.
#define STORESUM8 \
	VEXTRACTF128 $1, Y10, X1 \
	VADDPS X1, X10, X10 \
	VMOVHLPS X10, X1, X1 \
	VADDPS X1, X10, X10 \
	VMOVSHDUP X10, X1 \
	VADDSS X1, X10, X10 \
	VMOVSS X10, (BX)

// The one-row integer dots (frozenq8dot.go): rows of W one after the other against one
// row of A quantised (q8Row). Each block's 32 weights are offset to unsigned (XOR 0x80: q_w +
// 128) and VPDPBUSD multiplies them by A's signed bytes into 8 int32 lanes; four blocks'
// lanes are added by block (VPHADDD), and A's 128·Σq_a taken off, which leaves each
// block's exact Σq_w·q_a. Then, as the tile does, t = (d_w·d_a)·float32(Σ) and sum += t,
// block after block. One row at a time: two rows interleaved (two sum chains) doubled the
// speed with W in cache but halved it from memory, the two streams defeating the
// prefetchers (BenchmarkFrozenGEMV: 7.5 vs 16.8 GB/s on a core for the float dots).
//
// Registers: SI A's bytes, R13 the offset of A's block in its corrections (R11) and
// scales (R12), DI the row, Y15 0x80 bytes, X14 the row's sum.

// Q8DP4 sets y0–y3 to the int32 lanes of the four blocks at row times A's blocks at SI.
#define Q8DP4(row, y0, y1, y2, y3) \
	VPXOR 2(row), Y15, Y8 \
	VPXOR y0, y0, y0 \
	VPDPBUSD (SI), Y8, y0 \
	VPXOR 36(row), Y15, Y9 \
	VPXOR y1, y1, y1 \
	VPDPBUSD 32(SI), Y9, y1 \
	VPXOR 70(row), Y15, Y10 \
	VPXOR y2, y2, y2 \
	VPDPBUSD 64(SI), Y10, y2 \
	VPXOR 104(row), Y15, Y11 \
	VPXOR y3, y3, y3 \
	VPDPBUSD 96(SI), Y11, y3

// HADD4 leaves in x0 (the low half of y0; x1 that of y1) the sums of the eight int32
// lanes of each of y0–y3.
#define HADD4(y0, y1, y2, y3, x0, x1) \
	VPHADDD y1, y0, y0 \
	VPHADDD y3, y2, y2 \
	VPHADDD y2, y0, y0 \
	VEXTRACTI128 $1, y0, x1 \
	VPADDD x1, x0, x0

// Q8SUM4 leaves the four blocks' Σq_w·q_a in x0 (the low half of y0; x1 that of y1).
#define Q8SUM4(y0, y1, y2, y3, x0, x1) \
	HADD4(y0, y1, y2, y3, x0, x1) \
	VPSUBD (R11)(R13*1), x0, x0

// GATHER4H widens the halves at o0(row), o1, o2, o3 to four float32 in xd (AX clobbered).
#define GATHER4H(row, o0, o1, o2, o3, xd) \
	MOVWLZX o0(row), AX \
	VMOVD AX, xd \
	VPINSRW $1, o1(row), xd, xd \
	VPINSRW $2, o2(row), xd, xd \
	VPINSRW $3, o3(row), xd, xd \
	VCVTPH2PS xd, xd

// Q8ADD4 adds the four blocks' terms (S in x0, d_w at row, row+o1, +o2, +o3) to sum, in
// order.
#define Q8ADD4(row, o1, o2, o3, x0, sum) \
	VCVTDQ2PS x0, x0 \
	GATHER4H(row, 0, o1, o2, o3, X8) \
	VMULPS (R12)(R13*1), X8, X8 \
	VMULPS X8, x0, x0 \
	VADDSS x0, sum, sum \
	VMOVSHDUP x0, X9 \
	VADDSS X9, sum, sum \
	VMOVHLPS x0, X9, X9 \
	VADDSS X9, sum, sum \
	VPSHUFD $0xff, x0, X9 \
	VADDSS X9, sum, sum

// HSUM8 adds the eight int32 lanes of y0 (x0 its low half) into x0's first.
#define HSUM8(y0, x0, x1) \
	VEXTRACTI128 $1, y0, x1 \
	VPADDD x1, x0, x0 \
	VPSHUFD $0x4e, x0, x1 \
	VPADDD x1, x0, x0 \
	VPSHUFD $0xb1, x0, x1 \
	VPADDD x1, x0, x0

// ADD1 adds one block's term (S in x0, d_w at row) to sum.
#define ADD1(row, x0, sum) \
	VCVTDQ2PS x0, x0 \
	MOVWLZX 0(row), AX \
	VMOVD AX, X8 \
	VCVTPH2PS X8, X8 \
	VMULSS (R12)(R13*1), X8, X8 \
	VMULSS X8, x0, x0 \
	VADDSS x0, sum, sum

// Q8ONE adds one block of row to sum.
#define Q8ONE(row, y0, x0, x1, sum) \
	VPXOR 2(row), Y15, Y8 \
	VPXOR y0, y0, y0 \
	VPDPBUSD (SI), Y8, y0 \
	HSUM8(y0, x0, x1) \
	VMOVD (R11)(R13*1), x1 \
	VPSUBD x1, x0, x0 \
	ADD1(row, x0, sum)

// func dotsQ8VNNI(q *byte, c *int32, d *float32, w *byte, nb, rows int, out *float32)
TEXT ·dotsQ8VNNI(SB), NOSPLIT, $0-56
	MOVQ q+0(FP), R10
	MOVQ c+8(FP), R11
	MOVQ d+16(FP), R12
	MOVQ w+24(FP), DI
	MOVQ rows+40(FP), DX
	MOVQ out+48(FP), BX
	SPLATD($0x80808080, X15, Y15)

q8row:
	VXORPS X14, X14, X14
	MOVQ R10, SI
	XORQ R13, R13
	MOVQ nb+32(FP), CX
	SHRQ $2, CX
	JZ q8tail

q8group:
	Q8DP4(DI, Y0, Y1, Y2, Y3)
	Q8SUM4(Y0, Y1, Y2, Y3, X0, X1)
	Q8ADD4(DI, 34, 68, 102, X0, X14)
	ADDQ $136, DI
	ADDQ $128, SI
	ADDQ $16, R13
	DECQ CX
	JNZ q8group

q8tail:
	MOVQ nb+32(FP), CX
	ANDQ $3, CX
	JZ q8store

q8one:
	Q8ONE(DI, Y0, X0, X1, X14)
	ADDQ $34, DI
	ADDQ $32, SI
	ADDQ $4, R13
	DECQ CX
	JNZ q8one

q8store:
	VMOVSS X14, (BX)
	ADDQ $4, BX
	DECQ DX
	JNZ q8row
	VZEROUPPER
	RET

// The one-row integer dots of q5_0 weights: as dotsQ8VNNI, each block's 32 five-bit q
// (0–31) unpacked to unsigned bytes first (the low nibbles, then the high ones, and 16
// added where qh has the weight's bit: a byte-masked add, the mask loaded from qh), and
// A's 16·Σq_a (its correction shifted) taken off for the −16 of q−16. Y12 holds 0x0F
// bytes, Y13 0x10 bytes; blocks are 22 bytes.

// NIBBLESHIFTS sets Y11 to the word shifts that take a block's 16 bytes of nibbles,
// broadcast to both halves, to its low nibbles (low half: 0) and high ones (high: 4).
#define NIBBLESHIFTS \
	VPXOR X11, X11, X11 \
	MOVL $0x00040004, AX \
	VMOVD AX, X9 \
	VPBROADCASTD X9, X9 \
	VINSERTI128 $1, X9, Y11, Y11

// Q4UNPACK leaves in Y8 the 32 four-bit q of a block whose 16 bytes of nibbles are at
// off+4(row) (q4_1's; q5_0's at off+6).
#define Q4UNPACK(row, off) \
	VBROADCASTI128 off+4(row), Y8 \
	VPSRLVW Y11, Y8, Y8 \
	VPAND Y12, Y8, Y8

// Q5UNPACK leaves in Y8 the 32 unsigned q of the block at off(row).
#define Q5UNPACK(row, off) \
	KMOVD off+2(row), K1 \
	Q4UNPACK(row, off+2) \
	VPADDB Y13, Y8, K1, Y8

// Q5DP4 sets y0–y3 to the int32 lanes of the four blocks at row times A's blocks at SI.
#define Q5DP4(row, y0, y1, y2, y3) \
	Q5UNPACK(row, 0) \
	VPXOR y0, y0, y0 \
	VPDPBUSD (SI), Y8, y0 \
	Q5UNPACK(row, 22) \
	VPXOR y1, y1, y1 \
	VPDPBUSD 32(SI), Y8, y1 \
	Q5UNPACK(row, 44) \
	VPXOR y2, y2, y2 \
	VPDPBUSD 64(SI), Y8, y2 \
	Q5UNPACK(row, 66) \
	VPXOR y3, y3, y3 \
	VPDPBUSD 96(SI), Y8, y3

// Q5SUM4 leaves the four blocks' Σ(q_w−16)·q_a in x0.
#define Q5SUM4(y0, y1, y2, y3, x0, x1) \
	HADD4(y0, y1, y2, y3, x0, x1) \
	VPSRAD $3, (R11)(R13*1), X9 \
	VPSUBD X9, x0, x0

// func dotsQ5VNNI(q *byte, c *int32, d *float32, w *byte, nb, rows int, out *float32)
TEXT ·dotsQ5VNNI(SB), NOSPLIT, $0-56
	MOVQ q+0(FP), R10
	MOVQ c+8(FP), R11
	MOVQ d+16(FP), R12
	MOVQ w+24(FP), DI
	MOVQ rows+40(FP), DX
	MOVQ out+48(FP), BX
	SPLATD($0x0f0f0f0f, X12, Y12)
	SPLATD($0x10101010, X13, Y13)
	NIBBLESHIFTS

q5row:
	VXORPS X14, X14, X14
	MOVQ R10, SI
	XORQ R13, R13
	MOVQ nb+32(FP), CX
	SHRQ $2, CX
	JZ q5tail

q5group:
	Q5DP4(DI, Y0, Y1, Y2, Y3)
	Q5SUM4(Y0, Y1, Y2, Y3, X0, X1)
	Q8ADD4(DI, 22, 44, 66, X0, X14)
	ADDQ $88, DI
	ADDQ $128, SI
	ADDQ $16, R13
	DECQ CX
	JNZ q5group

q5tail:
	MOVQ nb+32(FP), CX
	ANDQ $3, CX
	JZ q5store

q5one:
	Q5UNPACK(DI, 0)
	VPXOR Y0, Y0, Y0
	VPDPBUSD (SI), Y8, Y0
	HSUM8(Y0, X0, X1)
	VMOVD (R11)(R13*1), X1
	VPSRAD $3, X1, X1
	VPSUBD X1, X0, X0
	ADD1(DI, X0, X14)
	ADDQ $22, DI
	ADDQ $32, SI
	ADDQ $4, R13
	DECQ CX
	JNZ q5one

q5store:
	VMOVSS X14, (BX)
	ADDQ $4, BX
	DECQ DX
	JNZ q5row
	VZEROUPPER
	RET

// The one-row integer dots of q4_k weights (frozenq8dot.go): a super-block's eight
// sub-blocks of 32 four-bit q (0–15, unsigned) against A's eight blocks of bytes, one
// VPDPBUSD each, their lanes added by sub-block into one vector of eight exact Σq·q_a;
// the 6-bit scales and minimums unpacked to eight int32 each (VPSHUFB gathers each
// one's bytes, masks and shifts cut its bits); then per sub-block, in float32 without
// fused multiply-adds, t = d·float32(sc·Σq·q_a) − dmin·float32(m·Σq_a) and acc += t·d_a
// in eight lanes, summed at the row's end (dotsQ4KGo's order).
//
// Registers: SI A's bytes, R13 the offset of A's block in its corrections (R11) and
// scales (R12), DI the super-block, Y12 0x0F bytes, Y10 the row's eight sums.

DATA q4kShufA<>+0(SB)/8, $0x0b0a090803020100
DATA q4kShufA<>+8(SB)/8, $0x0b0a090807060504
GLOBL q4kShufA<>(SB), RODATA|NOPTR, $16
DATA q4kShufB<>+0(SB)/8, $0x0302010080808080
DATA q4kShufB<>+8(SB)/8, $0x0706050480808080
GLOBL q4kShufB<>(SB), RODATA|NOPTR, $16
DATA q4kMaskLo<>+0(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA q4kMaskLo<>+8(SB)/8, $0x0f0f0f0f3f3f3f3f
GLOBL q4kMaskLo<>(SB), RODATA|NOPTR, $16
DATA q4kMask30<>+0(SB)/8, $0x3030303030303030
DATA q4kMask30<>+8(SB)/8, $0x3030303030303030
GLOBL q4kMask30<>(SB), RODATA|NOPTR, $16

// Q4KPAIR sets ya and yb to the lanes of the sub-blocks in the 32 bytes at off(DI) (the
// low nibbles, then the high) times A's blocks at aoff(SI) and aoff+32(SI).
#define Q4KPAIR(off, aoff, ya, yb) \
	VMOVDQU off(DI), Y8 \
	VPAND Y12, Y8, Y9 \
	VPSRLW $4, Y8, Y8 \
	VPAND Y12, Y8, Y8 \
	VPXOR ya, ya, ya \
	VPDPBUSD aoff(SI), Y9, ya \
	VPXOR yb, yb, yb \
	VPDPBUSD aoff+32(SI), Y8, yb

// func dotsQ4KVNNI(q *byte, c *int32, d *float32, w *byte, nsb, rows int, out *float32)
TEXT ·dotsQ4KVNNI(SB), NOSPLIT, $0-56
	MOVQ q+0(FP), R10
	MOVQ c+8(FP), R11
	MOVQ d+16(FP), R12
	MOVQ w+24(FP), DI
	MOVQ rows+40(FP), DX
	MOVQ out+48(FP), BX
	SPLATD($0x0f0f0f0f, X12, Y12)

q4krow:
	VXORPS Y10, Y10, Y10
	MOVQ R10, SI
	XORQ R13, R13
	MOVQ nsb+32(FP), CX

q4ksb:
	Q4KPAIR(16, 0, Y0, Y1)
	Q4KPAIR(48, 64, Y2, Y3)
	Q4KPAIR(80, 128, Y4, Y5)
	Q4KPAIR(112, 192, Y6, Y7)
	VPHADDD Y1, Y0, Y0
	VPHADDD Y3, Y2, Y2
	VPHADDD Y5, Y4, Y4
	VPHADDD Y7, Y6, Y6
	VPHADDD Y2, Y0, Y0
	VPHADDD Y6, Y4, Y4
	VPERM2I128 $0x20, Y4, Y0, Y1
	VPERM2I128 $0x31, Y4, Y0, Y2
	VPADDD Y2, Y1, Y1 // Σq·q_a of sub-blocks 0–7

	VMOVDQU 4(DI), X3
	VPSHUFB q4kShufA<>(SB), X3, X4
	VPSHUFB q4kShufB<>(SB), X3, X5
	VPSRLW $2, X5, X5
	VPAND q4kMask30<>(SB), X5, X5
	VPSRLW $4, X4, X6
	VPBLENDD $8, X6, X4, X4
	VPAND q4kMaskLo<>(SB), X4, X4
	VPOR X5, X4, X4 // sc_0–7, m_0–7 as bytes
	VPMOVZXBD X4, Y5
	VPSRLDQ $8, X4, X4
	VPMOVZXBD X4, Y6

	VPMULLD Y5, Y1, Y1
	VMOVDQU (R11)(R13*1), Y7
	VPSRAD $7, Y7, Y7
	VPMULLD Y6, Y7, Y7
	VCVTDQ2PS Y1, Y1
	VCVTDQ2PS Y7, Y7
	VPBROADCASTW 0(DI), X8
	VCVTPH2PS X8, Y8
	VPBROADCASTW 2(DI), X9
	VCVTPH2PS X9, Y9
	VMULPS Y8, Y1, Y1
	VMULPS Y9, Y7, Y7
	VSUBPS Y7, Y1, Y1
	VMULPS (R12)(R13*1), Y1, Y1
	VADDPS Y1, Y10, Y10

	ADDQ $144, DI
	ADDQ $256, SI
	ADDQ $32, R13
	DECQ CX
	JNZ q4ksb

	STORESUM8
	ADDQ $4, BX
	DECQ DX
	JNZ q4krow
	VZEROUPPER
	RET

// The one-row integer dots of q6_k weights (frozenq8dot.go): each half super-block's
// four blocks of 32 six-bit q rebuilt as bytes from ql's nibbles and qh's pairs
// (deqQ6K's order), offset to q−32 (signed, −32…31), multiplied with A's block by the
// sign trick (VPDPBUSD of |q_a| by (q−32)·sign(q_a): no overflow, q−32 is never −128);
// each int32 lane (four weights) times its group's scale (sixteen weights a scale, so
// lanes 0–3 and 4–7 of a block have one each, gathered by VPSHUFB), then in float32
// acc += float32(lane)·(d_a·d) in eight lanes, summed at the row's end as dotsQ6KGo does.
//
// Registers: SI A's bytes, R13 the offset of A's block in its scales (R12), DI the
// super-block, Y12 0x0F bytes, Y13 0x30, Y14 0x20 (32), X15 the half's eight scales,
// Y11 d, Y10 the row's eight sums.

DATA q6kSc0<>+0(SB)/8, $0x0101010100000000
DATA q6kSc0<>+8(SB)/8, $0x8080808080808080
GLOBL q6kSc0<>(SB), RODATA|NOPTR, $16
DATA q6kSc1<>+0(SB)/8, $0x0303030302020202
DATA q6kSc1<>+8(SB)/8, $0x8080808080808080
GLOBL q6kSc1<>(SB), RODATA|NOPTR, $16
DATA q6kSc2<>+0(SB)/8, $0x0505050504040404
DATA q6kSc2<>+8(SB)/8, $0x8080808080808080
GLOBL q6kSc2<>(SB), RODATA|NOPTR, $16
DATA q6kSc3<>+0(SB)/8, $0x0707070706060606
DATA q6kSc3<>+8(SB)/8, $0x8080808080808080
GLOBL q6kSc3<>(SB), RODATA|NOPTR, $16

// Q6KBLK adds the block of q in yu (0–63 as bytes) times A's block at aoff(SI), with
// its scales picked by mask and d_a at doff(R12)(R13*1), to the eight sums.
#define Q6KBLK(yu, aoff, mask, doff) \
	VPSUBB Y14, yu, yu \
	VPSIGNB aoff(SI), yu, yu \
	VPABSB aoff(SI), Y7 \
	VPXOR Y8, Y8, Y8 \
	VPDPBUSD yu, Y7, Y8 \
	VPSHUFB mask, X15, X9 \
	VPMOVSXBD X9, Y9 \
	VPMULLD Y9, Y8, Y8 \
	VCVTDQ2PS Y8, Y8 \
	VBROADCASTSS doff(R12)(R13*1), Y9 \
	VMULPS Y11, Y9, Y9 \
	VMULPS Y9, Y8, Y8 \
	VADDPS Y8, Y10, Y10

// Q6KHALF runs half a super-block: ql at lo(DI), qh at hi(DI), scales at sc(DI), A's
// four blocks from aoff(SI), their d_a from doff(R12)(R13*1).
#define Q6KHALF(lo, hi, sc, aoff, doff) \
	VMOVQ sc(DI), X15 \
	VMOVDQU lo(DI), Y0 \
	VMOVDQU lo+32(DI), Y1 \
	VMOVDQU hi(DI), Y2 \
	VPAND Y12, Y0, Y3 \
	VPSLLW $4, Y2, Y4 \
	VPAND Y13, Y4, Y4 \
	VPOR Y4, Y3, Y3 \
	VPAND Y12, Y1, Y4 \
	VPSLLW $2, Y2, Y5 \
	VPAND Y13, Y5, Y5 \
	VPOR Y5, Y4, Y4 \
	VPSRLW $4, Y0, Y0 \
	VPAND Y12, Y0, Y0 \
	VPAND Y13, Y2, Y5 \
	VPOR Y5, Y0, Y0 \
	VPSRLW $4, Y1, Y1 \
	VPAND Y12, Y1, Y1 \
	VPSRLW $2, Y2, Y2 \
	VPAND Y13, Y2, Y2 \
	VPOR Y2, Y1, Y1 \
	Q6KBLK(Y3, aoff, q6kSc0<>(SB), doff) \
	Q6KBLK(Y4, aoff+32, q6kSc1<>(SB), doff+4) \
	Q6KBLK(Y0, aoff+64, q6kSc2<>(SB), doff+8) \
	Q6KBLK(Y1, aoff+96, q6kSc3<>(SB), doff+12)

// func dotsQ6KVNNI(q *byte, c *int32, d *float32, w *byte, nsb, rows int, out *float32)
TEXT ·dotsQ6KVNNI(SB), NOSPLIT, $0-56
	MOVQ q+0(FP), R10
	MOVQ d+16(FP), R12
	MOVQ w+24(FP), DI
	MOVQ rows+40(FP), DX
	MOVQ out+48(FP), BX
	SPLATD($0x0f0f0f0f, X12, Y12)
	SPLATD($0x30303030, X13, Y13)
	SPLATD($0x20202020, X14, Y14)

q6krow:
	VXORPS Y10, Y10, Y10
	MOVQ R10, SI
	XORQ R13, R13
	MOVQ nsb+32(FP), CX

q6ksb:
	VPBROADCASTW 208(DI), X11
	VCVTPH2PS X11, Y11
	Q6KHALF(0, 128, 192, 0, 0)
	Q6KHALF(64, 160, 200, 128, 16)
	ADDQ $210, DI
	ADDQ $256, SI
	ADDQ $32, R13
	DECQ CX
	JNZ q6ksb

	STORESUM8
	ADDQ $4, BX
	DECQ DX
	JNZ q6krow
	VZEROUPPER
	RET

// The one-row integer dots of q4_1 weights (frozenq8dot.go): a block's 32 four-bit q
// (0–15) unpacked as q5_0's are without the fifth bits (Q4UNPACK), one VPDPBUSD a block,
// four blocks' exact S = Σq·q_a at a time; then in float32, no fused multiply-adds, t =
// (d_w·d_a)·float32(S) + m_w·(d_a·float32(Σq_a)) and acc += t in four lanes, a block left
// over into the first, summed at the row's end as dotsQ4Go does. Blocks are 20 bytes: d,
// m, 16 bytes of q.

// func dotsQ4VNNI(q *byte, c *int32, d *float32, w *byte, nb, rows int, out *float32)
TEXT ·dotsQ4VNNI(SB), NOSPLIT, $0-56
	MOVQ q+0(FP), R10
	MOVQ c+8(FP), R11
	MOVQ d+16(FP), R12
	MOVQ w+24(FP), DI
	MOVQ rows+40(FP), DX
	MOVQ out+48(FP), BX
	SPLATD($0x0f0f0f0f, X12, Y12)
	NIBBLESHIFTS

q4row:
	VXORPS X14, X14, X14
	MOVQ R10, SI
	XORQ R13, R13
	MOVQ nb+32(FP), CX
	SHRQ $2, CX
	JZ q4tail

q4group:
	Q4UNPACK(DI, 0)
	VPXOR Y0, Y0, Y0
	VPDPBUSD (SI), Y8, Y0
	Q4UNPACK(DI, 20)
	VPXOR Y1, Y1, Y1
	VPDPBUSD 32(SI), Y8, Y1
	Q4UNPACK(DI, 40)
	VPXOR Y2, Y2, Y2
	VPDPBUSD 64(SI), Y8, Y2
	Q4UNPACK(DI, 60)
	VPXOR Y3, Y3, Y3
	VPDPBUSD 96(SI), Y8, Y3
	HADD4(Y0, Y1, Y2, Y3, X0, X1) // S of the four blocks
	VCVTDQ2PS X0, X0
	GATHER4H(DI, 0, 20, 40, 60, X8) // d_w
	GATHER4H(DI, 2, 22, 42, 62, X9) // m_w
	VMOVUPS (R12)(R13*1), X10 // d_a
	VPSRAD $7, (R11)(R13*1), X7 // Σq_a
	VCVTDQ2PS X7, X7
	VMULPS X10, X8, X8
	VMULPS X8, X0, X0
	VMULPS X10, X7, X7
	VMULPS X9, X7, X7
	VADDPS X7, X0, X0
	VADDPS X0, X14, X14
	ADDQ $80, DI
	ADDQ $128, SI
	ADDQ $16, R13
	DECQ CX
	JNZ q4group

q4tail:
	MOVQ nb+32(FP), CX
	ANDQ $3, CX
	JZ q4store

q4one:
	Q4UNPACK(DI, 0)
	VPXOR Y0, Y0, Y0
	VPDPBUSD (SI), Y8, Y0
	HSUM8(Y0, X0, X1)
	VCVTDQ2PS X0, X0
	MOVWLZX 0(DI), AX
	VMOVD AX, X8
	VCVTPH2PS X8, X8
	MOVWLZX 2(DI), AX
	VMOVD AX, X9
	VCVTPH2PS X9, X9
	VMOVSS (R12)(R13*1), X10
	VMOVD (R11)(R13*1), X7
	VPSRAD $7, X7, X7
	VCVTDQ2PS X7, X7
	VMULSS X10, X8, X8
	VMULSS X8, X0, X0
	VMULSS X10, X7, X7
	VMULSS X9, X7, X7
	VADDSS X7, X0, X0
	VADDSS X0, X14, X14
	ADDQ $20, DI
	ADDQ $32, SI
	ADDQ $4, R13
	DECQ CX
	JNZ q4one

q4store:
	VMOVHLPS X14, X1, X1
	VADDPS X1, X14, X14
	VMOVSHDUP X14, X1
	VADDSS X1, X14, X14
	VMOVSS X14, (BX)
	ADDQ $4, BX
	DECQ DX
	JNZ q4row
	VZEROUPPER
	RET

// The integer dots of q5_0 rows interleaved by sixteen (frozenq5i.go): a vector's
// sixteen lanes are sixteen rows of W, so a block needs no horizontal sums. Per block a
// quad i of 64 bytes gives two vectors of four bytes a lane, its low nibbles (weights
// 4i…4i+3 of every row) and its high ones (16+4i…), each with 16 added under a byte mask
// of fifth bits: VPSHUFB copies byte t/2 of each row's 32 bits to its lane's four bytes
// and VPTESTMB picks bits 4t…4t+3 of it (weights 4t…, t = i for the low nibbles, i+4 for
// the high). VPDPBUSD multiplies them by four of A's signed bytes broadcast to every
// lane. Four accumulators, the first starting at −16·Σq_a (A's correction shifted), are
// added (exact), then per lane t = (d_a·d_w)·float32(S) and sum += t, block after block:
// dotsQ5Go's order, lane by lane.
//
// Registers: SI A's bytes, R8 its corrections, R9 its scales, DI the group-block, Z15
// 0x0F bytes, Z14 0x10 bytes, Z13 zero, Z20–Z23 the shuffles that copy byte 0–3 of a
// lane to all four, Z24 and Z25 the bits of an even and an odd t, Z0 the sixteen sums.

DATA q5iShuf<>+0(SB)/8, $0x0404040400000000
DATA q5iShuf<>+8(SB)/8, $0x0c0c0c0c08080808
GLOBL q5iShuf<>(SB), RODATA|NOPTR, $16

// Q5IQUAD adds quad qo's two vectors (fifth bits in K1 and K2, A's bytes at alo and ahi)
// to acc.
#define Q5IQUAD(qo, alo, ahi, zl, zh, acc) \
	VPANDD qo(DI), Z15, zl \
	VPSRLW $4, qo(DI), zh \
	VPANDD Z15, zh, zh \
	VPADDB Z14, zl, K1, zl \
	VPADDB Z14, zh, K2, zh \
	VPDPBUSD.BCST alo(SI), zl, acc \
	VPDPBUSD.BCST ahi(SI), zh, acc

// func dotsQ5IVNNI(q *byte, c *int32, d *float32, w *byte, nb, groups int, out *float32)
TEXT ·dotsQ5IVNNI(SB), NOSPLIT, $0-56
	MOVQ q+0(FP), R10
	MOVQ c+8(FP), R11
	MOVQ d+16(FP), R12
	MOVQ w+24(FP), DI
	MOVQ groups+40(FP), DX
	MOVQ out+48(FP), BX
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z15
	MOVL $0x10101010, AX
	VPBROADCASTD AX, Z14
	VPXORD Z13, Z13, Z13
	// Byte b of each dword copied to its four bytes: indices 4d+b, d the dword.
	VBROADCASTI32X4 q5iShuf<>(SB), Z20
	MOVL $0x01010101, AX
	VPBROADCASTD AX, Z26
	VPADDB Z26, Z20, Z21
	VPADDB Z26, Z21, Z22
	VPADDB Z26, Z22, Z23
	MOVL $0x08040201, AX
	VPBROADCASTD AX, Z24
	MOVL $0x80402010, AX
	VPBROADCASTD AX, Z25

q5igroup:
	VPXORD Z0, Z0, Z0
	MOVQ R10, SI
	MOVQ R11, R8
	MOVQ R12, R9
	MOVQ nb+32(FP), CX

q5iblock:
	VCVTPH2PS (DI), Z1
	VMULPS.BCST (R9), Z1, Z1
	VPBROADCASTD (R8), Z2
	VPSRAD $3, Z2, Z2
	VPSUBD Z2, Z13, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VMOVDQU32 288(DI), Z18
	VPSHUFB Z20, Z18, Z19
	VPSHUFB Z22, Z18, Z26
	VPTESTMB Z24, Z19, K1
	VPTESTMB Z24, Z26, K2
	Q5IQUAD(32, 0, 16, Z7, Z8, Z3)
	VPTESTMB Z25, Z19, K1
	VPTESTMB Z25, Z26, K2
	Q5IQUAD(96, 4, 20, Z9, Z10, Z4)
	VPSHUFB Z21, Z18, Z19
	VPSHUFB Z23, Z18, Z26
	VPTESTMB Z24, Z19, K1
	VPTESTMB Z24, Z26, K2
	Q5IQUAD(160, 8, 24, Z11, Z12, Z5)
	VPTESTMB Z25, Z19, K1
	VPTESTMB Z25, Z26, K2
	Q5IQUAD(224, 12, 28, Z16, Z17, Z6)
	VPADDD Z4, Z3, Z3
	VPADDD Z6, Z5, Z5
	VPADDD Z5, Z3, Z3
	VCVTDQ2PS Z3, Z3
	VMULPS Z1, Z3, Z3
	VADDPS Z3, Z0, Z0
	ADDQ $352, DI
	ADDQ $32, SI
	ADDQ $4, R8
	ADDQ $4, R9
	DECQ CX
	JNZ q5iblock

	VMOVUPS Z0, (BX)
	ADDQ $64, BX
	DECQ DX
	JNZ q5igroup
	VZEROUPPER
	RET

// The integer dots of q4_k rows interleaved by sixteen (frozenq4ki.go): lanes are rows.
// Per super-block the 32 words of nibbles, front to back, give 64 vectors of four bytes a
// lane (word 4i+u: low nibbles of sub-block 2u, high of 2u+1), multiplied by four of A's
// signed bytes broadcast (VPDPBUSD) into one int32 accumulator a sub-block, consecutive
// words four sub-block pairs apart so that no accumulator waits on the one before. The 6-bit scales
// and minimums come out of the three words of scale bytes by shifts and masks (VPTERNLOGD
// joins the two parts of those of sub-blocks 4–7), then per sub-block and lane, as
// dotsQ4KGo: t = d·float32(sc·S) − dmin·float32(m·Σq_a), acc[s] += t·d_a, and at the group's
// end its tree of the eight accumulators.
//
// Registers: SI A's bytes, R8 its corrections, R9 its scales, DI the group-block; Z0–Z7
// the sums of sub-blocks 0–7, Z8–Z15 their int32 lanes, Z16 d, Z17 dmin, Z18–Z20 the
// scale words, Z21 0x0F bytes, Z22–Z24 the dwords 63, 15 and 0x30.

// Q4KIDW adds word qoff's low nibbles times A's bytes at alo to ilo and its high ones
// times those at ahi to ihi.
#define Q4KIDW(qoff, alo, ahi, ilo, ihi, zl, zh) \
	VPANDD qoff(DI), Z21, zl \
	VPSRLW $4, qoff(DI), zh \
	VPANDD Z21, zh, zh \
	VPDPBUSD.BCST alo(SI), zl, ilo \
	VPDPBUSD.BCST ahi(SI), zh, ihi

// Q4KISUB adds sub-block s's terms (its scale in Z27, its minimum in Z28, its lanes in
// i, A's correction at coff(R8) and scale at doff(R9)) to f.
#define Q4KISUB(i, f, coff, doff) \
	VPMULLD Z27, i, i \
	VCVTDQ2PS i, i \
	VMULPS Z16, i, i \
	VPBROADCASTD coff(R8), Z29 \
	VPSRAD $7, Z29, Z29 \
	VPMULLD Z28, Z29, Z29 \
	VCVTDQ2PS Z29, Z29 \
	VMULPS Z17, Z29, Z29 \
	VSUBPS Z29, i, i \
	VMULPS.BCST doff(R9), i, i \
	VADDPS i, f, f

// Q4KISCLO sets Z27 and Z28 to the scale and minimum of sub-block s < 4 (sh = 8s): the
// low six bits of byte s of the first and second scale words.
#define Q4KISCLO(sh) \
	VPSRLD $sh, Z18, Z27 \
	VPANDD Z22, Z27, Z27 \
	VPSRLD $sh, Z19, Z28 \
	VPANDD Z22, Z28, Z28

// Q4KISCHI sets Z27 and Z28 to the scale and minimum of sub-block 4+i (sh = 8i): the low
// and high nibble of byte i of the third word under the top two bits of byte i of the
// first (scale) and second (minimum), joined by VPTERNLOGD: (x & 15) | y.
#define Q4KISCHI(sh, sh2, sh4) \
	VPSRLD $sh, Z20, Z27 \
	VPSRLD $sh2, Z18, Z30 \
	VPANDD Z24, Z30, Z30 \
	VPTERNLOGD $0xEC, Z23, Z30, Z27 \
	VPSRLD $sh4, Z20, Z28 \
	VPSRLD $sh2, Z19, Z31 \
	VPANDD Z24, Z31, Z31 \
	VPTERNLOGD $0xEC, Z23, Z31, Z28

// func dotsQ4KIVNNI(q *byte, c *int32, d *float32, w *byte, nsb, groups int, out *float32)
TEXT ·dotsQ4KIVNNI(SB), NOSPLIT, $0-56
	MOVQ q+0(FP), R10
	MOVQ c+8(FP), R11
	MOVQ d+16(FP), R12
	MOVQ w+24(FP), DI
	MOVQ groups+40(FP), DX
	MOVQ out+48(FP), BX
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z21
	MOVL $63, AX
	VPBROADCASTD AX, Z22
	MOVL $15, AX
	VPBROADCASTD AX, Z23
	MOVL $0x30, AX
	VPBROADCASTD AX, Z24

q4kigroup:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	MOVQ R10, SI
	MOVQ R11, R8
	MOVQ R12, R9
	MOVQ nsb+32(FP), CX

q4kisb:
	VCVTPH2PS (DI), Z16
	VCVTPH2PS 32(DI), Z17
	VMOVDQU32 64(DI), Z18
	VMOVDQU32 128(DI), Z19
	VMOVDQU32 192(DI), Z20
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	Q4KIDW(256, 0, 32, Z8, Z9, Z25, Z26)
	Q4KIDW(320, 64, 96, Z10, Z11, Z27, Z28)
	Q4KIDW(384, 128, 160, Z12, Z13, Z25, Z26)
	Q4KIDW(448, 192, 224, Z14, Z15, Z27, Z28)
	Q4KIDW(512, 4, 36, Z8, Z9, Z25, Z26)
	Q4KIDW(576, 68, 100, Z10, Z11, Z27, Z28)
	Q4KIDW(640, 132, 164, Z12, Z13, Z25, Z26)
	Q4KIDW(704, 196, 228, Z14, Z15, Z27, Z28)
	Q4KIDW(768, 8, 40, Z8, Z9, Z25, Z26)
	Q4KIDW(832, 72, 104, Z10, Z11, Z27, Z28)
	Q4KIDW(896, 136, 168, Z12, Z13, Z25, Z26)
	Q4KIDW(960, 200, 232, Z14, Z15, Z27, Z28)
	Q4KIDW(1024, 12, 44, Z8, Z9, Z25, Z26)
	Q4KIDW(1088, 76, 108, Z10, Z11, Z27, Z28)
	Q4KIDW(1152, 140, 172, Z12, Z13, Z25, Z26)
	Q4KIDW(1216, 204, 236, Z14, Z15, Z27, Z28)
	Q4KIDW(1280, 16, 48, Z8, Z9, Z25, Z26)
	Q4KIDW(1344, 80, 112, Z10, Z11, Z27, Z28)
	Q4KIDW(1408, 144, 176, Z12, Z13, Z25, Z26)
	Q4KIDW(1472, 208, 240, Z14, Z15, Z27, Z28)
	Q4KIDW(1536, 20, 52, Z8, Z9, Z25, Z26)
	Q4KIDW(1600, 84, 116, Z10, Z11, Z27, Z28)
	Q4KIDW(1664, 148, 180, Z12, Z13, Z25, Z26)
	Q4KIDW(1728, 212, 244, Z14, Z15, Z27, Z28)
	Q4KIDW(1792, 24, 56, Z8, Z9, Z25, Z26)
	Q4KIDW(1856, 88, 120, Z10, Z11, Z27, Z28)
	Q4KIDW(1920, 152, 184, Z12, Z13, Z25, Z26)
	Q4KIDW(1984, 216, 248, Z14, Z15, Z27, Z28)
	Q4KIDW(2048, 28, 60, Z8, Z9, Z25, Z26)
	Q4KIDW(2112, 92, 124, Z10, Z11, Z27, Z28)
	Q4KIDW(2176, 156, 188, Z12, Z13, Z25, Z26)
	Q4KIDW(2240, 220, 252, Z14, Z15, Z27, Z28)
	Q4KISCLO(0)
	Q4KISUB(Z8, Z0, 0, 0)
	Q4KISCLO(8)
	Q4KISUB(Z9, Z1, 4, 4)
	Q4KISCLO(16)
	Q4KISUB(Z10, Z2, 8, 8)
	Q4KISCLO(24)
	Q4KISUB(Z11, Z3, 12, 12)
	Q4KISCHI(0, 2, 4)
	Q4KISUB(Z12, Z4, 16, 16)
	Q4KISCHI(8, 10, 12)
	Q4KISUB(Z13, Z5, 20, 20)
	Q4KISCHI(16, 18, 20)
	Q4KISUB(Z14, Z6, 24, 24)
	Q4KISCHI(24, 26, 28)
	Q4KISUB(Z15, Z7, 28, 28)
	ADDQ $2304, DI
	ADDQ $256, SI
	ADDQ $32, R8
	ADDQ $32, R9
	DECQ CX
	JNZ q4kisb

	VADDPS Z4, Z0, Z0
	VADDPS Z5, Z1, Z1
	VADDPS Z6, Z2, Z2
	VADDPS Z7, Z3, Z3
	VADDPS Z2, Z0, Z0
	VADDPS Z3, Z1, Z1
	VADDPS Z1, Z0, Z0
	VMOVUPS Z0, (BX)
	ADDQ $64, BX
	DECQ DX
	JNZ q4kigroup
	VZEROUPPER
	RET
