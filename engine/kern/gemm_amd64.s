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

// ZROW stores accumulator z to the 16 floats at R9, first adding what is there when load
// is set (AX != 0), then steps R9 to the next row of C.
#define ZROW(z) \
	TESTQ   AX, AX \
	JEQ     2(PC) \
	VADDPS  (R9), z, z \
	VMOVUPS z, (R9) \
	ADDQ    R8, R9

// FETCH2ROWS prefetches the rows of C at AX and AX + R8 bytes, then steps AX two rows.
#define FETCH2ROWS \
	PREFETCHT0 (AX) \
	PREFETCHT0 (AX)(R8*1) \
	LEAQ       (AX)(R8*2), AX

// func sgemm12x16z(k int, a0, a1 *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, load bool)
//
// sgemm6x16s for twelve rows on AVX-512: rows 0–5 of A from a0, rows 6–11 from a1 (two
// panels, packed or in place), with the strides of sgemm6x16s; one zmm accumulator per
// row of the tile, A's element broadcast from memory into the FMA. Each element is the
// same FMA chain as in sgemm6x16s, so the two kernels give the same bits. Rows are
// addressed from SI (0–2), R13 = SI + 3·ars (3–5), R14 (6–8) and R15 = R14 + 3·ars (9–11).
TEXT ·sgemm12x16z(SB), NOSPLIT, $0-73
	MOVQ k+0(FP), CX
	MOVQ a0+8(FP), SI
	MOVQ a1+16(FP), R14
	MOVQ ars+24(FP), R10
	MOVQ aps+32(FP), R11
	MOVQ b+40(FP), DI
	MOVQ bps+48(FP), R12
	MOVQ c+56(FP), R9
	MOVQ ldc+64(FP), R8
	SHLQ $2, R8
	LEAQ (R10)(R10*2), R13
	LEAQ (R14)(R13*1), R15
	ADDQ SI, R13
	// Fetch C's twelve rows while the k loop runs: in a training step C comes from L3,
	// and the stores (and loads, with load set) at the end otherwise wait for it (3 %
	// of a 512-token step on the Xeon of docs/performance.md).
	MOVQ R9, AX
	FETCH2ROWS
	FETCH2ROWS
	FETCH2ROWS
	FETCH2ROWS
	FETCH2ROWS
	FETCH2ROWS
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
	JEQ   zstore

zloop:
	VMOVUPS          (DI), Z0
	VFMADD231PS.BCST (SI), Z0, Z4
	VFMADD231PS.BCST (SI)(R10*1), Z0, Z5
	VFMADD231PS.BCST (SI)(R10*2), Z0, Z6
	VFMADD231PS.BCST (R13), Z0, Z7
	VFMADD231PS.BCST (R13)(R10*1), Z0, Z8
	VFMADD231PS.BCST (R13)(R10*2), Z0, Z9
	VFMADD231PS.BCST (R14), Z0, Z10
	VFMADD231PS.BCST (R14)(R10*1), Z0, Z11
	VFMADD231PS.BCST (R14)(R10*2), Z0, Z12
	VFMADD231PS.BCST (R15), Z0, Z13
	VFMADD231PS.BCST (R15)(R10*1), Z0, Z14
	VFMADD231PS.BCST (R15)(R10*2), Z0, Z15
	ADDQ             R11, SI
	ADDQ             R11, R13
	ADDQ             R11, R14
	ADDQ             R11, R15
	ADDQ             R12, DI
	DECQ             CX
	JNZ              zloop

zstore:
	MOVBQZX load+72(FP), AX
	ZROW(Z4)
	ZROW(Z5)
	ZROW(Z6)
	ZROW(Z7)
	ZROW(Z8)
	ZROW(Z9)
	ZROW(Z10)
	ZROW(Z11)
	ZROW(Z12)
	ZROW(Z13)
	ZROW(Z14)
	ZROW(Z15)
	VZEROUPPER
	RET

// func sgemm6x16z(k int, a *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, load bool)
//
// sgemm6x16s on AVX-512: one zmm accumulator per row, A's element broadcast from memory
// into the FMA, each element the same FMA chain as in sgemm6x16s and sgemm12x16z (the same
// bits). Half the FMAs of the ymm kernel for the 6-row tiles the wide tile cannot pair
// (attention's diagonal blocks, a chunk's odd tile). Rows are addressed from SI (0–2) and
// R13 = SI + 3·ars (3–5).
TEXT ·sgemm6x16z(SB), NOSPLIT, $0-65
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
	MOVQ R9, AX
	FETCH2ROWS
	FETCH2ROWS
	FETCH2ROWS
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	TESTQ CX, CX
	JEQ   z6store

z6loop:
	VMOVUPS          (DI), Z0
	VFMADD231PS.BCST (SI), Z0, Z4
	VFMADD231PS.BCST (SI)(R10*1), Z0, Z5
	VFMADD231PS.BCST (SI)(R10*2), Z0, Z6
	VFMADD231PS.BCST (R13), Z0, Z7
	VFMADD231PS.BCST (R13)(R10*1), Z0, Z8
	VFMADD231PS.BCST (R13)(R10*2), Z0, Z9
	ADDQ             R11, SI
	ADDQ             R11, R13
	ADDQ             R12, DI
	DECQ             CX
	JNZ              z6loop

z6store:
	MOVBQZX load+64(FP), AX
	ZROW(Z4)
	ZROW(Z5)
	ZROW(Z6)
	ZROW(Z7)
	ZROW(Z8)
	ZROW(Z9)
	VZEROUPPER
	RET
