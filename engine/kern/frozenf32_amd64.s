//go:build amd64 && !purego

#include "textflag.h"

// The float32 tiles of frozenf32.go: C[r][j] = Σ_p A_r[p]·W_j[p] for up to three rows
// of A and four consecutive rows of W (stride ldw bytes), written to out[4r+j], neither
// operand packed. Every output has one eight-lane accumulator that meets p in order,
// eight at a time, and the same horizontal sum (F32ROW4): a row's sums do not depend on
// whether one, two or three rows of A share the tile, so a product's rows do not depend
// on how many rows it has.

// F32ROW4 sums each of the accumulators w, x, y, z horizontally and stores the four sums
// at off(AX) (the order of kern_amd64.s's ROW4).
#define F32ROW4(w, x, y, z, xw, xx, off) \
	VHADDPS x, w, w \
	VHADDPS z, y, y \
	VHADDPS y, w, w \
	VEXTRACTF128 $1, w, xx \
	VADDPS xx, xw, xw \
	VMOVUPS xw, off(AX)

// func tileF32AVX(a0, a1, a2 *float32, w *float32, ldw, n int, out *float32)
//
// n is the row length, a multiple of 8. Twelve accumulators (row r of A in
// Y(4+4r)..Y(7+4r)); each vector of W, loaded once into Y0..Y3, serves three rows of A
// read straight from memory.
TEXT ·tileF32AVX(SB), NOSPLIT, $0-56
	MOVQ a0+0(FP), SI
	MOVQ a1+8(FP), R8
	MOVQ a2+16(FP), R9
	MOVQ w+24(FP), DI
	MOVQ ldw+32(FP), DX
	MOVQ n+40(FP), CX
	LEAQ (DI)(DX*1), R10
	LEAQ (R10)(DX*1), R11
	LEAQ (R11)(DX*1), R12
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
	SHRQ $3, CX
	JEQ  tfdone

tfloop:
	VMOVUPS     (DI), Y0
	VMOVUPS     (R10), Y1
	VMOVUPS     (R11), Y2
	VMOVUPS     (R12), Y3
	VFMADD231PS (SI), Y0, Y4
	VFMADD231PS (SI), Y1, Y5
	VFMADD231PS (SI), Y2, Y6
	VFMADD231PS (SI), Y3, Y7
	VFMADD231PS (R8), Y0, Y8
	VFMADD231PS (R8), Y1, Y9
	VFMADD231PS (R8), Y2, Y10
	VFMADD231PS (R8), Y3, Y11
	VFMADD231PS (R9), Y0, Y12
	VFMADD231PS (R9), Y1, Y13
	VFMADD231PS (R9), Y2, Y14
	VFMADD231PS (R9), Y3, Y15
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $32, DI
	ADDQ $32, R10
	ADDQ $32, R11
	ADDQ $32, R12
	DECQ CX
	JNE  tfloop

tfdone:
	MOVQ out+48(FP), AX
	F32ROW4(Y4, Y5, Y6, Y7, X4, X5, 0)
	F32ROW4(Y8, Y9, Y10, Y11, X8, X9, 16)
	F32ROW4(Y12, Y13, Y14, Y15, X12, X13, 32)
	VZEROUPPER
	RET

// func tile1F32AVX(a0 *float32, w *float32, ldw, n int, out *float32)
//
// The one-row tile: row 0 of tileF32AVX, the same accumulation per output (A's vector
// loaded once into Y0 and W read by the FMAs: a·w and w·a round alike).
TEXT ·tile1F32AVX(SB), NOSPLIT, $0-40
	MOVQ a0+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ ldw+16(FP), DX
	MOVQ n+24(FP), CX
	LEAQ (DI)(DX*1), R10
	LEAQ (R10)(DX*1), R11
	LEAQ (R11)(DX*1), R12
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	SHRQ $3, CX
	JEQ  t1done

t1loop:
	VMOVUPS     (SI), Y0
	VFMADD231PS (DI), Y0, Y4
	VFMADD231PS (R10), Y0, Y5
	VFMADD231PS (R11), Y0, Y6
	VFMADD231PS (R12), Y0, Y7
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, R10
	ADDQ $32, R11
	ADDQ $32, R12
	DECQ CX
	JNE  t1loop

t1done:
	MOVQ out+32(FP), AX
	F32ROW4(Y4, Y5, Y6, Y7, X4, X5, 0)
	VZEROUPPER
	RET

// func dotsF32AVX(a, w *float32, n, rows int, out *float32)
//
// out[r] = Σ_p a[p]·w[r·n+p] for rows consecutive rows of W: each one output of
// tileF32AVX alone, bit for bit (one eight-lane accumulator over n, a multiple of 8, in
// order, summed as F32ROW4 sums each of its four). A decode step's product reads W one
// row at a time with it: four rows streamed side by side (the tiles) ran a one-row
// product from memory at half the speed on a Zen 4, and a single chain of FMAs still
// outruns the memory (8 bytes a cycle). One call for all the rows: a Go call per row
// cost a tenth of a decode step.
TEXT ·dotsF32AVX(SB), NOSPLIT, $0-40
	MOVQ a+0(FP), R8
	MOVQ w+8(FP), DI
	MOVQ n+16(FP), R9
	MOVQ rows+24(FP), R10
	MOVQ out+32(FP), AX
	SHRQ $3, R9
	TESTQ R10, R10
	JEQ  d1done

d1row:
	MOVQ R8, SI
	MOVQ R9, CX
	VXORPS Y0, Y0, Y0
	TESTQ CX, CX
	JEQ  d1sum

d1loop:
	VMOVUPS     (DI), Y1
	VFMADD231PS (SI), Y1, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNE  d1loop

d1sum:
	VHADDPS Y0, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	MOVSS X0, (AX)
	ADDQ $4, AX
	DECQ R10
	JNE  d1row

d1done:
	VZEROUPPER
	RET
