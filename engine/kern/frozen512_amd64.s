//go:build amd64 && !purego

#include "textflag.h"

// The AVX-512 BF16 kernels for bfloat16 weights. VDPBF16PS (AVX512_BF16) multiplies
// pairs of bfloat16 and adds both products to a float32 lane: 32 multiply-adds an
// instruction, twice an FMA's 16. The Go assembler does not know the instruction, so it
// is spelled out in bytes (EVEX.512.F3.0F38.W0 52 /r, register operands only; each line
// names it in Intel order: destination, first source, second source).

// DPROW4 sums each of the accumulators w, x, y, z (zmm, named by their ymm halves)
// horizontally and stores the four sums at off(AX).
#define DPROW4(zw, zx, zy, zz, w, x, y, z, xw, xx, off) \
	VEXTRACTF64X4 $1, zw, Y24 \
	VADDPS Y24, w, w \
	VEXTRACTF64X4 $1, zx, Y25 \
	VADDPS Y25, x, x \
	VEXTRACTF64X4 $1, zy, Y26 \
	VADDPS Y26, y, y \
	VEXTRACTF64X4 $1, zz, Y27 \
	VADDPS Y27, z, z \
	VHADDPS x, w, w \
	VHADDPS z, y, y \
	VHADDPS y, w, w \
	VEXTRACTF128 $1, w, xx \
	VADDPS xx, xw, xw \
	VMOVUPS xw, off(AX)

// STORESUM16 sums Z0's sixteen lanes as DPROW4 sums each accumulator (halves, then
// adjacent pairs twice, then the two 128-bit halves), stores the sum at (AX) and advances
// AX: the row dots' reduction, so that dotsF32x512 and dotsBF16z give tileF32x512's bits.
#define STORESUM16 \
	VEXTRACTF64X4 $1, Z0, Y1 \
	VADDPS        Y1, Y0, Y0 \
	VHADDPS       Y0, Y0, Y0 \
	VHADDPS       Y0, Y0, Y0 \
	VEXTRACTF128  $1, Y0, X1 \
	VADDPS        X1, X0, X0 \
	MOVSS         X0, (AX) \
	ADDQ          $4, AX

// func tileDPBF16(a *uint16, lda int, w *uint16, ldw, k32 int, out *float32)
//
// The 4×4 tile out[4r+j] = Σ_p a_r[p]·w_j[p] for four bfloat16 rows of A (lda bytes
// apart) and four bfloat16 rows of W (ldw bytes apart), over 32·k32 elements. Neither
// side is packed: both are rows along k, so each step loads 32 elements of every row
// and runs the 16 row pairs' dot products on them, one zmm accumulator a pair
// (Z(4r+j)); the sixteen sums are reduced at the end.
TEXT ·tileDPBF16(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ lda+8(FP), BX
	MOVQ w+16(FP), DI
	MOVQ ldw+24(FP), DX
	MOVQ k32+32(FP), CX
	LEAQ (SI)(BX*2), R8
	ADDQ BX, R8
	LEAQ (DI)(DX*2), R9
	ADDQ DX, R9
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	TESTQ CX, CX
	JEQ  dpdone

dploop:
	VMOVDQU32 (SI), Z16
	VMOVDQU32 (SI)(BX*1), Z17
	VMOVDQU32 (SI)(BX*2), Z18
	VMOVDQU32 (R8), Z19
	VMOVDQU32 (DI), Z20
	VMOVDQU32 (DI)(DX*1), Z21
	VMOVDQU32 (DI)(DX*2), Z22
	VMOVDQU32 (R9), Z23
	BYTE $0x62; BYTE $0xb2; BYTE $0x7e; BYTE $0x40; BYTE $0x52; BYTE $0xc4 // VDPBF16PS Z0, Z16, Z20 (Intel order)
	BYTE $0x62; BYTE $0xb2; BYTE $0x7e; BYTE $0x40; BYTE $0x52; BYTE $0xcd // VDPBF16PS Z1, Z16, Z21 (Intel order)
	BYTE $0x62; BYTE $0xb2; BYTE $0x7e; BYTE $0x40; BYTE $0x52; BYTE $0xd6 // VDPBF16PS Z2, Z16, Z22 (Intel order)
	BYTE $0x62; BYTE $0xb2; BYTE $0x7e; BYTE $0x40; BYTE $0x52; BYTE $0xdf // VDPBF16PS Z3, Z16, Z23 (Intel order)
	BYTE $0x62; BYTE $0xb2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xe4 // VDPBF16PS Z4, Z17, Z20 (Intel order)
	BYTE $0x62; BYTE $0xb2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xed // VDPBF16PS Z5, Z17, Z21 (Intel order)
	BYTE $0x62; BYTE $0xb2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xf6 // VDPBF16PS Z6, Z17, Z22 (Intel order)
	BYTE $0x62; BYTE $0xb2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xff // VDPBF16PS Z7, Z17, Z23 (Intel order)
	BYTE $0x62; BYTE $0x32; BYTE $0x6e; BYTE $0x40; BYTE $0x52; BYTE $0xc4 // VDPBF16PS Z8, Z18, Z20 (Intel order)
	BYTE $0x62; BYTE $0x32; BYTE $0x6e; BYTE $0x40; BYTE $0x52; BYTE $0xcd // VDPBF16PS Z9, Z18, Z21 (Intel order)
	BYTE $0x62; BYTE $0x32; BYTE $0x6e; BYTE $0x40; BYTE $0x52; BYTE $0xd6 // VDPBF16PS Z10, Z18, Z22 (Intel order)
	BYTE $0x62; BYTE $0x32; BYTE $0x6e; BYTE $0x40; BYTE $0x52; BYTE $0xdf // VDPBF16PS Z11, Z18, Z23 (Intel order)
	BYTE $0x62; BYTE $0x32; BYTE $0x66; BYTE $0x40; BYTE $0x52; BYTE $0xe4 // VDPBF16PS Z12, Z19, Z20 (Intel order)
	BYTE $0x62; BYTE $0x32; BYTE $0x66; BYTE $0x40; BYTE $0x52; BYTE $0xed // VDPBF16PS Z13, Z19, Z21 (Intel order)
	BYTE $0x62; BYTE $0x32; BYTE $0x66; BYTE $0x40; BYTE $0x52; BYTE $0xf6 // VDPBF16PS Z14, Z19, Z22 (Intel order)
	BYTE $0x62; BYTE $0x32; BYTE $0x66; BYTE $0x40; BYTE $0x52; BYTE $0xff // VDPBF16PS Z15, Z19, Z23 (Intel order)
	ADDQ $64, SI
	ADDQ $64, R8
	ADDQ $64, DI
	ADDQ $64, R9
	DECQ CX
	JNE  dploop

dpdone:
	MOVQ out+40(FP), AX
	DPROW4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, 0)
	DPROW4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4, X5, 16)
	DPROW4(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8, X9, 32)
	DPROW4(Z12, Z13, Z14, Z15, Y12, Y13, Y14, Y15, X12, X13, 48)
	VZEROUPPER
	RET


// func tileF32x512(a *float32, lda int, w *float32, ldw, k16 int, out *float32)
//
// tileDPBF16 for float32 rows with 16-wide FMAs: out[4r+j] = Σ_p a_r[p]·w_j[p] over
// 16·k16 elements, four rows of A (lda bytes apart) and four of W (ldw bytes apart).
TEXT ·tileF32x512(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ lda+8(FP), BX
	MOVQ w+16(FP), DI
	MOVQ ldw+24(FP), DX
	MOVQ k16+32(FP), CX
	LEAQ (SI)(BX*2), R8
	ADDQ BX, R8
	LEAQ (DI)(DX*2), R9
	ADDQ DX, R9
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	TESTQ CX, CX
	JEQ  f5done

f5loop:
	VMOVUPS (SI), Z16
	VMOVUPS (SI)(BX*1), Z17
	VMOVUPS (SI)(BX*2), Z18
	VMOVUPS (R8), Z19
	VMOVUPS (DI), Z20
	VMOVUPS (DI)(DX*1), Z21
	VMOVUPS (DI)(DX*2), Z22
	VMOVUPS (R9), Z23
	VFMADD231PS Z20, Z16, Z0
	VFMADD231PS Z21, Z16, Z1
	VFMADD231PS Z22, Z16, Z2
	VFMADD231PS Z23, Z16, Z3
	VFMADD231PS Z20, Z17, Z4
	VFMADD231PS Z21, Z17, Z5
	VFMADD231PS Z22, Z17, Z6
	VFMADD231PS Z23, Z17, Z7
	VFMADD231PS Z20, Z18, Z8
	VFMADD231PS Z21, Z18, Z9
	VFMADD231PS Z22, Z18, Z10
	VFMADD231PS Z23, Z18, Z11
	VFMADD231PS Z20, Z19, Z12
	VFMADD231PS Z21, Z19, Z13
	VFMADD231PS Z22, Z19, Z14
	VFMADD231PS Z23, Z19, Z15
	ADDQ $64, SI
	ADDQ $64, R8
	ADDQ $64, DI
	ADDQ $64, R9
	DECQ CX
	JNE  f5loop

f5done:
	MOVQ out+40(FP), AX
	DPROW4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, 0)
	DPROW4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4, X5, 16)
	DPROW4(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8, X9, 32)
	DPROW4(Z12, Z13, Z14, Z15, Y12, Y13, Y14, Y15, X12, X13, 48)
	VZEROUPPER
	RET

// func tile1F32x512(a *float32, w *float32, ldw, k16 int, out *float32)
//
// Row 0 of tileF32x512 alone, bit for bit (the same accumulator per output, p in order,
// the same reduction): out[j] = Σ_p a[p]·w_j[p]. A product's row therefore does not
// depend on whether it shares a tile with other rows; and a one-row product (a decode
// step) does a quarter of the padded tile's multiply-adds.
TEXT ·tile1F32x512(SB), NOSPLIT, $0-40
	MOVQ a+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ ldw+16(FP), DX
	MOVQ k16+24(FP), CX
	LEAQ (DI)(DX*2), R9
	ADDQ DX, R9
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	TESTQ CX, CX
	JEQ  f1done

f1loop:
	VMOVUPS (SI), Z16
	VFMADD231PS (DI), Z16, Z0
	VFMADD231PS (DI)(DX*1), Z16, Z1
	VFMADD231PS (DI)(DX*2), Z16, Z2
	VFMADD231PS (R9), Z16, Z3
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, R9
	DECQ CX
	JNE  f1loop

f1done:
	MOVQ out+32(FP), AX
	DPROW4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, 0)
	VZEROUPPER
	RET

// func dotsF32x512(a, w *float32, k16, rows int, out *float32)
//
// out[r] = Σ_p a[p]·w[r·16·k16+p] for rows consecutive rows of W: each one output of
// tileF32x512 alone, bit for bit (one sixteen-lane accumulator over 16·k16 elements in
// order, summed as DPROW4 sums each of its four). A decode step reads W one row at a
// time with it, all its rows in one call (frozenf32.go: four rows streamed side by side
// ran at half the speed from memory).
TEXT ·dotsF32x512(SB), NOSPLIT, $0-40
	MOVQ a+0(FP), R8
	MOVQ w+8(FP), DI
	MOVQ k16+16(FP), R9
	MOVQ rows+24(FP), R10
	MOVQ out+32(FP), AX
	TESTQ R10, R10
	JEQ  d5done

d5row:
	MOVQ R8, SI
	MOVQ R9, CX
	VPXORD Z0, Z0, Z0
	TESTQ CX, CX
	JEQ  d5sum

d5loop:
	VMOVUPS (DI), Z1
	VFMADD231PS (SI), Z1, Z0
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNE  d5loop

d5sum:
	STORESUM16
	DECQ R10
	JNE  d5row

d5done:
	VZEROUPPER
	RET

// func dotsBF16x512(x *float32, w *uint16, n, rows int, out *float32)
//
// dotsBF16AVX with 16-wide vectors: out[r] = Σ_i x[i]·w[r·n+i] for rows bfloat16 rows
// of n weights (a multiple of 32), four accumulators over 64 weights a step, half the
// instructions a weight of the 8-wide loop (a one-row product streams W from memory,
// and the fewer instructions each cache line of W takes, the further ahead the core's
// loads run).
TEXT ·dotsBF16x512(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), R8
	MOVQ w+8(FP), DI
	MOVQ n+16(FP), R9
	MOVQ rows+24(FP), R10
	MOVQ out+32(FP), AX
	TESTQ R10, R10
	JEQ  z6done

z6row:
	MOVQ R8, SI
	MOVQ R9, CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	CMPQ CX, $64
	JLT  z6tail

z6loop:
	VPMOVZXWD   (DI), Z4
	VPMOVZXWD   32(DI), Z5
	VPMOVZXWD   64(DI), Z6
	VPMOVZXWD   96(DI), Z7
	VPSLLD      $16, Z4, Z4
	VPSLLD      $16, Z5, Z5
	VPSLLD      $16, Z6, Z6
	VPSLLD      $16, Z7, Z7
	VFMADD231PS (SI), Z4, Z0
	VFMADD231PS 64(SI), Z5, Z1
	VFMADD231PS 128(SI), Z6, Z2
	VFMADD231PS 192(SI), Z7, Z3
	ADDQ        $256, SI
	ADDQ        $128, DI
	SUBQ        $64, CX
	CMPQ        CX, $64
	JGE         z6loop

z6tail:
	TESTQ       CX, CX
	JEQ         z6sum
	VPMOVZXWD   (DI), Z4
	VPMOVZXWD   32(DI), Z5
	VPSLLD      $16, Z4, Z4
	VPSLLD      $16, Z5, Z5
	VFMADD231PS (SI), Z4, Z0
	VFMADD231PS 64(SI), Z5, Z1
	ADDQ        $64, DI

z6sum:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	MOVSS X0, (AX)
	ADDQ $4, AX
	DECQ R10
	JNE  z6row

z6done:
	VZEROUPPER
	RET

// func widenQ8AVX512(dst *float32, blk *byte, nb int)
//
// widenQ8AVX with 16-wide vectors: a Q8_0 block is two.
TEXT ·widenQ8AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ nb+16(FP), CX
	TESTQ CX, CX
	JEQ   z8done

z8loop:
	VPBROADCASTW (DI), Y8
	VCVTPH2PS    Y8, Z8
	VPMOVSXBD    2(DI), Z4
	VPMOVSXBD    18(DI), Z5
	VCVTDQ2PS    Z4, Z4
	VCVTDQ2PS    Z5, Z5
	VMULPS       Z8, Z4, Z4
	VMULPS       Z8, Z5, Z5
	VMOVUPS      Z4, (SI)
	VMOVUPS      Z5, 64(SI)
	ADDQ         $128, SI
	ADDQ         $34, DI
	DECQ         CX
	JNE          z8loop

z8done:
	VZEROUPPER
	RET

// func widenQ4AVX512(dst *float32, blk *byte, nb int)
//
// widenQ4AVX with 16-wide vectors: the low nibbles of a Q4_1 block's 16 bytes are its
// first 16 weights, the high ones the last 16.
TEXT ·widenQ4AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVL $15, AX
	VPBROADCASTD AX, Z15
	TESTQ CX, CX
	JEQ   z4done

z4loop:
	VPBROADCASTW (DI), Y8
	VCVTPH2PS    Y8, Z8
	VPBROADCASTW 2(DI), Y9
	VCVTPH2PS    Y9, Z9
	VPMOVZXBD    4(DI), Z10
	VPANDD       Z15, Z10, Z4
	VPSRLD       $4, Z10, Z5
	VPANDD       Z15, Z5, Z5
	VCVTDQ2PS    Z4, Z4
	VCVTDQ2PS    Z5, Z5
	VFMADD213PS  Z9, Z8, Z4
	VFMADD213PS  Z9, Z8, Z5
	VMOVUPS      Z4, (SI)
	VMOVUPS      Z5, 64(SI)
	ADDQ         $128, SI
	ADDQ         $20, DI
	DECQ         CX
	JNE          z4loop

z4done:
	VZEROUPPER
	RET

// func dotsQ5x512(x *float32, blk *byte, nb, rows int, out *float32)
//
// out[r] = Σ_b d_b·Σ_j x_j·(q_j − 16) for rows consecutive rows of nb Q5_0 blocks each
// (22 bytes: half d, 32 bits qh, 16 bytes of nibbles; weight j < 16 is the low nibble of
// byte j with bit j of qh as its fifth bit, weight j+16 the high nibble with bit j+16). A
// block is two 16-wide vectors: the nibbles zero-extended to int32, and q − 16 made by
// ORing 0xFFFFFFF0 into the lanes whose fifth bit is clear (nibble − 16 in two's
// complement), under a mask loaded straight from qh. dotQ5AVX's byte shuffles cost 30
// cycles a block here; this 7.
TEXT ·dotsQ5x512(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), R8
	MOVQ blk+8(FP), DI
	MOVQ nb+16(FP), R9
	MOVQ rows+24(FP), R10
	MOVQ out+32(FP), AX
	MOVL $15, BX
	VPBROADCASTD BX, Z15
	MOVL $0xFFFFFFF0, BX
	VPBROADCASTD BX, Z14
	TESTQ R10, R10
	JEQ  q5zdone

q5zrow:
	MOVQ R8, SI
	MOVQ R9, CX
	VPXORD Z0, Z0, Z0
	TESTQ CX, CX
	JEQ  q5zsum

q5zloop:
	VPMOVZXBD   6(DI), Z4
	VPSRLD      $4, Z4, Z5
	VPANDD      Z15, Z4, Z4
	KMOVW       2(DI), K1
	KMOVW       4(DI), K2
	KNOTW       K1, K1
	KNOTW       K2, K2
	VPORD       Z14, Z4, K1, Z4
	VPORD       Z14, Z5, K2, Z5
	VCVTDQ2PS   Z4, Z4
	VCVTDQ2PS   Z5, Z5
	VMULPS      (SI), Z4, Z4
	VFMADD231PS 64(SI), Z5, Z4
	VPBROADCASTW (DI), Y6
	VCVTPH2PS   Y6, Z6
	VFMADD231PS Z4, Z6, Z0
	ADDQ $128, SI
	ADDQ $22, DI
	DECQ CX
	JNE  q5zloop

q5zsum:
	STORESUM16
	DECQ R10
	JNE  q5zrow

q5zdone:
	VZEROUPPER
	RET

// Q4KZ adds one 64-weight chunk of a Q4_K super-block (32 bytes of nibbles at q(DI):
// sub-block 2j in the low nibbles, 2j+1 in the high ones) times x at x(SI) to Z0…Z3:
// each weight d·sc·q − dmin·m with one rounding (VFMSUB213PS), the pair (d·sc, dmin·m)
// of sub-block 2j at s(R11) and of 2j+1 at s+8(R11).
#define Q4KZ(q, s, x) \
	VPMOVZXBD          q(DI), Z4 \
	VPMOVZXBD          q+16(DI), Z5 \
	VPSRLD             $4, Z4, Z8 \
	VPSRLD             $4, Z5, Z9 \
	VPANDD             Z15, Z4, Z4 \
	VPANDD             Z15, Z5, Z5 \
	VCVTDQ2PS          Z4, Z4 \
	VCVTDQ2PS          Z5, Z5 \
	VCVTDQ2PS          Z8, Z8 \
	VCVTDQ2PS          Z9, Z9 \
	VBROADCASTSS       s(R11), Z10 \
	VBROADCASTSS       s+8(R11), Z11 \
	VFMSUB213PS.BCST   s+4(R11), Z10, Z4 \
	VFMSUB213PS.BCST   s+4(R11), Z10, Z5 \
	VFMSUB213PS.BCST   s+12(R11), Z11, Z8 \
	VFMSUB213PS.BCST   s+12(R11), Z11, Z9 \
	VFMADD231PS        x(SI), Z4, Z0 \
	VFMADD231PS        x+64(SI), Z5, Z1 \
	VFMADD231PS        x+128(SI), Z8, Z2 \
	VFMADD231PS        x+192(SI), Z9, Z3

// ROWSUM4 reduces Z0…Z3 to one float32 and stores it at (AX), advancing AX.
#define ROWSUM4 \
	VADDPS Z1, Z0, Z0 \
	VADDPS Z3, Z2, Z2 \
	VADDPS Z2, Z0, Z0 \
	STORESUM16

// func dotsQ4Kx512(x *float32, blk *byte, sc *float32, nb, rows int, out *float32)
//
// out[r] = Σ x·w over rows consecutive rows of nb Q4_K super-blocks (144 bytes: half d,
// half dmin, 12 bytes of 6-bit scales and mins, 128 of nibbles), whose scales and mins
// the caller has unpacked to float32 pairs in sc (16 a super-block, unpackQ4KScales),
// row after row. Sixteen weights a vector: 36 cycles a super-block here against 143 for
// dotQ4KAVX's eight.
TEXT ·dotsQ4Kx512(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), R8
	MOVQ blk+8(FP), DI
	MOVQ sc+16(FP), R11
	MOVQ nb+24(FP), R9
	MOVQ rows+32(FP), R10
	MOVQ out+40(FP), AX
	MOVL $15, BX
	VPBROADCASTD BX, Z15
	TESTQ R10, R10
	JEQ  q4zdone

q4zrow:
	MOVQ R8, SI
	MOVQ R9, CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	TESTQ CX, CX
	JEQ  q4zsum

q4zblock:
	Q4KZ(16, 0, 0)
	Q4KZ(48, 16, 256)
	Q4KZ(80, 32, 512)
	Q4KZ(112, 48, 768)
	ADDQ $144, DI
	ADDQ $64, R11
	ADDQ $1024, SI
	DECQ CX
	JNE  q4zblock

q4zsum:
	ROWSUM4
	DECQ R10
	JNE  q4zrow

q4zdone:
	VZEROUPPER
	RET

// Q6KZ adds sixteen l's of a Q6_K half super-block to Z0…Z3: the four weights
// q_i = ql's nibble | two bits of qh << 4 (ql[l] low, ql[l+32] low, ql[l] high,
// ql[l+32] high; qh[l] bits 0–1, 2–3, 4–5, 6–7) at l, l+32, l+64, l+96, each
// (q − 32)·d·sc as one FMA of q with (d·sc, −32·d·sc) from s0…s3(R11), times x at
// x0…x3(SI). VPTERNLOGD $0xF8 is A | (B & C) (Go order: C, B, A).
#define Q6KZ(g, s0, s1, s2, s3, x0, x1, x2, x3) \
	VPMOVZXBD          g(R9), Z4 \
	VPMOVZXBD          g+32(R9), Z5 \
	VPMOVZXBD          g(R10), Z6 \
	VPSLLD             $4, Z6, Z7 \
	VPANDD             Z14, Z7, Z7 \
	VPTERNLOGD         $0xF8, Z15, Z4, Z7 \
	VPSLLD             $2, Z6, Z8 \
	VPANDD             Z14, Z8, Z8 \
	VPTERNLOGD         $0xF8, Z15, Z5, Z8 \
	VPSRLD             $4, Z4, Z9 \
	VPTERNLOGD         $0xF8, Z14, Z6, Z9 \
	VPSRLD             $4, Z5, Z10 \
	VPSRLD             $2, Z6, Z11 \
	VPTERNLOGD         $0xF8, Z14, Z11, Z10 \
	VCVTDQ2PS          Z7, Z7 \
	VCVTDQ2PS          Z8, Z8 \
	VCVTDQ2PS          Z9, Z9 \
	VCVTDQ2PS          Z10, Z10 \
	VBROADCASTSS       s0(R11), Z12 \
	VFMADD213PS.BCST   s0+4(R11), Z12, Z7 \
	VBROADCASTSS       s1(R11), Z13 \
	VFMADD213PS.BCST   s1+4(R11), Z13, Z8 \
	VBROADCASTSS       s2(R11), Z12 \
	VFMADD213PS.BCST   s2+4(R11), Z12, Z9 \
	VBROADCASTSS       s3(R11), Z13 \
	VFMADD213PS.BCST   s3+4(R11), Z13, Z10 \
	VFMADD231PS        x0(SI), Z7, Z0 \
	VFMADD231PS        x1(SI), Z8, Z1 \
	VFMADD231PS        x2(SI), Z9, Z2 \
	VFMADD231PS        x3(SI), Z10, Z3

// func dotsQ6Kx512(x *float32, blk *byte, sc *float32, nb, rows int, out *float32)
//
// dotsQ4Kx512 for Q6_K super-blocks (210 bytes: ql[128], qh[64], int8 scales[16], half
// d), the scales unpacked by unpackQ6KPairs (32 floats a super-block: d·sc_i and
// −32·d·sc_i). 52 cycles a super-block here against 286 for dotQ6KAVX.
TEXT ·dotsQ6Kx512(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), R8
	MOVQ blk+8(FP), DI
	MOVQ sc+16(FP), R11
	MOVQ nb+24(FP), DX
	MOVQ rows+32(FP), R12
	MOVQ out+40(FP), AX
	MOVL $15, BX
	VPBROADCASTD BX, Z15
	MOVL $0x30, BX
	VPBROADCASTD BX, Z14
	TESTQ R12, R12
	JEQ  q6zdone

q6zrow:
	MOVQ R8, SI
	MOVQ DX, CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	TESTQ CX, CX
	JEQ  q6zsum

q6zblock:
	MOVQ DI, R9
	LEAQ 128(DI), R10
	Q6KZ(0, 0, 16, 32, 48, 0, 128, 256, 384)
	Q6KZ(16, 8, 24, 40, 56, 64, 192, 320, 448)
	ADDQ $64, R9
	ADDQ $32, R10
	ADDQ $512, SI
	ADDQ $64, R11
	Q6KZ(0, 0, 16, 32, 48, 0, 128, 256, 384)
	Q6KZ(16, 8, 24, 40, 56, 64, 192, 320, 448)
	ADDQ $512, SI
	ADDQ $64, R11
	ADDQ $210, DI
	DECQ CX
	JNE  q6zblock

q6zsum:
	ROWSUM4
	DECQ R12
	JNE  q6zrow

q6zdone:
	VZEROUPPER
	RET

// func dotsBF16z(x *float32, w *uint16, k16, rows int, out *float32)
//
// dotsF32x512 over bfloat16 rows of W, each weight widened exactly to float32 as it is
// loaded: out[r] = Σ_p x[p]·w[r·16·k16+p], one sixteen-lane accumulator in p order and
// dotsF32x512's reduction, so each output is bit for bit tileF32x512's over the widened
// row (the bfloat16 products of bf16ZTiles, a decode row equal to a prompt's).
TEXT ·dotsBF16z(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), R8
	MOVQ w+8(FP), DI
	MOVQ k16+16(FP), R9
	MOVQ rows+24(FP), R10
	MOVQ out+32(FP), AX
	TESTQ R10, R10
	JEQ  bzdone

bzrow:
	MOVQ R8, SI
	MOVQ R9, CX
	VPXORD Z0, Z0, Z0
	TESTQ CX, CX
	JEQ  bzsum

bzloop:
	VPMOVZXWD   (DI), Z1
	VPSLLD      $16, Z1, Z1
	VFMADD231PS (SI), Z1, Z0
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNE  bzloop

bzsum:
	STORESUM16
	DECQ R10
	JNE  bzrow

bzdone:
	VZEROUPPER
	RET
