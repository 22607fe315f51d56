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
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS Y1, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	MOVSS X0, (AX)
	ADDQ $4, AX
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
