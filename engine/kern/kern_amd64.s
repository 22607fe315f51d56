//go:build amd64 && !purego

#include "textflag.h"

// ROW stores accumulator pair (lo, hi) to the 16 floats at R9, first adding what is
// there when load is set (AX != 0), then steps R9 to the next row of C.
#define ROW(lo, hi) \
	TESTQ AX, AX \
	JEQ   3(PC) \
	VADDPS (R9), lo, lo \
	VADDPS 32(R9), hi, hi \
	VMOVUPS lo, (R9) \
	VMOVUPS hi, 32(R9) \
	ADDQ  R8, R9

// func sgemm6x16(k int, a, b, c *float32, ldc int, load bool)
//
// C[6×16] (+)= Apanel[k×6]·Bpanel[k×16]; the panels are packed so each step of k reads
// six consecutive floats of A and sixteen of B. Twelve ymm accumulators hold the tile,
// enough independent FMA chains to keep both FMA pipes busy.
TEXT ·sgemm6x16(SB), NOSPLIT, $0-41
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), R9
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
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
	JEQ   store

loop:
	VMOVUPS      (DI), Y0
	VMOVUPS      32(DI), Y1
	VBROADCASTSS (SI), Y2
	VBROADCASTSS 4(SI), Y3
	VFMADD231PS  Y0, Y2, Y4
	VFMADD231PS  Y1, Y2, Y5
	VFMADD231PS  Y0, Y3, Y6
	VFMADD231PS  Y1, Y3, Y7
	VBROADCASTSS 8(SI), Y2
	VBROADCASTSS 12(SI), Y3
	VFMADD231PS  Y0, Y2, Y8
	VFMADD231PS  Y1, Y2, Y9
	VFMADD231PS  Y0, Y3, Y10
	VFMADD231PS  Y1, Y3, Y11
	VBROADCASTSS 16(SI), Y2
	VBROADCASTSS 20(SI), Y3
	VFMADD231PS  Y0, Y2, Y12
	VFMADD231PS  Y1, Y2, Y13
	VFMADD231PS  Y0, Y3, Y14
	VFMADD231PS  Y1, Y3, Y15
	ADDQ         $24, SI
	ADDQ         $64, DI
	DECQ         CX
	JNZ          loop

store:
	MOVBQZX load+40(FP), AX
	ROW(Y4, Y5)
	ROW(Y6, Y7)
	ROW(Y8, Y9)
	ROW(Y10, Y11)
	ROW(Y12, Y13)
	ROW(Y14, Y15)
	VZEROUPPER
	RET

// func dot32AVX(a, b []float32) float32
//
// Four accumulators of eight lanes hide the FMA latency; the tail is scalar FMAs.
TEXT ·dot32AVX(SB), NOSPLIT, $0-52
	MOVQ   a_base+0(FP), SI
	MOVQ   a_len+8(FP), CX
	MOVQ   b_base+24(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

dloop32:
	CMPQ        CX, $32
	JLT         dloop8
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         dloop32

dloop8:
	CMPQ        CX, $8
	JLT         dreduce
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         dloop8

dreduce:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVHLPS     X0, X0, X1
	VADDPS       X1, X0, X0
	VMOVSHDUP    X0, X1
	VADDSS       X1, X0, X0

dtail:
	TESTQ       CX, CX
	JEQ         ddone
	VMOVSS      (SI), X4
	VFMADD231SS (DI), X4, X0
	ADDQ        $4, SI
	ADDQ        $4, DI
	DECQ        CX
	JMP         dtail

ddone:
	VZEROUPPER
	MOVSS X0, ret+48(FP)
	RET

// func axpy32AVX(alpha float32, x, y []float32)
//
// y += alpha·x over len(x) elements, 32 per step, scalar tail.
TEXT ·axpy32AVX(SB), NOSPLIT, $0-56
	VBROADCASTSS alpha+0(FP), Y0
	MOVQ         x_base+8(FP), SI
	MOVQ         x_len+16(FP), CX
	MOVQ         y_base+32(FP), DI

aloop32:
	CMPQ        CX, $32
	JLT         aloop8
	VMOVUPS     (DI), Y1
	VMOVUPS     32(DI), Y2
	VMOVUPS     64(DI), Y3
	VMOVUPS     96(DI), Y4
	VFMADD231PS (SI), Y0, Y1
	VFMADD231PS 32(SI), Y0, Y2
	VFMADD231PS 64(SI), Y0, Y3
	VFMADD231PS 96(SI), Y0, Y4
	VMOVUPS     Y1, (DI)
	VMOVUPS     Y2, 32(DI)
	VMOVUPS     Y3, 64(DI)
	VMOVUPS     Y4, 96(DI)
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         aloop32

aloop8:
	CMPQ        CX, $8
	JLT         atail
	VMOVUPS     (DI), Y1
	VFMADD231PS (SI), Y0, Y1
	VMOVUPS     Y1, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         aloop8

atail:
	TESTQ       CX, CX
	JEQ         adone
	VMOVSS      (DI), X1
	VFMADD231SS (SI), X0, X1
	VMOVSS      X1, (DI)
	ADDQ        $4, SI
	ADDQ        $4, DI
	DECQ        CX
	JMP         atail

adone:
	VZEROUPPER
	RET

// func packNT16(d, b *float32, ldb, kb8 int)
//
// Packs a 16-column panel of B for C = A·Bᵀ, where B's columns are the rows of b (row
// stride ldb floats): d[p*16+x] = b[x*ldb+p] for p < 8·kb8. Each 8×8 block is
// transposed in registers, so both the reads and the writes stay contiguous.
TEXT ·packNT16(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), R8
	MOVQ kb8+24(FP), CX
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R12 // 3 rows
	MOVQ R8, R14
	SHLQ $3, R14 // 8 rows
	TESTQ CX, CX
	JEQ   pdone

ploop:
	MOVQ SI, R10
	XORQ DX, DX

phalf:
	LEAQ       (R10)(R8*4), R13
	VMOVUPS    (R10), Y0
	VMOVUPS    (R10)(R8*1), Y1
	VMOVUPS    (R10)(R8*2), Y2
	VMOVUPS    (R10)(R12*1), Y3
	VMOVUPS    (R13), Y4
	VMOVUPS    (R13)(R8*1), Y5
	VMOVUPS    (R13)(R8*2), Y6
	VMOVUPS    (R13)(R12*1), Y7
	VUNPCKLPS  Y1, Y0, Y8
	VUNPCKHPS  Y1, Y0, Y9
	VUNPCKLPS  Y3, Y2, Y10
	VUNPCKHPS  Y3, Y2, Y11
	VUNPCKLPS  Y5, Y4, Y12
	VUNPCKHPS  Y5, Y4, Y13
	VUNPCKLPS  Y7, Y6, Y14
	VUNPCKHPS  Y7, Y6, Y15
	VSHUFPS    $0x44, Y10, Y8, Y0
	VSHUFPS    $0xEE, Y10, Y8, Y1
	VSHUFPS    $0x44, Y11, Y9, Y2
	VSHUFPS    $0xEE, Y11, Y9, Y3
	VSHUFPS    $0x44, Y14, Y12, Y4
	VSHUFPS    $0xEE, Y14, Y12, Y5
	VSHUFPS    $0x44, Y15, Y13, Y6
	VSHUFPS    $0xEE, Y15, Y13, Y7
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15
	VMOVUPS    Y8, (DI)(DX*1)
	VMOVUPS    Y9, 64(DI)(DX*1)
	VMOVUPS    Y10, 128(DI)(DX*1)
	VMOVUPS    Y11, 192(DI)(DX*1)
	VMOVUPS    Y12, 256(DI)(DX*1)
	VMOVUPS    Y13, 320(DI)(DX*1)
	VMOVUPS    Y14, 384(DI)(DX*1)
	VMOVUPS    Y15, 448(DI)(DX*1)
	ADDQ       R14, R10
	ADDQ       $32, DX
	CMPQ       DX, $64
	JLT        phalf

	ADDQ $32, SI
	ADDQ $512, DI
	DECQ CX
	JNZ  ploop

pdone:
	VZEROUPPER
	RET

// func packNN16(d, b *float32, ldb, kb int)
//
// Packs a 16-column panel of a row-major B: d[p*16+x] = b[p*ldb+x] for p < kb, two ymm
// per step (Go's per-row copy goes through memmove, several times slower).
TEXT ·packNN16(SB), NOSPLIT, $0-32
	MOVQ  d+0(FP), DI
	MOVQ  b+8(FP), SI
	MOVQ  ldb+16(FP), R8
	MOVQ  kb+24(FP), CX
	SHLQ  $2, R8
	TESTQ CX, CX
	JEQ   ndone

nloop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    R8, SI
	ADDQ    $64, DI
	DECQ    CX
	JNZ     nloop

ndone:
	VZEROUPPER
	RET

// func packA6(d, a *float32, lda, kb8 int)
//
// Packs a 6-row panel of a row-major A (row stride lda floats): d[p*6+r] = a[r*lda+p]
// for p < 8·kb8. Six rows of eight steps are transposed in registers (two zero rows
// pad the 8×8 transpose) and written as eight 6-float groups.
TEXT ·packA6(SB), NOSPLIT, $0-32
	MOVQ   d+0(FP), DI
	MOVQ   a+8(FP), SI
	MOVQ   lda+16(FP), R8
	MOVQ   kb8+24(FP), CX
	SHLQ   $2, R8
	LEAQ   (R8)(R8*2), R12 // 3 rows
	VXORPS Y6, Y6, Y6
	TESTQ  CX, CX
	JEQ    adone6

aloop6:
	LEAQ         (SI)(R8*4), R13
	VMOVUPS      (SI), Y0
	VMOVUPS      (SI)(R8*1), Y1
	VMOVUPS      (SI)(R8*2), Y2
	VMOVUPS      (SI)(R12*1), Y3
	VMOVUPS      (R13), Y4
	VMOVUPS      (R13)(R8*1), Y5
	VUNPCKLPS    Y1, Y0, Y8
	VUNPCKHPS    Y1, Y0, Y9
	VUNPCKLPS    Y3, Y2, Y10
	VUNPCKHPS    Y3, Y2, Y11
	VUNPCKLPS    Y5, Y4, Y12
	VUNPCKHPS    Y5, Y4, Y13
	VSHUFPS      $0x44, Y10, Y8, Y0
	VSHUFPS      $0xEE, Y10, Y8, Y1
	VSHUFPS      $0x44, Y11, Y9, Y2
	VSHUFPS      $0xEE, Y11, Y9, Y3
	VSHUFPS      $0x44, Y6, Y12, Y4
	VSHUFPS      $0xEE, Y6, Y12, Y5
	VSHUFPS      $0x44, Y6, Y13, Y7
	VSHUFPS      $0xEE, Y6, Y13, Y14
	VMOVUPS      X0, (DI)
	VMOVSD       X4, 16(DI)
	VMOVUPS      X1, 24(DI)
	VMOVSD       X5, 40(DI)
	VMOVUPS      X2, 48(DI)
	VMOVSD       X7, 64(DI)
	VMOVUPS      X3, 72(DI)
	VMOVSD       X14, 88(DI)
	VEXTRACTF128 $1, Y0, X8
	VEXTRACTF128 $1, Y4, X9
	VEXTRACTF128 $1, Y1, X10
	VEXTRACTF128 $1, Y5, X11
	VEXTRACTF128 $1, Y2, X12
	VEXTRACTF128 $1, Y7, X13
	VEXTRACTF128 $1, Y3, X15
	VEXTRACTF128 $1, Y14, X0
	VMOVUPS      X8, 96(DI)
	VMOVSD       X9, 112(DI)
	VMOVUPS      X10, 120(DI)
	VMOVSD       X11, 136(DI)
	VMOVUPS      X12, 144(DI)
	VMOVSD       X13, 160(DI)
	VMOVUPS      X15, 168(DI)
	VMOVSD       X0, 184(DI)
	ADDQ         $32, SI
	ADDQ         $192, DI
	DECQ         CX
	JNZ          aloop6

adone6:
	VZEROUPPER
	RET

// Constants of exp32AVX, eight copies each (one ymm vector).
DATA expc<>+0(SB)/4, $0x42b0c0a5
DATA expc<>+4(SB)/4, $0x42b0c0a5
DATA expc<>+8(SB)/4, $0x42b0c0a5
DATA expc<>+12(SB)/4, $0x42b0c0a5
DATA expc<>+16(SB)/4, $0x42b0c0a5
DATA expc<>+20(SB)/4, $0x42b0c0a5
DATA expc<>+24(SB)/4, $0x42b0c0a5
DATA expc<>+28(SB)/4, $0x42b0c0a5
DATA expc<>+32(SB)/4, $0xc2b0c0a5
DATA expc<>+36(SB)/4, $0xc2b0c0a5
DATA expc<>+40(SB)/4, $0xc2b0c0a5
DATA expc<>+44(SB)/4, $0xc2b0c0a5
DATA expc<>+48(SB)/4, $0xc2b0c0a5
DATA expc<>+52(SB)/4, $0xc2b0c0a5
DATA expc<>+56(SB)/4, $0xc2b0c0a5
DATA expc<>+60(SB)/4, $0xc2b0c0a5
DATA expc<>+64(SB)/4, $0x3fb8aa3b
DATA expc<>+68(SB)/4, $0x3fb8aa3b
DATA expc<>+72(SB)/4, $0x3fb8aa3b
DATA expc<>+76(SB)/4, $0x3fb8aa3b
DATA expc<>+80(SB)/4, $0x3fb8aa3b
DATA expc<>+84(SB)/4, $0x3fb8aa3b
DATA expc<>+88(SB)/4, $0x3fb8aa3b
DATA expc<>+92(SB)/4, $0x3fb8aa3b
DATA expc<>+96(SB)/4, $0x3f000000
DATA expc<>+100(SB)/4, $0x3f000000
DATA expc<>+104(SB)/4, $0x3f000000
DATA expc<>+108(SB)/4, $0x3f000000
DATA expc<>+112(SB)/4, $0x3f000000
DATA expc<>+116(SB)/4, $0x3f000000
DATA expc<>+120(SB)/4, $0x3f000000
DATA expc<>+124(SB)/4, $0x3f000000
DATA expc<>+128(SB)/4, $0x3f318000
DATA expc<>+132(SB)/4, $0x3f318000
DATA expc<>+136(SB)/4, $0x3f318000
DATA expc<>+140(SB)/4, $0x3f318000
DATA expc<>+144(SB)/4, $0x3f318000
DATA expc<>+148(SB)/4, $0x3f318000
DATA expc<>+152(SB)/4, $0x3f318000
DATA expc<>+156(SB)/4, $0x3f318000
DATA expc<>+160(SB)/4, $0xb95e8083
DATA expc<>+164(SB)/4, $0xb95e8083
DATA expc<>+168(SB)/4, $0xb95e8083
DATA expc<>+172(SB)/4, $0xb95e8083
DATA expc<>+176(SB)/4, $0xb95e8083
DATA expc<>+180(SB)/4, $0xb95e8083
DATA expc<>+184(SB)/4, $0xb95e8083
DATA expc<>+188(SB)/4, $0xb95e8083
DATA expc<>+192(SB)/4, $0x39506967
DATA expc<>+196(SB)/4, $0x39506967
DATA expc<>+200(SB)/4, $0x39506967
DATA expc<>+204(SB)/4, $0x39506967
DATA expc<>+208(SB)/4, $0x39506967
DATA expc<>+212(SB)/4, $0x39506967
DATA expc<>+216(SB)/4, $0x39506967
DATA expc<>+220(SB)/4, $0x39506967
DATA expc<>+224(SB)/4, $0x3ab743ce
DATA expc<>+228(SB)/4, $0x3ab743ce
DATA expc<>+232(SB)/4, $0x3ab743ce
DATA expc<>+236(SB)/4, $0x3ab743ce
DATA expc<>+240(SB)/4, $0x3ab743ce
DATA expc<>+244(SB)/4, $0x3ab743ce
DATA expc<>+248(SB)/4, $0x3ab743ce
DATA expc<>+252(SB)/4, $0x3ab743ce
DATA expc<>+256(SB)/4, $0x3c088908
DATA expc<>+260(SB)/4, $0x3c088908
DATA expc<>+264(SB)/4, $0x3c088908
DATA expc<>+268(SB)/4, $0x3c088908
DATA expc<>+272(SB)/4, $0x3c088908
DATA expc<>+276(SB)/4, $0x3c088908
DATA expc<>+280(SB)/4, $0x3c088908
DATA expc<>+284(SB)/4, $0x3c088908
DATA expc<>+288(SB)/4, $0x3d2aa9c1
DATA expc<>+292(SB)/4, $0x3d2aa9c1
DATA expc<>+296(SB)/4, $0x3d2aa9c1
DATA expc<>+300(SB)/4, $0x3d2aa9c1
DATA expc<>+304(SB)/4, $0x3d2aa9c1
DATA expc<>+308(SB)/4, $0x3d2aa9c1
DATA expc<>+312(SB)/4, $0x3d2aa9c1
DATA expc<>+316(SB)/4, $0x3d2aa9c1
DATA expc<>+320(SB)/4, $0x3e2aaaaa
DATA expc<>+324(SB)/4, $0x3e2aaaaa
DATA expc<>+328(SB)/4, $0x3e2aaaaa
DATA expc<>+332(SB)/4, $0x3e2aaaaa
DATA expc<>+336(SB)/4, $0x3e2aaaaa
DATA expc<>+340(SB)/4, $0x3e2aaaaa
DATA expc<>+344(SB)/4, $0x3e2aaaaa
DATA expc<>+348(SB)/4, $0x3e2aaaaa
DATA expc<>+352(SB)/4, $0x3f000000
DATA expc<>+356(SB)/4, $0x3f000000
DATA expc<>+360(SB)/4, $0x3f000000
DATA expc<>+364(SB)/4, $0x3f000000
DATA expc<>+368(SB)/4, $0x3f000000
DATA expc<>+372(SB)/4, $0x3f000000
DATA expc<>+376(SB)/4, $0x3f000000
DATA expc<>+380(SB)/4, $0x3f000000
DATA expc<>+384(SB)/4, $0x3f800000
DATA expc<>+388(SB)/4, $0x3f800000
DATA expc<>+392(SB)/4, $0x3f800000
DATA expc<>+396(SB)/4, $0x3f800000
DATA expc<>+400(SB)/4, $0x3f800000
DATA expc<>+404(SB)/4, $0x3f800000
DATA expc<>+408(SB)/4, $0x3f800000
DATA expc<>+412(SB)/4, $0x3f800000
DATA expc<>+416(SB)/4, $0x0000007f
DATA expc<>+420(SB)/4, $0x0000007f
DATA expc<>+424(SB)/4, $0x0000007f
DATA expc<>+428(SB)/4, $0x0000007f
DATA expc<>+432(SB)/4, $0x0000007f
DATA expc<>+436(SB)/4, $0x0000007f
DATA expc<>+440(SB)/4, $0x0000007f
DATA expc<>+444(SB)/4, $0x0000007f
GLOBL expc<>(SB), RODATA|NOPTR, $448

// func exp32AVX(dst, src *float32, n int, scale, bias float32)
// dst[i] = exp(src[i]·scale + bias) for n (a multiple of 8) elements, Cephes' expf:
// x = n·ln2 + r with |r| ≤ ln2/2, e^r by a degree-7 polynomial, 2^n through the exponent.
TEXT ·exp32AVX(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y14
	VBROADCASTSS bias+28(FP), Y15

eloop:
	CMPQ         CX, $8
	JLT          edone
	VMOVUPS      (SI), Y0
	VMULPS       Y14, Y0, Y0
	VADDPS       Y15, Y0, Y0
	VMINPS       expc<>+0(SB), Y0, Y0
	VMAXPS       expc<>+32(SB), Y0, Y0
	VMOVUPS      expc<>+64(SB), Y1
	VFMADD213PS  expc<>+96(SB), Y0, Y1
	VROUNDPS     $1, Y1, Y1
	VFNMADD231PS expc<>+128(SB), Y1, Y0
	VFNMADD231PS expc<>+160(SB), Y1, Y0
	VMULPS       Y0, Y0, Y2
	VMOVUPS      expc<>+192(SB), Y3
	VFMADD213PS  expc<>+224(SB), Y0, Y3
	VFMADD213PS  expc<>+256(SB), Y0, Y3
	VFMADD213PS  expc<>+288(SB), Y0, Y3
	VFMADD213PS  expc<>+320(SB), Y0, Y3
	VFMADD213PS  expc<>+352(SB), Y0, Y3
	VFMADD213PS  Y0, Y2, Y3
	VADDPS       expc<>+384(SB), Y3, Y3
	VCVTPS2DQ    Y1, Y4
	VPADDD       expc<>+416(SB), Y4, Y4
	VPSLLD       $23, Y4, Y4
	VMULPS       Y4, Y3, Y3
	VMOVUPS      Y3, (DI)
	ADDQ         $32, SI
	ADDQ         $32, DI
	SUBQ         $8, CX
	JMP          eloop

edone:
	VZEROUPPER
	RET
