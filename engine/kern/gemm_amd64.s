//go:build amd64 && !purego

#include "textflag.h"

// SROW stores accumulator pair (lo, hi) to the 16 floats at R9, first adding what is
// there when load is set (AX != 0), then steps R9 to the next row of C.
#define SROW(lo, hi) \
	TESTQ AX, AX \
	JEQ   3(PC) \
	VADDPS (R9), lo, lo \
	VADDPS 32(R9), hi, hi \
	VMOVUPS lo, (R9) \
	VMOVUPS hi, 32(R9) \
	ADDQ  R8, R9

// func sgemm6x16s(k int, a *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, load bool)
//
// sgemm6x16 over operands read in place: A[r, p] is at a + r·ars + p·aps bytes and the
// 16 floats of B's step p at b + p·bps bytes. A packed panel is ars 4, aps 24; a
// row-major A is ars lda·4, aps 4; a transposed one ars 4, aps lda·4. B is a packed
// panel with bps 64, or 16 columns of a row-major matrix with bps ldb·4. Rows 0–2 of A
// are addressed from SI, rows 3–5 from R13 = SI + 3·ars.
TEXT ·sgemm6x16s(SB), NOSPLIT, $0-65
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ ars+16(FP), R10
	MOVQ aps+24(FP), R11
	MOVQ b+32(FP), DI
	MOVQ bps+40(FP), R12
	MOVQ c+48(FP), R9
	MOVQ ldc+56(FP), R8
	SHLQ $2, R8
	LEAQ (R10)(R10*2), R13
	ADDQ SI, R13
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15
	TESTQ CX, CX
	JEQ   sstore

sloop:
	VMOVUPS      (DI), Y0
	VMOVUPS      32(DI), Y1
	VBROADCASTSS (SI), Y2
	VBROADCASTSS (SI)(R10*1), Y3
	VFMADD231PS  Y0, Y2, Y4
	VFMADD231PS  Y1, Y2, Y5
	VFMADD231PS  Y0, Y3, Y6
	VFMADD231PS  Y1, Y3, Y7
	VBROADCASTSS (SI)(R10*2), Y2
	VBROADCASTSS (R13), Y3
	VFMADD231PS  Y0, Y2, Y8
	VFMADD231PS  Y1, Y2, Y9
	VFMADD231PS  Y0, Y3, Y10
	VFMADD231PS  Y1, Y3, Y11
	VBROADCASTSS (R13)(R10*1), Y2
	VBROADCASTSS (R13)(R10*2), Y3
	VFMADD231PS  Y0, Y2, Y12
	VFMADD231PS  Y1, Y2, Y13
	VFMADD231PS  Y0, Y3, Y14
	VFMADD231PS  Y1, Y3, Y15
	ADDQ         R11, SI
	ADDQ         R11, R13
	ADDQ         R12, DI
	DECQ         CX
	JNZ          sloop

sstore:
	MOVBQZX load+64(FP), AX
	SROW(Y4, Y5)
	SROW(Y6, Y7)
	SROW(Y8, Y9)
	SROW(Y10, Y11)
	SROW(Y12, Y13)
	SROW(Y14, Y15)
	VZEROUPPER
	RET
