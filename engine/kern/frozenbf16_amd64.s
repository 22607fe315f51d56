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
