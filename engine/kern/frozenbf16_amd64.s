//go:build amd64 && !purego

#include "textflag.h"

// Rounding float32 to bfloat16 (nearest, ties to even; NaN stays a quiet NaN), as ToBF16,
// eight at a time: r = (b + 0x7fff + (b>>16 & 1)) >> 16, or (b>>16) | 0x40 for a NaN.

// BF16CONSTS loads the constants: Y10 = 1, Y11 = 0x7fff, Y12 = 0x7fffffff (the magnitude
// mask), Y13 = 0x7f800000 (infinity), Y14 = 0x40 (the quiet bit).
#define BF16CONSTS \
	MOVL $1, AX \
	MOVD AX, X10 \
	VPBROADCASTD X10, Y10 \
	MOVL $0x7fff, AX \
	MOVD AX, X11 \
	VPBROADCASTD X11, Y11 \
	MOVL $0x7fffffff, AX \
	MOVD AX, X12 \
	VPBROADCASTD X12, Y12 \
	MOVL $0x7f800000, AX \
	MOVD AX, X13 \
	VPBROADCASTD X13, Y13 \
	MOVL $0x40, AX \
	MOVD AX, X14 \
	VPBROADCASTD X14, Y14

// BF16ROUND rounds the eight floats at (SI) to bfloat16 bits in the low halves of Y0's
// dwords.
#define BF16ROUND \
	VMOVDQU (SI), Y0 \
	VPSRLD  $16, Y0, Y1 \
	VPAND   Y10, Y1, Y2 \
	VPADDD  Y11, Y0, Y3 \
	VPADDD  Y2, Y3, Y3 \
	VPSRLD  $16, Y3, Y3 \
	VPOR    Y14, Y1, Y1 \
	VPAND   Y12, Y0, Y2 \
	VPCMPGTD Y13, Y2, Y2 \
	VPBLENDVB Y2, Y1, Y3, Y0

// func roundBF16AVX(dst *uint16, src *float32, n int)
//
// dst[i] = ToBF16(src[i]) for n a multiple of 8.
TEXT ·roundBF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	BF16CONSTS
	SHRQ $3, CX
	JEQ  rbdone

rbloop:
	BF16ROUND
	VPACKUSDW Y0, Y0, Y0
	VPERMQ    $0x08, Y0, Y0
	VMOVDQU   X0, (DI)
	ADDQ $32, SI
	ADDQ $16, DI
	DECQ CX
	JNE  rbloop

rbdone:
	VZEROUPPER
	RET

// func roundWideBF16AVX(dst, src *float32, n int)
//
// dst[i] = FromBF16(ToBF16(src[i])) for n a multiple of 8.
TEXT ·roundWideBF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	BF16CONSTS
	SHRQ $3, CX
	JEQ  rwdone

rwloop:
	BF16ROUND
	VPSLLD  $16, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNE  rwloop

rwdone:
	VZEROUPPER
	RET

// func dotsBF16AVX(x *float32, w *uint16, n, rows int, out *float32)
//
// out[r] = Σ_i x[i]·w[r·n+i] for rows consecutive bfloat16 rows of n (a multiple of 16)
// weights: dotBF16AVX row after row, bit for bit, in one call (a decode step makes some
// 200 thousand of these dots per token, and a Go call with its dispatch per row cost as
// much as 10% of the step).
TEXT ·dotsBF16AVX(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), R8
	MOVQ w+8(FP), DI
	MOVQ n+16(FP), R9
	MOVQ rows+24(FP), R10
	MOVQ out+32(FP), AX
	TESTQ R10, R10
	JEQ  dsdone

dsrow:
	MOVQ R8, SI
	MOVQ R9, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	CMPQ CX, $32
	JLT  dstail

dsloop:
	VPMOVZXWD   (DI), Y4
	VPMOVZXWD   16(DI), Y5
	VPMOVZXWD   32(DI), Y6
	VPMOVZXWD   48(DI), Y7
	VPSLLD      $16, Y4, Y4
	VPSLLD      $16, Y5, Y5
	VPSLLD      $16, Y6, Y6
	VPSLLD      $16, Y7, Y7
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1
	VFMADD231PS 64(SI), Y6, Y2
	VFMADD231PS 96(SI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $64, DI
	SUBQ        $32, CX
	CMPQ        CX, $32
	JGE         dsloop

dstail:
	TESTQ       CX, CX
	JEQ         dssum
	VPMOVZXWD   (DI), Y4
	VPMOVZXWD   16(DI), Y5
	VPSLLD      $16, Y4, Y4
	VPSLLD      $16, Y5, Y5
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1
	ADDQ        $32, DI

dssum:
	// kern_amd64.s's HSUM4
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	MOVSS X0, (AX)
	ADDQ $4, AX
	DECQ R10
	JNE  dsrow

dsdone:
	VZEROUPPER
	RET
