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

// HSUM4 sums the four ymm accumulators a, b, c, d horizontally into the low float of
// a's xmm register.
#define HSUM4(a, b, c, d, xa, xt) \
	VADDPS b, a, a \
	VADDPS d, c, c \
	VADDPS c, a, a \
	VEXTRACTF128 $1, a, xt \
	VADDPS xt, xa, xa \
	VHADDPS xa, xa, xa \
	VHADDPS xa, xa, xa

// func dotBF16AVX(x *float32, w *uint16, n int) float32
//
// Σ x[i]·w[i] with w bfloat16, n a multiple of 16. A bfloat16 is the top half of a
// float32: zero-extend each to 32 bits and shift it up 16.
TEXT ·dotBF16AVX(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	CMPQ CX, $32
	JLT  bf16tail

bf16loop:
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
	JGE         bf16loop

bf16tail:
	TESTQ       CX, CX
	JEQ         bf16done
	VPMOVZXWD   (DI), Y4
	VPMOVZXWD   16(DI), Y5
	VPSLLD      $16, Y4, Y4
	VPSLLD      $16, Y5, Y5
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1

bf16done:
	HSUM4(Y0, Y1, Y2, Y3, X0, X1)
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func dotQ8AVX(x *float32, blk *byte, nb int) float32
//
// The dot of x with nb Q8_0 blocks (34 bytes: a half scale d, then 32 int8 q):
// Σ_b d_b·Σ_j x·q. The scale is broadcast as a half and widened by F16C.
TEXT ·dotQ8AVX(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ nb+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JEQ   q8done

q8loop:
	VPBROADCASTW (DI), X8
	VCVTPH2PS    X8, Y8
	VPMOVSXBD    2(DI), Y4
	VPMOVSXBD    10(DI), Y5
	VPMOVSXBD    18(DI), Y6
	VPMOVSXBD    26(DI), Y7
	VCVTDQ2PS    Y4, Y4
	VCVTDQ2PS    Y5, Y5
	VCVTDQ2PS    Y6, Y6
	VCVTDQ2PS    Y7, Y7
	VMULPS       (SI), Y4, Y4
	VMULPS       32(SI), Y5, Y5
	VMULPS       64(SI), Y6, Y6
	VMULPS       96(SI), Y7, Y7
	VADDPS       Y5, Y4, Y4
	VADDPS       Y7, Y6, Y6
	VADDPS       Y6, Y4, Y4
	VFMADD231PS  Y4, Y8, Y0
	ADDQ         $128, SI
	ADDQ         $34, DI
	DECQ         CX
	JEQ          q8done
	VPBROADCASTW (DI), X9
	VCVTPH2PS    X9, Y9
	VPMOVSXBD    2(DI), Y4
	VPMOVSXBD    10(DI), Y5
	VPMOVSXBD    18(DI), Y6
	VPMOVSXBD    26(DI), Y7
	VCVTDQ2PS    Y4, Y4
	VCVTDQ2PS    Y5, Y5
	VCVTDQ2PS    Y6, Y6
	VCVTDQ2PS    Y7, Y7
	VMULPS       (SI), Y4, Y4
	VMULPS       32(SI), Y5, Y5
	VMULPS       64(SI), Y6, Y6
	VMULPS       96(SI), Y7, Y7
	VADDPS       Y5, Y4, Y4
	VADDPS       Y7, Y6, Y6
	VADDPS       Y6, Y4, Y4
	VFMADD231PS  Y4, Y9, Y1
	ADDQ         $128, SI
	ADDQ         $34, DI
	DECQ         CX
	JNE          q8loop

q8done:
	HSUM4(Y0, Y1, Y2, Y3, X0, X1)
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// Q4UNPACK widens the Q4_1 block at DI to 32 floats in Y4..Y7 (w = d·q + m), with the
// 0x0F byte mask in X15.
#define Q4UNPACK \
	VPBROADCASTW (DI), X8 \
	VCVTPH2PS    X8, Y8 \
	VPBROADCASTW 2(DI), X9 \
	VCVTPH2PS    X9, Y9 \
	VMOVDQU      4(DI), X10 \
	VPAND        X15, X10, X11 \
	VPSRLW       $4, X10, X10 \
	VPAND        X15, X10, X10 \
	VPMOVZXBD    X11, Y4 \
	VPSRLDQ      $8, X11, X11 \
	VPMOVZXBD    X11, Y5 \
	VPMOVZXBD    X10, Y6 \
	VPSRLDQ      $8, X10, X10 \
	VPMOVZXBD    X10, Y7 \
	VCVTDQ2PS    Y4, Y4 \
	VCVTDQ2PS    Y5, Y5 \
	VCVTDQ2PS    Y6, Y6 \
	VCVTDQ2PS    Y7, Y7 \
	VFMADD213PS  Y9, Y8, Y4 \
	VFMADD213PS  Y9, Y8, Y5 \
	VFMADD213PS  Y9, Y8, Y6 \
	VFMADD213PS  Y9, Y8, Y7

// func dotQ4AVX(x *float32, blk *byte, nb int) float32
//
// The dot of x with nb Q4_1 blocks (20 bytes: half d, half m, 16 bytes of nibbles; the
// low nibble of byte j is weight j, the high one weight j+16).
TEXT ·dotQ4AVX(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVL $0x0F0F0F0F, AX
	MOVQ AX, X15
	VPBROADCASTD X15, X15
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JEQ   q4done

q4loop:
	Q4UNPACK
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1
	VFMADD231PS 64(SI), Y6, Y2
	VFMADD231PS 96(SI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $20, DI
	DECQ        CX
	JNE         q4loop

q4done:
	HSUM4(Y0, Y1, Y2, Y3, X0, X1)
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func widenBF16AVX(dst *float32, src *uint16, n int)
//
// dst[i] = float32(src[i]) for n a multiple of 16.
TEXT ·widenBF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JEQ   wbdone

wbloop:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPSLLD    $16, Y0, Y0
	VPSLLD    $16, Y1, Y1
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNE       wbloop

wbdone:
	VZEROUPPER
	RET

// func widenQ8AVX(dst *float32, blk *byte, nb int)
//
// Writes the 32·nb weights of nb Q8_0 blocks to dst.
TEXT ·widenQ8AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ nb+16(FP), CX
	TESTQ CX, CX
	JEQ   w8done

w8loop:
	VPBROADCASTW (DI), X8
	VCVTPH2PS    X8, Y8
	VPMOVSXBD    2(DI), Y4
	VPMOVSXBD    10(DI), Y5
	VPMOVSXBD    18(DI), Y6
	VPMOVSXBD    26(DI), Y7
	VCVTDQ2PS    Y4, Y4
	VCVTDQ2PS    Y5, Y5
	VCVTDQ2PS    Y6, Y6
	VCVTDQ2PS    Y7, Y7
	VMULPS       Y8, Y4, Y4
	VMULPS       Y8, Y5, Y5
	VMULPS       Y8, Y6, Y6
	VMULPS       Y8, Y7, Y7
	VMOVUPS      Y4, (SI)
	VMOVUPS      Y5, 32(SI)
	VMOVUPS      Y6, 64(SI)
	VMOVUPS      Y7, 96(SI)
	ADDQ         $128, SI
	ADDQ         $34, DI
	DECQ         CX
	JNE          w8loop

w8done:
	VZEROUPPER
	RET

// func widenQ4AVX(dst *float32, blk *byte, nb int)
//
// Writes the 32·nb weights of nb Q4_1 blocks to dst.
TEXT ·widenQ4AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVL $0x0F0F0F0F, AX
	MOVQ AX, X15
	VPBROADCASTD X15, X15
	TESTQ CX, CX
	JEQ   w4done

w4loop:
	Q4UNPACK
	VMOVUPS Y4, (SI)
	VMOVUPS Y5, 32(SI)
	VMOVUPS Y6, 64(SI)
	VMOVUPS Y7, 96(SI)
	ADDQ    $128, SI
	ADDQ    $20, DI
	DECQ    CX
	JNE     w4loop

w4done:
	VZEROUPPER
	RET

// The 3×4 tiles: C[r][j] = Σ_p A_r[p]·W_j[p] for three rows of A (a0, a1, a2) and four
// consecutive rows of W (stride ldw bytes), written to out[4r+j]. Twelve ymm
// accumulators hold the tile (Y4..Y15, row r in Y(4+4r)..Y(7+4r)); W is widened one
// vector at a time into Y0 and multiplied with A straight from memory, so no packing is
// needed: each widened vector of W serves three rows of A.

// FMA3 adds Y0 times A's three rows at byte offset off to column j's accumulators.
#define FMA3(off, acc0, acc1, acc2) \
	VFMADD231PS off(SI), Y0, acc0 \
	VFMADD231PS off(R8), Y0, acc1 \
	VFMADD231PS off(R9), Y0, acc2

// TILESETUP points R10..R12 at W's rows after DI's (stride DX) and zeroes the
// accumulators.
#define TILESETUP \
	LEAQ (DI)(DX*1), R10 \
	LEAQ (R10)(DX*1), R11 \
	LEAQ (R11)(DX*1), R12 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11 \
	VXORPS Y12, Y12, Y12 \
	VXORPS Y13, Y13, Y13 \
	VXORPS Y14, Y14, Y14 \
	VXORPS Y15, Y15, Y15

// ROW4 sums each of the accumulators w, x, y, z horizontally and stores the four sums
// at off(AX).
#define ROW4(w, x, y, z, xw, xx, off) \
	VHADDPS x, w, w \
	VHADDPS z, y, y \
	VHADDPS y, w, w \
	VEXTRACTF128 $1, w, xx \
	VADDPS xx, xw, xw \
	VMOVUPS xw, off(AX)

// TILESTORE writes the twelve sums to (AX).
#define TILESTORE \
	ROW4(Y4, Y5, Y6, Y7, X4, X5, 0) \
	ROW4(Y8, Y9, Y10, Y11, X8, X9, 16) \
	ROW4(Y12, Y13, Y14, Y15, X12, X13, 32) \
	VZEROUPPER

// BF16COL widens 8 bfloat16 at wr into Y0 and adds them times A to column j.
#define BF16COL(wr, acc0, acc1, acc2) \
	VPMOVZXWD (wr), Y0 \
	VPSLLD    $16, Y0, Y0 \
	FMA3(0, acc0, acc1, acc2)

// func tileBF16AVX(a0, a1, a2 *float32, w *uint16, ldw, n int, out *float32)
//
// n is the row length, a multiple of 8.
TEXT ·tileBF16AVX(SB), NOSPLIT, $0-56
	MOVQ a0+0(FP), SI
	MOVQ a1+8(FP), R8
	MOVQ a2+16(FP), R9
	MOVQ w+24(FP), DI
	MOVQ ldw+32(FP), DX
	MOVQ n+40(FP), CX
	TILESETUP
	SHRQ $3, CX
	JEQ  tbdone

tbloop:
	BF16COL(DI, Y4, Y8, Y12)
	BF16COL(R10, Y5, Y9, Y13)
	BF16COL(R11, Y6, Y10, Y14)
	BF16COL(R12, Y7, Y11, Y15)
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $16, DI
	ADDQ $16, R10
	ADDQ $16, R11
	ADDQ $16, R12
	DECQ CX
	JNE  tbloop

tbdone:
	MOVQ out+48(FP), AX
	TILESTORE
	RET

// Q8COL widens the Q8_0 block at wr (scale into Y1, then four vectors of 8 into Y0) and
// adds it times A's block to column j.
#define Q8COL(wr, acc0, acc1, acc2) \
	VPBROADCASTW (wr), X1 \
	VCVTPH2PS    X1, Y1 \
	VPMOVSXBD    2(wr), Y0 \
	VCVTDQ2PS    Y0, Y0 \
	VMULPS       Y1, Y0, Y0 \
	FMA3(0, acc0, acc1, acc2) \
	VPMOVSXBD    10(wr), Y0 \
	VCVTDQ2PS    Y0, Y0 \
	VMULPS       Y1, Y0, Y0 \
	FMA3(32, acc0, acc1, acc2) \
	VPMOVSXBD    18(wr), Y0 \
	VCVTDQ2PS    Y0, Y0 \
	VMULPS       Y1, Y0, Y0 \
	FMA3(64, acc0, acc1, acc2) \
	VPMOVSXBD    26(wr), Y0 \
	VCVTDQ2PS    Y0, Y0 \
	VMULPS       Y1, Y0, Y0 \
	FMA3(96, acc0, acc1, acc2)

// func tileQ8AVX(a0, a1, a2 *float32, w *byte, ldw, n int, out *float32)
//
// n is the number of Q8_0 blocks in a row.
TEXT ·tileQ8AVX(SB), NOSPLIT, $0-56
	MOVQ a0+0(FP), SI
	MOVQ a1+8(FP), R8
	MOVQ a2+16(FP), R9
	MOVQ w+24(FP), DI
	MOVQ ldw+32(FP), DX
	MOVQ n+40(FP), CX
	TILESETUP
	TESTQ CX, CX
	JEQ   t8done

t8loop:
	Q8COL(DI, Y4, Y8, Y12)
	Q8COL(R10, Y5, Y9, Y13)
	Q8COL(R11, Y6, Y10, Y14)
	Q8COL(R12, Y7, Y11, Y15)
	ADDQ $128, SI
	ADDQ $128, R8
	ADDQ $128, R9
	ADDQ $34, DI
	ADDQ $34, R10
	ADDQ $34, R11
	ADDQ $34, R12
	DECQ CX
	JNE  t8loop

t8done:
	MOVQ out+48(FP), AX
	TILESTORE
	RET

DATA q4mask<>+0(SB)/8, $0x0F0F0F0F0F0F0F0F
DATA q4mask<>+8(SB)/8, $0x0F0F0F0F0F0F0F0F
GLOBL q4mask<>(SB), RODATA|NOPTR, $16

// Q4COL widens the Q4_1 block at wr (d into Y1, m into Y2, its 16 bytes into X3, each
// vector of 8 into Y0 as d·q + m) and adds it times A's block to column j.
#define Q4COL(wr, acc0, acc1, acc2) \
	VPBROADCASTW (wr), X1 \
	VCVTPH2PS    X1, Y1 \
	VPBROADCASTW 2(wr), X2 \
	VCVTPH2PS    X2, Y2 \
	VMOVDQU      4(wr), X3 \
	VPAND        q4mask<>(SB), X3, X0 \
	VPMOVZXBD    X0, Y0 \
	VCVTDQ2PS    Y0, Y0 \
	VFMADD213PS  Y2, Y1, Y0 \
	FMA3(0, acc0, acc1, acc2) \
	VPAND        q4mask<>(SB), X3, X0 \
	VPSRLDQ      $8, X0, X0 \
	VPMOVZXBD    X0, Y0 \
	VCVTDQ2PS    Y0, Y0 \
	VFMADD213PS  Y2, Y1, Y0 \
	FMA3(32, acc0, acc1, acc2) \
	VPSRLW       $4, X3, X3 \
	VPAND        q4mask<>(SB), X3, X3 \
	VPMOVZXBD    X3, Y0 \
	VCVTDQ2PS    Y0, Y0 \
	VFMADD213PS  Y2, Y1, Y0 \
	FMA3(64, acc0, acc1, acc2) \
	VPSRLDQ      $8, X3, X3 \
	VPMOVZXBD    X3, Y0 \
	VCVTDQ2PS    Y0, Y0 \
	VFMADD213PS  Y2, Y1, Y0 \
	FMA3(96, acc0, acc1, acc2)

// func tileQ4AVX(a0, a1, a2 *float32, w *byte, ldw, n int, out *float32)
//
// n is the number of Q4_1 blocks in a row.
TEXT ·tileQ4AVX(SB), NOSPLIT, $0-56
	MOVQ a0+0(FP), SI
	MOVQ a1+8(FP), R8
	MOVQ a2+16(FP), R9
	MOVQ w+24(FP), DI
	MOVQ ldw+32(FP), DX
	MOVQ n+40(FP), CX
	TILESETUP
	TESTQ CX, CX
	JEQ   t4done

t4loop:
	Q4COL(DI, Y4, Y8, Y12)
	Q4COL(R10, Y5, Y9, Y13)
	Q4COL(R11, Y6, Y10, Y14)
	Q4COL(R12, Y7, Y11, Y15)
	ADDQ $128, SI
	ADDQ $128, R8
	ADDQ $128, R9
	ADDQ $20, DI
	ADDQ $20, R10
	ADDQ $20, R11
	ADDQ $20, R12
	DECQ CX
	JNE  t4loop

t4done:
	MOVQ out+48(FP), AX
	TILESTORE
	RET

// func dotQ8AVX512(x *float32, blk *byte, nb int) float32
//
// dotQ8AVX with 16-wide vectors: half the instructions a block.
TEXT ·dotQ8AVX512(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ nb+16(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	TESTQ CX, CX
	JEQ   z8done

z8loop:
	VPBROADCASTW (DI), Y8
	VCVTPH2PS    Y8, Z8
	VPMOVSXBD    2(DI), Z4
	VPMOVSXBD    18(DI), Z5
	VCVTDQ2PS    Z4, Z4
	VCVTDQ2PS    Z5, Z5
	VMULPS       (SI), Z4, Z4
	VFMADD231PS  64(SI), Z5, Z4
	VFMADD231PS  Z4, Z8, Z0
	ADDQ         $128, SI
	ADDQ         $34, DI
	DECQ         CX
	JEQ          z8done
	VPBROADCASTW (DI), Y9
	VCVTPH2PS    Y9, Z9
	VPMOVSXBD    2(DI), Z6
	VPMOVSXBD    18(DI), Z7
	VCVTDQ2PS    Z6, Z6
	VCVTDQ2PS    Z7, Z7
	VMULPS       (SI), Z6, Z6
	VFMADD231PS  64(SI), Z7, Z6
	VFMADD231PS  Z6, Z9, Z1
	ADDQ         $128, SI
	ADDQ         $34, DI
	DECQ         CX
	JNE          z8loop

z8done:
	VADDPS       Z1, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func dotQ4AVX512(x *float32, blk *byte, nb int) float32
//
// dotQ4AVX with 16-wide vectors: the low nibbles are one vector, the high ones the other.
TEXT ·dotQ4AVX512(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ nb+16(FP), CX
	VMOVDQU q4mask<>(SB), X15
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	TESTQ CX, CX
	JEQ   z4done

z4loop:
	VPBROADCASTW (DI), Y8
	VCVTPH2PS    Y8, Z8
	VPBROADCASTW 2(DI), Y9
	VCVTPH2PS    Y9, Z9
	VMOVDQU      4(DI), X10
	VPAND        X15, X10, X11
	VPSRLW       $4, X10, X10
	VPAND        X15, X10, X10
	VPMOVZXBD    X11, Z4
	VPMOVZXBD    X10, Z5
	VCVTDQ2PS    Z4, Z4
	VCVTDQ2PS    Z5, Z5
	VFMADD213PS  Z9, Z8, Z4
	VFMADD213PS  Z9, Z8, Z5
	VFMADD231PS  (SI), Z4, Z0
	VFMADD231PS  64(SI), Z5, Z1
	ADDQ         $128, SI
	ADDQ         $20, DI
	DECQ         CX
	JNE          z4loop

z4done:
	VADDPS       Z1, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
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

// func max32AVX(x *float32, n int) (m float32, nan bool)
//
// Four accumulators of eight lanes, 32 floats a step; unordered compares of each pair of
// loads collect the NaN lanes on the side, since VMAXPS does not carry a NaN forward.
TEXT ·max32AVX(SB), NOSPLIT, $0-21
	MOVQ    x+0(FP), SI
	MOVQ    n+8(FP), CX
	VMOVUPS (SI), Y0
	VMOVAPS Y0, Y1
	VMOVAPS Y0, Y2
	VMOVAPS Y0, Y3
	VXORPS  Y8, Y8, Y8

mloop:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VMAXPS  Y4, Y0, Y0
	VMAXPS  Y5, Y1, Y1
	VMAXPS  Y6, Y2, Y2
	VMAXPS  Y7, Y3, Y3
	VCMPPS  $3, Y5, Y4, Y9
	VCMPPS  $3, Y7, Y6, Y10
	VORPS   Y9, Y8, Y8
	VORPS   Y10, Y8, Y8
	ADDQ    $128, SI
	SUBQ    $32, CX
	JNE     mloop

	VMAXPS       Y1, Y0, Y0
	VMAXPS       Y3, Y2, Y2
	VMAXPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VMOVHLPS     X0, X0, X1
	VMAXPS       X1, X0, X0
	VMOVSHDUP    X0, X1
	VMAXSS       X1, X0, X0
	VMOVMSKPS    Y8, AX
	VZEROUPPER
	MOVSS        X0, m+16(FP)
	TESTL        AX, AX
	SETNE        nan+20(FP)
	RET

// func exp32AVX512(dst, src *float32, n int, scale, bias float32)
//
// exp32AVX with 16 lanes (n a positive multiple of 16): the same operations in the same
// order on every lane, the constants broadcast from expc's first lanes, VRNDSCALEPS in
// place of VROUNDPS (the same rounding down), so each result is exp32AVX's, bit for bit.
TEXT ·exp32AVX512(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS scale+24(FP), Z14
	VBROADCASTSS bias+28(FP), Z15

zeloop:
	VMOVUPS           (SI), Z0
	VMULPS            Z14, Z0, Z0
	VADDPS            Z15, Z0, Z0
	VMINPS.BCST       expc<>+0(SB), Z0, Z0
	VMAXPS.BCST       expc<>+32(SB), Z0, Z0
	VBROADCASTSS      expc<>+64(SB), Z1
	VFMADD213PS.BCST  expc<>+96(SB), Z0, Z1
	VRNDSCALEPS       $1, Z1, Z1
	VFNMADD231PS.BCST expc<>+128(SB), Z1, Z0
	VFNMADD231PS.BCST expc<>+160(SB), Z1, Z0
	VMULPS            Z0, Z0, Z2
	VBROADCASTSS      expc<>+192(SB), Z3
	VFMADD213PS.BCST  expc<>+224(SB), Z0, Z3
	VFMADD213PS.BCST  expc<>+256(SB), Z0, Z3
	VFMADD213PS.BCST  expc<>+288(SB), Z0, Z3
	VFMADD213PS.BCST  expc<>+320(SB), Z0, Z3
	VFMADD213PS.BCST  expc<>+352(SB), Z0, Z3
	VFMADD213PS       Z0, Z2, Z3
	VADDPS.BCST       expc<>+384(SB), Z3, Z3
	VCVTPS2DQ         Z1, Z4
	VPADDD.BCST       expc<>+416(SB), Z4, Z4
	VPSLLD            $23, Z4, Z4
	VMULPS            Z4, Z3, Z3
	VMOVUPS           Z3, (DI)
	ADDQ              $64, SI
	ADDQ              $64, DI
	SUBQ              $16, CX
	JNE               zeloop
	VZEROUPPER
	RET

// func subMul32AVX(x, p *float32, n int, d, s float32)
//
// x[i] = p[i]·(x[i] − d)·s for n elements (a positive multiple of 8), each operation
// rounded on its own as the Go expression's are.
TEXT ·subMul32AVX(SB), NOSPLIT, $0-32
	MOVQ         x+0(FP), DI
	MOVQ         p+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS d+24(FP), Y14
	VBROADCASTSS s+28(FP), Y15

smloop:
	VMOVUPS (DI), Y0
	VSUBPS  Y14, Y0, Y0
	VMULPS  (SI), Y0, Y0
	VMULPS  Y15, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	SUBQ    $8, CX
	JNE     smloop
	VZEROUPPER
	RET

// func swiglu32AVX(a, gate, up, e *float32, n int)
//
// a[i] = g[i]/(1 + e[i])·u[i] for n elements (a positive multiple of 8), each operation
// rounded on its own as the Go expression's are.
TEXT ·swiglu32AVX(SB), NOSPLIT, $0-40
	MOVQ         a+0(FP), DI
	MOVQ         gate+8(FP), SI
	MOVQ         up+16(FP), DX
	MOVQ         e+24(FP), BX
	MOVQ         n+32(FP), CX
	MOVL         $0x3f800000, AX
	MOVQ         AX, X15
	VBROADCASTSS X15, Y15

sgloop:
	VADDPS  (BX), Y15, Y0 // 1 + e
	VMOVUPS (SI), Y1
	VDIVPS  Y0, Y1, Y1    // g / (1 + e)
	VMULPS  (DX), Y1, Y1  // · u
	VMOVUPS Y1, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, BX
	SUBQ    $8, CX
	JNE     sgloop
	VZEROUPPER
	RET

// func swigluBack32AVX(dg, du, da, gate, up, e *float32, n int)
//
// With σ = 1/(1 + e[i]): du[i] = da[i]·g[i]·σ, dg[i] = da[i]·u[i]·σ·(1 + g[i]·(1 − σ)), for
// n elements (a positive multiple of 8), each operation rounded on its own, left to right.
TEXT ·swigluBack32AVX(SB), NOSPLIT, $0-56
	MOVQ         dg+0(FP), DI
	MOVQ         du+8(FP), R8
	MOVQ         da+16(FP), SI
	MOVQ         gate+24(FP), DX
	MOVQ         up+32(FP), R9
	MOVQ         e+40(FP), BX
	MOVQ         n+48(FP), CX
	MOVL         $0x3f800000, AX
	MOVQ         AX, X15
	VBROADCASTSS X15, Y15

sgbloop:
	VADDPS  (BX), Y15, Y0 // 1 + e
	VDIVPS  Y0, Y15, Y0   // σ = 1/(1 + e)
	VMOVUPS (SI), Y1      // d
	VMOVUPS (DX), Y2      // g
	VMULPS  Y2, Y1, Y3    // d·g
	VMULPS  Y0, Y3, Y3    // ·σ
	VMOVUPS Y3, (R8)
	VMULPS  (R9), Y1, Y4  // d·u
	VMULPS  Y0, Y4, Y4    // ·σ
	VSUBPS  Y0, Y15, Y5   // 1 − σ
	VMULPS  Y5, Y2, Y5    // g·(1 − σ)
	VADDPS  Y5, Y15, Y5   // 1 + g·(1 − σ)
	VMULPS  Y5, Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ    $32, DI
	ADDQ    $32, R8
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, R9
	ADDQ    $32, BX
	SUBQ    $8, CX
	JNE     sgbloop
	VZEROUPPER
	RET
