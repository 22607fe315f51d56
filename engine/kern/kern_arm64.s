//go:build arm64 && !purego

#include "textflag.h"

// NEON (Advanced SIMD) versions of kern_amd64.s's kernels, with the same Go signatures
// (declared in kern_arm64.go) and the same data layouts. All are leaf functions that use
// only R0-R9 and the vector registers, which Go's ABI0 leaves to the callee.
//
// Go's arm64 assembler has no mnemonic for these Advanced SIMD forms, so they are
// written as WORDs (encodings from the Arm ARM, checked with go tool objdump -gnu):
//
// FMLAE(d, n, m, i): FMLA Vd.4S, Vn.4S, Vm.S[i] (d += n·m[i], by element)
#define FMLAE(d, n, m, i) WORD $(0x4F801000 | (((i)&1)<<21) | ((m)<<16) | (((i)>>1)<<11) | ((n)<<5) | (d))
// FADD4(d, n, m): FADD Vd.4S, Vn.4S, Vm.4S
#define FADD4(d, n, m) WORD $(0x4E20D400 | ((m)<<16) | ((n)<<5) | (d))
// FADDP4(d, n, m): FADDP Vd.4S, Vn.4S, Vm.4S (pairwise)
#define FADDP4(d, n, m) WORD $(0x6E20D400 | ((m)<<16) | ((n)<<5) | (d))
// FADDPS(d, n): FADDP Sd, Vn.2S (lane 0 + lane 1)
#define FADDPS(d, n) WORD $(0x7E30D800 | ((n)<<5) | (d))

// ROW4(d, m, i) adds B's 16 floats (V0-V3) times A's element m[i] into the row
// accumulators Vd..Vd+3.
#define ROW4(d, m, i) \
	FMLAE(d, 0, m, i) \
	FMLAE((d)+1, 1, m, i) \
	FMLAE((d)+2, 2, m, i) \
	FMLAE((d)+3, 3, m, i)

// REDUCE leaves V16+V17+V18+V19, summed across lanes, in F16.
#define REDUCE \
	FADD4(16, 16, 17) \
	FADD4(18, 18, 19) \
	FADD4(16, 16, 18) \
	FADDP4(16, 16, 16) \
	FADDPS(16, 16)

// func sgemm6x16(k int, a, b, c *float32, ldc int, load bool)
//
// C[6×16] (+)= Apanel[k×6]·Bpanel[k×16], the panels packed as for the AVX2 kernel: each
// step of k reads six consecutive floats of A and sixteen of B. The tile lives in 24
// accumulators V8-V31 (row r in V8+4r..V11+4r); each step loads B into V0-V3 and A into
// V4 (rows 0-3) and V5 (rows 4-5) and multiplies by element, so A needs no broadcasts.
// With load set the accumulators start from C, which adds the product into it.
TEXT ·sgemm6x16(SB), NOSPLIT, $0-41
	MOVD  k+0(FP), R0
	MOVD  a+8(FP), R1
	MOVD  b+16(FP), R2
	MOVD  c+24(FP), R3
	MOVD  ldc+32(FP), R4
	LSL   $2, R4
	MOVBU load+40(FP), R5
	CBZ   R5, zero
	MOVD  R3, R6
	VLD1  (R6), [V8.S4, V9.S4, V10.S4, V11.S4]
	ADD   R4, R6
	VLD1  (R6), [V12.S4, V13.S4, V14.S4, V15.S4]
	ADD   R4, R6
	VLD1  (R6), [V16.S4, V17.S4, V18.S4, V19.S4]
	ADD   R4, R6
	VLD1  (R6), [V20.S4, V21.S4, V22.S4, V23.S4]
	ADD   R4, R6
	VLD1  (R6), [V24.S4, V25.S4, V26.S4, V27.S4]
	ADD   R4, R6
	VLD1  (R6), [V28.S4, V29.S4, V30.S4, V31.S4]
	B     steps

zero:
	VEOR V8.B16, V8.B16, V8.B16
	VEOR V9.B16, V9.B16, V9.B16
	VEOR V10.B16, V10.B16, V10.B16
	VEOR V11.B16, V11.B16, V11.B16
	VEOR V12.B16, V12.B16, V12.B16
	VEOR V13.B16, V13.B16, V13.B16
	VEOR V14.B16, V14.B16, V14.B16
	VEOR V15.B16, V15.B16, V15.B16
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16
	VEOR V20.B16, V20.B16, V20.B16
	VEOR V21.B16, V21.B16, V21.B16
	VEOR V22.B16, V22.B16, V22.B16
	VEOR V23.B16, V23.B16, V23.B16
	VEOR V24.B16, V24.B16, V24.B16
	VEOR V25.B16, V25.B16, V25.B16
	VEOR V26.B16, V26.B16, V26.B16
	VEOR V27.B16, V27.B16, V27.B16
	VEOR V28.B16, V28.B16, V28.B16
	VEOR V29.B16, V29.B16, V29.B16
	VEOR V30.B16, V30.B16, V30.B16
	VEOR V31.B16, V31.B16, V31.B16

steps:
	CBZ R0, store

loop:
	VLD1.P 64(R2), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1.P 16(R1), [V4.S4]
	VLD1.P 8(R1), [V5.S2]
	ROW4(8, 4, 0)
	ROW4(12, 4, 1)
	ROW4(16, 4, 2)
	ROW4(20, 4, 3)
	ROW4(24, 5, 0)
	ROW4(28, 5, 1)
	SUBS   $1, R0
	BNE    loop

store:
	VST1 [V8.S4, V9.S4, V10.S4, V11.S4], (R3)
	ADD  R4, R3
	VST1 [V12.S4, V13.S4, V14.S4, V15.S4], (R3)
	ADD  R4, R3
	VST1 [V16.S4, V17.S4, V18.S4, V19.S4], (R3)
	ADD  R4, R3
	VST1 [V20.S4, V21.S4, V22.S4, V23.S4], (R3)
	ADD  R4, R3
	VST1 [V24.S4, V25.S4, V26.S4, V27.S4], (R3)
	ADD  R4, R3
	VST1 [V28.S4, V29.S4, V30.S4, V31.S4], (R3)
	RET

// func dot32AVX(a, b []float32) float32
//
// Four accumulators over 16 floats a step, then 4 a step into the first, then the lanes
// summed and the last len%4 products added one at a time.
TEXT ·dot32AVX(SB), NOSPLIT, $0-52
	MOVD a_base+0(FP), R0
	MOVD a_len+8(FP), R2
	MOVD b_base+24(FP), R1
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16

dot16:
	CMP    $16, R2
	BLT    dot4
	VLD1.P 64(R0), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1.P 64(R1), [V4.S4, V5.S4, V6.S4, V7.S4]
	VFMLA  V0.S4, V4.S4, V16.S4
	VFMLA  V1.S4, V5.S4, V17.S4
	VFMLA  V2.S4, V6.S4, V18.S4
	VFMLA  V3.S4, V7.S4, V19.S4
	SUB    $16, R2
	B      dot16

dot4:
	CMP    $4, R2
	BLT    dotsum
	VLD1.P 16(R0), [V0.S4]
	VLD1.P 16(R1), [V4.S4]
	VFMLA  V0.S4, V4.S4, V16.S4
	SUB    $4, R2
	B      dot4

dotsum:
	REDUCE

dot1:
	CBZ     R2, dotdone
	FMOVS.P 4(R0), F0
	FMOVS.P 4(R1), F1
	FMADDS  F0, F16, F1, F16
	SUB     $1, R2
	B       dot1

dotdone:
	FMOVS F16, ret+48(FP)
	RET

// func axpy32AVX(alpha float32, x, y []float32)
TEXT ·axpy32AVX(SB), NOSPLIT, $0-56
	FMOVS alpha+0(FP), F0
	VDUP  V0.S[0], V0.S4
	MOVD  x_base+8(FP), R0
	MOVD  x_len+16(FP), R2
	MOVD  y_base+32(FP), R1

axpy16:
	CMP    $16, R2
	BLT    axpy4
	VLD1.P 64(R0), [V1.S4, V2.S4, V3.S4, V4.S4]
	VLD1   (R1), [V5.S4, V6.S4, V7.S4, V8.S4]
	VFMLA  V0.S4, V1.S4, V5.S4
	VFMLA  V0.S4, V2.S4, V6.S4
	VFMLA  V0.S4, V3.S4, V7.S4
	VFMLA  V0.S4, V4.S4, V8.S4
	VST1.P [V5.S4, V6.S4, V7.S4, V8.S4], 64(R1)
	SUB    $16, R2
	B      axpy16

axpy4:
	CMP    $4, R2
	BLT    axpy1
	VLD1.P 16(R0), [V1.S4]
	VLD1   (R1), [V5.S4]
	VFMLA  V0.S4, V1.S4, V5.S4
	VST1.P [V5.S4], 16(R1)
	SUB    $4, R2
	B      axpy4

axpy1:
	CBZ     R2, axpydone
	FMOVS.P 4(R0), F1
	FMOVS   (R1), F2
	FMADDS  F0, F2, F1, F2
	FMOVS.P F2, 4(R1)
	SUB     $1, R2
	B       axpy1

axpydone:
	RET

// func dotBF16AVX(x *float32, w *uint16, n int) float32
//
// n a multiple of 8. A bfloat16 is the top half of its float32, so ZIP1/ZIP2 of the
// weights with a zero vector (zero in the low halfword of each lane) widens them.
TEXT ·dotBF16AVX(SB), NOSPLIT, $0-28
	MOVD x+0(FP), R0
	MOVD w+8(FP), R1
	MOVD n+16(FP), R2
	VEOR V31.B16, V31.B16, V31.B16
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16

bf16:
	CMP    $16, R2
	BLT    bf8
	VLD1.P 32(R1), [V0.H8, V1.H8]
	VLD1.P 64(R0), [V4.S4, V5.S4, V6.S4, V7.S4]
	VZIP1  V0.H8, V31.H8, V2.H8
	VZIP2  V0.H8, V31.H8, V3.H8
	VFMLA  V2.S4, V4.S4, V16.S4
	VFMLA  V3.S4, V5.S4, V17.S4
	VZIP1  V1.H8, V31.H8, V2.H8
	VZIP2  V1.H8, V31.H8, V3.H8
	VFMLA  V2.S4, V6.S4, V18.S4
	VFMLA  V3.S4, V7.S4, V19.S4
	SUB    $16, R2
	B      bf16

bf8:
	CMP    $8, R2
	BLT    bfsum
	VLD1.P 16(R1), [V0.H8]
	VLD1.P 32(R0), [V4.S4, V5.S4]
	VZIP1  V0.H8, V31.H8, V2.H8
	VZIP2  V0.H8, V31.H8, V3.H8
	VFMLA  V2.S4, V4.S4, V16.S4
	VFMLA  V3.S4, V5.S4, V17.S4
	SUB    $8, R2
	B      bf8

bfsum:
	REDUCE
	FMOVS F16, ret+24(FP)
	RET

// func widenBF16AVX(dst *float32, src *uint16, n int)
//
// n a multiple of 8 (the caller passes multiples of 16).
TEXT ·widenBF16AVX(SB), NOSPLIT, $0-24
	MOVD dst+0(FP), R0
	MOVD src+8(FP), R1
	MOVD n+16(FP), R2
	VEOR V31.B16, V31.B16, V31.B16

widen8:
	CMP    $8, R2
	BLT    widendone
	VLD1.P 16(R1), [V0.H8]
	VZIP1  V0.H8, V31.H8, V2.H8
	VZIP2  V0.H8, V31.H8, V3.H8
	VST1.P [V2.S4, V3.S4], 32(R0)
	SUB    $8, R2
	B      widen8

widendone:
	RET

// More encodings for the block formats:
// SXTL(d, n) / SXTL2(d, n): SSHLL{2} Vd.8H, Vn.8B/16B, #0 (sign-extend bytes, low/high)
#define SXTL8(d, n) WORD $(0x0F08A400 | ((n)<<5) | (d))
#define SXTL8H(d, n) WORD $(0x4F08A400 | ((n)<<5) | (d))
// SXTL16(d, n) / SXTL16H(d, n): SSHLL{2} Vd.4S, Vn.4H/8H, #0
#define SXTL16(d, n) WORD $(0x0F10A400 | ((n)<<5) | (d))
#define SXTL16H(d, n) WORD $(0x4F10A400 | ((n)<<5) | (d))
// SCVTF4(d, n): SCVTF Vd.4S, Vn.4S; UCVTF4(d, n): UCVTF Vd.4S, Vn.4S
#define SCVTF4(d, n) WORD $(0x4E21D800 | ((n)<<5) | (d))
#define UCVTF4(d, n) WORD $(0x6E21D800 | ((n)<<5) | (d))
// FCVTSH(d, n): FCVT Sd, Hn (half to single precision)
#define FCVTSH(d, n) WORD $(0x1EE24000 | ((n)<<5) | (d))

// Q8I2F(v, d) turns the eight int16 in Vv into floats in Vd and Vd+1.
#define Q8I2F(v, d) \
	SXTL16(d, v) \
	SXTL16H((d)+1, v) \
	SCVTF4(d, d) \
	SCVTF4((d)+1, (d)+1)

// func dotQ8AVX(x *float32, blk *byte, nb int) float32
//
// Per Q8_0 block (a half-precision scale, then 32 int8): the int8 are sign-extended to
// int32 and converted (V6-V13), multiplied into two accumulators with x (V16-V23), and the
// block's sum, times its scale widened by FCVT, is added into V30.
TEXT ·dotQ8AVX(SB), NOSPLIT, $0-28
	MOVD x+0(FP), R0
	MOVD blk+8(FP), R1
	MOVD nb+16(FP), R2
	VEOR V30.B16, V30.B16, V30.B16
	CBZ  R2, q8done

q8block:
	MOVHU.P 2(R1), R3
	VLD1.P  32(R1), [V0.B16, V1.B16]
	VLD1.P  64(R0), [V16.S4, V17.S4, V18.S4, V19.S4]
	VLD1.P  64(R0), [V20.S4, V21.S4, V22.S4, V23.S4]
	SXTL8(2, 0)
	SXTL8H(3, 0)
	SXTL8(4, 1)
	SXTL8H(5, 1)
	Q8I2F(2, 6)
	Q8I2F(3, 8)
	Q8I2F(4, 10)
	Q8I2F(5, 12)
	VEOR    V24.B16, V24.B16, V24.B16
	VEOR    V25.B16, V25.B16, V25.B16
	VFMLA   V6.S4, V16.S4, V24.S4
	VFMLA   V7.S4, V17.S4, V25.S4
	VFMLA   V8.S4, V18.S4, V24.S4
	VFMLA   V9.S4, V19.S4, V25.S4
	VFMLA   V10.S4, V20.S4, V24.S4
	VFMLA   V11.S4, V21.S4, V25.S4
	VFMLA   V12.S4, V22.S4, V24.S4
	VFMLA   V13.S4, V23.S4, V25.S4
	FADD4(24, 24, 25)
	FMOVS   R3, F26
	FCVTSH(26, 26)
	FMLAE(30, 24, 26, 0)
	SUBS    $1, R2
	BNE     q8block

q8done:
	FADDP4(30, 30, 30)
	FADDPS(30, 30)
	FMOVS F30, ret+24(FP)
	RET


// func dotQ4AVX(x *float32, blk *byte, nb int) float32
//
// Per Q4_1 block (half-precision d and m, then 16 bytes: weight j in the low nibble of
// byte j, weight j+16 in the high one): Σ d·q·x + m·x, with Σ q·x in V24/V25 and Σ x in
// V28/V29, each scaled into V30 by element.
TEXT ·dotQ4AVX(SB), NOSPLIT, $0-28
	MOVD  x+0(FP), R0
	MOVD  blk+8(FP), R1
	MOVD  nb+16(FP), R2
	VEOR  V30.B16, V30.B16, V30.B16
	VMOVI $15, V31.B16
	CBZ   R2, q4done

q4block:
	MOVHU.P 2(R1), R3
	MOVHU.P 2(R1), R4
	VLD1.P  16(R1), [V0.B16]
	VLD1.P  64(R0), [V16.S4, V17.S4, V18.S4, V19.S4]
	VLD1.P  64(R0), [V20.S4, V21.S4, V22.S4, V23.S4]
	VAND    V31.B16, V0.B16, V1.B16
	VUSHR   $4, V0.B16, V2.B16
	VUXTL   V1.B8, V3.H8
	VUXTL2  V1.B16, V4.H8
	VUXTL   V2.B8, V5.H8
	VUXTL2  V2.B16, V6.H8
	VUXTL   V3.H4, V8.S4
	VUXTL2  V3.H8, V9.S4
	VUXTL   V4.H4, V10.S4
	VUXTL2  V4.H8, V11.S4
	VUXTL   V5.H4, V12.S4
	VUXTL2  V5.H8, V13.S4
	VUXTL   V6.H4, V14.S4
	VUXTL2  V6.H8, V15.S4
	UCVTF4(8, 8)
	UCVTF4(9, 9)
	UCVTF4(10, 10)
	UCVTF4(11, 11)
	UCVTF4(12, 12)
	UCVTF4(13, 13)
	UCVTF4(14, 14)
	UCVTF4(15, 15)
	VEOR    V24.B16, V24.B16, V24.B16
	VEOR    V25.B16, V25.B16, V25.B16
	VFMLA   V8.S4, V16.S4, V24.S4
	VFMLA   V9.S4, V17.S4, V25.S4
	VFMLA   V10.S4, V18.S4, V24.S4
	VFMLA   V11.S4, V19.S4, V25.S4
	VFMLA   V12.S4, V20.S4, V24.S4
	VFMLA   V13.S4, V21.S4, V25.S4
	VFMLA   V14.S4, V22.S4, V24.S4
	VFMLA   V15.S4, V23.S4, V25.S4
	FADD4(24, 24, 25)
	FADD4(16, 16, 17)
	FADD4(18, 18, 19)
	FADD4(20, 20, 21)
	FADD4(22, 22, 23)
	FADD4(16, 16, 18)
	FADD4(20, 20, 22)
	FADD4(16, 16, 20)
	FMOVS   R3, F26
	FCVTSH(26, 26)
	FMOVS   R4, F27
	FCVTSH(27, 27)
	FMLAE(30, 24, 26, 0)
	FMLAE(30, 16, 27, 0)
	SUBS    $1, R2
	BNE     q4block

q4done:
	FADDP4(30, 30, 30)
	FADDPS(30, 30)
	FMOVS F30, ret+24(FP)
	RET

// For the exponential:
// FMIN4(d, n, m) / FMAX4(d, n, m): FMIN/FMAX Vd.4S, Vn.4S, Vm.4S
#define FMIN4(d, n, m) WORD $(0x4EA0F400 | ((m)<<16) | ((n)<<5) | (d))
#define FMAX4(d, n, m) WORD $(0x4E20F400 | ((m)<<16) | ((n)<<5) | (d))
// FMUL4(d, n, m): FMUL Vd.4S, Vn.4S, Vm.4S
#define FMUL4(d, n, m) WORD $(0x6E20DC00 | ((m)<<16) | ((n)<<5) | (d))
// FRINTM4(d, n): FRINTM Vd.4S, Vn.4S (round toward minus infinity: floor)
#define FRINTM4(d, n) WORD $(0x4E219800 | ((n)<<5) | (d))
// FCVTZS4(d, n): FCVTZS Vd.4S, Vn.4S (to int32, toward zero; exact on integers)
#define FCVTZS4(d, n) WORD $(0x4EA1B800 | ((n)<<5) | (d))

// func exp32AVX(dst, src *float32, n int, scale, bias float32)
//
// dst[i] = exp(src[i]·scale + bias) for n (a multiple of 4) elements, Cephes' expf as
// exp32Go: x = n·ln2 + r with |r| ≤ ln2/2, e^r by a degree-7 polynomial, 2^n through the
// exponent bits. Constants live in V19-V31 for the whole loop.
TEXT ·exp32AVX(SB), NOSPLIT, $0-32
	MOVD  dst+0(FP), R0
	MOVD  src+8(FP), R1
	MOVD  n+16(FP), R2
	FMOVS scale+24(FP), F17
	VDUP  V17.S[0], V17.S4
	FMOVS bias+28(FP), F18
	VDUP  V18.S[0], V18.S4
	MOVW  $0x0000007f, R4
	VDUP  R4, V19.S4
	MOVW  $0x42b0c0a5, R4
	VDUP  R4, V20.S4
	MOVW  $0xc2b0c0a5, R4
	VDUP  R4, V21.S4
	MOVW  $0x3fb8aa3b, R4
	VDUP  R4, V22.S4
	MOVW  $0x3f000000, R4
	VDUP  R4, V23.S4
	MOVW  $0x3f318000, R4
	VDUP  R4, V24.S4
	MOVW  $0xb95e8083, R4
	VDUP  R4, V25.S4
	MOVW  $0x39506967, R4
	VDUP  R4, V26.S4
	MOVW  $0x3ab743ce, R4
	VDUP  R4, V27.S4
	MOVW  $0x3c088908, R4
	VDUP  R4, V28.S4
	MOVW  $0x3d2aa9c1, R4
	VDUP  R4, V29.S4
	MOVW  $0x3e2aaaaa, R4
	VDUP  R4, V30.S4
	MOVW  $0x3f800000, R4
	VDUP  R4, V31.S4

exp4:
	CMP    $4, R2
	BLT    expdone
	VLD1.P 16(R1), [V0.S4]
	VMOV   V18.B16, V1.B16
	VFMLA  V0.S4, V17.S4, V1.S4  // x = src·scale + bias
	FMIN4(1, 1, 20)
	FMAX4(1, 1, 21)
	VMOV   V23.B16, V2.B16
	VFMLA  V1.S4, V22.S4, V2.S4  // x·log2(e) + 0.5
	FRINTM4(2, 2)                // fx
	VFMLS  V2.S4, V24.S4, V1.S4  // x -= fx·C1
	VFMLS  V2.S4, V25.S4, V1.S4  // x -= fx·C2
	FMUL4(3, 1, 1)               // z = x²
	VMOV   V26.B16, V4.B16
	VMOV   V27.B16, V5.B16       // y = y·x + c
	VFMLA  V4.S4, V1.S4, V5.S4
	VMOV   V5.B16, V4.B16
	VMOV   V28.B16, V5.B16       // y = y·x + c
	VFMLA  V4.S4, V1.S4, V5.S4
	VMOV   V5.B16, V4.B16
	VMOV   V29.B16, V5.B16       // y = y·x + c
	VFMLA  V4.S4, V1.S4, V5.S4
	VMOV   V5.B16, V4.B16
	VMOV   V30.B16, V5.B16       // y = y·x + c
	VFMLA  V4.S4, V1.S4, V5.S4
	VMOV   V5.B16, V4.B16
	VMOV   V23.B16, V5.B16       // y = y·x + c
	VFMLA  V4.S4, V1.S4, V5.S4
	VMOV   V5.B16, V4.B16
	VMOV   V1.B16, V5.B16
	VFMLA  V4.S4, V3.S4, V5.S4   // y·z + x
	FADD4(5, 5, 31)              // + 1
	FCVTZS4(6, 2)
	VADD   V19.S4, V6.S4, V6.S4
	VSHL   $23, V6.S4, V6.S4     // 2^fx
	FMUL4(7, 5, 6)
	VST1.P [V7.S4], 16(R0)
	SUB    $4, R2
	B      exp4

expdone:
	RET

// FMULE(d, n, m, i): FMUL Vd.4S, Vn.4S, Vm.S[i] (by element)
#define FMULE(d, n, m, i) WORD $(0x4F809000 | (((i)&1)<<21) | ((m)<<16) | (((i)>>1)<<11) | ((n)<<5) | (d))

// func widenQ8AVX(dst *float32, blk *byte, nb int)
//
// The 32 weights of each Q8_0 block, d·q, exactly as Frozen.Row computes them.
TEXT ·widenQ8AVX(SB), NOSPLIT, $0-24
	MOVD dst+0(FP), R0
	MOVD blk+8(FP), R1
	MOVD nb+16(FP), R2
	CBZ  R2, w8done

w8block:
	MOVHU.P 2(R1), R3
	VLD1.P  32(R1), [V0.B16, V1.B16]
	SXTL8(2, 0)
	SXTL8H(3, 0)
	SXTL8(4, 1)
	SXTL8H(5, 1)
	Q8I2F(2, 6)
	Q8I2F(3, 8)
	Q8I2F(4, 10)
	Q8I2F(5, 12)
	FMOVS   R3, F26
	FCVTSH(26, 26)
	FMULE(6, 6, 26, 0)
	FMULE(7, 7, 26, 0)
	FMULE(8, 8, 26, 0)
	FMULE(9, 9, 26, 0)
	FMULE(10, 10, 26, 0)
	FMULE(11, 11, 26, 0)
	FMULE(12, 12, 26, 0)
	FMULE(13, 13, 26, 0)
	VST1.P  [V6.S4, V7.S4, V8.S4, V9.S4], 64(R0)
	VST1.P  [V10.S4, V11.S4, V12.S4, V13.S4], 64(R0)
	SUBS    $1, R2
	BNE     w8block

w8done:
	RET

// func widenQ4AVX(dst *float32, blk *byte, nb int)
//
// The 32 weights of each Q4_1 block, d·q + m with one rounding (FMLA; the Go compiler
// fuses Frozen.Row's d*q + m on arm64 too, and the widen must match it bit for bit).
TEXT ·widenQ4AVX(SB), NOSPLIT, $0-24
	MOVD  dst+0(FP), R0
	MOVD  blk+8(FP), R1
	MOVD  nb+16(FP), R2
	VMOVI $15, V31.B16
	CBZ   R2, w4done

w4block:
	MOVHU.P 2(R1), R3
	MOVHU.P 2(R1), R4
	VLD1.P  16(R1), [V0.B16]
	VAND    V31.B16, V0.B16, V1.B16
	VUSHR   $4, V0.B16, V2.B16
	VUXTL   V1.B8, V3.H8
	VUXTL2  V1.B16, V4.H8
	VUXTL   V2.B8, V5.H8
	VUXTL2  V2.B16, V6.H8
	VUXTL   V3.H4, V8.S4
	VUXTL2  V3.H8, V9.S4
	VUXTL   V4.H4, V10.S4
	VUXTL2  V4.H8, V11.S4
	VUXTL   V5.H4, V12.S4
	VUXTL2  V5.H8, V13.S4
	VUXTL   V6.H4, V14.S4
	VUXTL2  V6.H8, V15.S4
	UCVTF4(8, 8)
	UCVTF4(9, 9)
	UCVTF4(10, 10)
	UCVTF4(11, 11)
	UCVTF4(12, 12)
	UCVTF4(13, 13)
	UCVTF4(14, 14)
	UCVTF4(15, 15)
	FMOVS   R3, F26
	FCVTSH(26, 26)
	FMOVS   R4, F27
	FCVTSH(27, 27)
	VDUP    V27.S[0], V16.S4
	VDUP    V27.S[0], V17.S4
	VDUP    V27.S[0], V18.S4
	VDUP    V27.S[0], V19.S4
	VDUP    V27.S[0], V20.S4
	VDUP    V27.S[0], V21.S4
	VDUP    V27.S[0], V22.S4
	VDUP    V27.S[0], V23.S4
	FMLAE(16, 8, 26, 0)
	FMLAE(17, 9, 26, 0)
	FMLAE(18, 10, 26, 0)
	FMLAE(19, 11, 26, 0)
	FMLAE(20, 12, 26, 0)
	FMLAE(21, 13, 26, 0)
	FMLAE(22, 14, 26, 0)
	FMLAE(23, 15, 26, 0)
	VST1.P  [V16.S4, V17.S4, V18.S4, V19.S4], 64(R0)
	VST1.P  [V20.S4, V21.S4, V22.S4, V23.S4], 64(R0)
	SUBS    $1, R2
	BNE     w4block

w4done:
	RET

// func tileBF16AVX(a0, a1, a2 *float32, w *uint16, ldw, n int, out *float32)
//
// The 3×4 tile out[4r+j] = Σ_p a_r[p]·w_j[p] over n (a multiple of 4): each step loads
// four floats of each row of A (V0-V2) and four bfloat16 of each row of W, widened by ZIP1
// with zero (V3-V6), into twelve accumulators V8-V19 (row r, column j in V8+4r+j). Three
// pairwise adds per row then leave its four sums in order in one vector.
TEXT ·tileBF16AVX(SB), NOSPLIT, $0-56
	MOVD a0+0(FP), R0
	MOVD a1+8(FP), R1
	MOVD a2+16(FP), R2
	MOVD w+24(FP), R3
	MOVD ldw+32(FP), R9
	MOVD n+40(FP), R7
	MOVD out+48(FP), R8
	ADD  R9, R3, R4
	ADD  R9, R4, R5
	ADD  R9, R5, R6
	VEOR V31.B16, V31.B16, V31.B16
	VEOR V8.B16, V8.B16, V8.B16
	VEOR V9.B16, V9.B16, V9.B16
	VEOR V10.B16, V10.B16, V10.B16
	VEOR V11.B16, V11.B16, V11.B16
	VEOR V12.B16, V12.B16, V12.B16
	VEOR V13.B16, V13.B16, V13.B16
	VEOR V14.B16, V14.B16, V14.B16
	VEOR V15.B16, V15.B16, V15.B16
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16

tb4:
	CMP     $4, R7
	BLT     tbsum
	VLD1.P  16(R0), [V0.S4]
	VLD1.P  16(R1), [V1.S4]
	VLD1.P  16(R2), [V2.S4]
	FMOVD.P 8(R3), F3
	FMOVD.P 8(R4), F4
	FMOVD.P 8(R5), F5
	FMOVD.P 8(R6), F6
	VZIP1   V3.H8, V31.H8, V3.H8
	VZIP1   V4.H8, V31.H8, V4.H8
	VZIP1   V5.H8, V31.H8, V5.H8
	VZIP1   V6.H8, V31.H8, V6.H8
	VFMLA   V0.S4, V3.S4, V8.S4
	VFMLA   V0.S4, V4.S4, V9.S4
	VFMLA   V0.S4, V5.S4, V10.S4
	VFMLA   V0.S4, V6.S4, V11.S4
	VFMLA   V1.S4, V3.S4, V12.S4
	VFMLA   V1.S4, V4.S4, V13.S4
	VFMLA   V1.S4, V5.S4, V14.S4
	VFMLA   V1.S4, V6.S4, V15.S4
	VFMLA   V2.S4, V3.S4, V16.S4
	VFMLA   V2.S4, V4.S4, V17.S4
	VFMLA   V2.S4, V5.S4, V18.S4
	VFMLA   V2.S4, V6.S4, V19.S4
	SUB     $4, R7
	B       tb4

tbsum:
	FADDP4(20, 8, 9)
	FADDP4(21, 10, 11)
	FADDP4(20, 20, 21)
	FADDP4(22, 12, 13)
	FADDP4(23, 14, 15)
	FADDP4(22, 22, 23)
	FADDP4(24, 16, 17)
	FADDP4(25, 18, 19)
	FADDP4(24, 24, 25)
	VST1    [V20.S4], (R8)
	ADD     $16, R8
	VST1    [V22.S4], (R8)
	ADD     $16, R8
	VST1    [V24.S4], (R8)
	RET

// func tileQ8AVX(a0, a1, a2 *float32, w *byte, ldw, n int, out *float32)
//
// The 3×4 tile of tileBF16AVX for rows of n Q8_0 blocks. Per block, each of the four
// weight rows is widened once (V6-V13, its scale in V5) and dotted with the block of each
// row of A (V0-V3, V16-V19) into V14/V15; that sum times the scale goes into the tile's
// accumulator V20+4r+j, which three pairwise adds per row finally reduce.
TEXT ·tileQ8AVX(SB), NOSPLIT, $0-56
	MOVD a0+0(FP), R0
	MOVD a1+8(FP), R1
	MOVD a2+16(FP), R2
	MOVD w+24(FP), R3
	MOVD ldw+32(FP), R9
	MOVD n+40(FP), R7
	MOVD out+48(FP), R8
	ADD  R9, R3, R4
	ADD  R9, R4, R5
	ADD  R9, R5, R6
	VEOR V20.B16, V20.B16, V20.B16
	VEOR V21.B16, V21.B16, V21.B16
	VEOR V22.B16, V22.B16, V22.B16
	VEOR V23.B16, V23.B16, V23.B16
	VEOR V24.B16, V24.B16, V24.B16
	VEOR V25.B16, V25.B16, V25.B16
	VEOR V26.B16, V26.B16, V26.B16
	VEOR V27.B16, V27.B16, V27.B16
	VEOR V28.B16, V28.B16, V28.B16
	VEOR V29.B16, V29.B16, V29.B16
	VEOR V30.B16, V30.B16, V30.B16
	VEOR V31.B16, V31.B16, V31.B16
	CBZ  R7, tq8sum

tq8block:
	MOVHU.P 2(R3), R10
	VLD1.P  32(R3), [V0.B16, V1.B16]
	SXTL8(2, 0)
	SXTL8H(3, 0)
	SXTL8(4, 1)
	SXTL8H(17, 1)
	Q8I2F(2, 6)
	Q8I2F(3, 8)
	Q8I2F(4, 10)
	Q8I2F(17, 12)
	FMOVS   R10, F5
	FCVTSH(5, 5)
	MOVD    R0, R11
	VLD1.P  64(R11), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1    (R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VEOR    V14.B16, V14.B16, V14.B16
	VEOR    V15.B16, V15.B16, V15.B16
	VFMLA   V6.S4, V0.S4, V14.S4
	VFMLA   V7.S4, V1.S4, V15.S4
	VFMLA   V8.S4, V2.S4, V14.S4
	VFMLA   V9.S4, V3.S4, V15.S4
	VFMLA   V10.S4, V16.S4, V14.S4
	VFMLA   V11.S4, V17.S4, V15.S4
	VFMLA   V12.S4, V18.S4, V14.S4
	VFMLA   V13.S4, V19.S4, V15.S4
	FADD4(14, 14, 15)
	FMLAE(20, 14, 5, 0)
	MOVD    R1, R11
	VLD1.P  64(R11), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1    (R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VEOR    V14.B16, V14.B16, V14.B16
	VEOR    V15.B16, V15.B16, V15.B16
	VFMLA   V6.S4, V0.S4, V14.S4
	VFMLA   V7.S4, V1.S4, V15.S4
	VFMLA   V8.S4, V2.S4, V14.S4
	VFMLA   V9.S4, V3.S4, V15.S4
	VFMLA   V10.S4, V16.S4, V14.S4
	VFMLA   V11.S4, V17.S4, V15.S4
	VFMLA   V12.S4, V18.S4, V14.S4
	VFMLA   V13.S4, V19.S4, V15.S4
	FADD4(14, 14, 15)
	FMLAE(24, 14, 5, 0)
	MOVD    R2, R11
	VLD1.P  64(R11), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1    (R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VEOR    V14.B16, V14.B16, V14.B16
	VEOR    V15.B16, V15.B16, V15.B16
	VFMLA   V6.S4, V0.S4, V14.S4
	VFMLA   V7.S4, V1.S4, V15.S4
	VFMLA   V8.S4, V2.S4, V14.S4
	VFMLA   V9.S4, V3.S4, V15.S4
	VFMLA   V10.S4, V16.S4, V14.S4
	VFMLA   V11.S4, V17.S4, V15.S4
	VFMLA   V12.S4, V18.S4, V14.S4
	VFMLA   V13.S4, V19.S4, V15.S4
	FADD4(14, 14, 15)
	FMLAE(28, 14, 5, 0)
	MOVHU.P 2(R4), R10
	VLD1.P  32(R4), [V0.B16, V1.B16]
	SXTL8(2, 0)
	SXTL8H(3, 0)
	SXTL8(4, 1)
	SXTL8H(17, 1)
	Q8I2F(2, 6)
	Q8I2F(3, 8)
	Q8I2F(4, 10)
	Q8I2F(17, 12)
	FMOVS   R10, F5
	FCVTSH(5, 5)
	MOVD    R0, R11
	VLD1.P  64(R11), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1    (R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VEOR    V14.B16, V14.B16, V14.B16
	VEOR    V15.B16, V15.B16, V15.B16
	VFMLA   V6.S4, V0.S4, V14.S4
	VFMLA   V7.S4, V1.S4, V15.S4
	VFMLA   V8.S4, V2.S4, V14.S4
	VFMLA   V9.S4, V3.S4, V15.S4
	VFMLA   V10.S4, V16.S4, V14.S4
	VFMLA   V11.S4, V17.S4, V15.S4
	VFMLA   V12.S4, V18.S4, V14.S4
	VFMLA   V13.S4, V19.S4, V15.S4
	FADD4(14, 14, 15)
	FMLAE(21, 14, 5, 0)
	MOVD    R1, R11
	VLD1.P  64(R11), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1    (R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VEOR    V14.B16, V14.B16, V14.B16
	VEOR    V15.B16, V15.B16, V15.B16
	VFMLA   V6.S4, V0.S4, V14.S4
	VFMLA   V7.S4, V1.S4, V15.S4
	VFMLA   V8.S4, V2.S4, V14.S4
	VFMLA   V9.S4, V3.S4, V15.S4
	VFMLA   V10.S4, V16.S4, V14.S4
	VFMLA   V11.S4, V17.S4, V15.S4
	VFMLA   V12.S4, V18.S4, V14.S4
	VFMLA   V13.S4, V19.S4, V15.S4
	FADD4(14, 14, 15)
	FMLAE(25, 14, 5, 0)
	MOVD    R2, R11
	VLD1.P  64(R11), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1    (R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VEOR    V14.B16, V14.B16, V14.B16
	VEOR    V15.B16, V15.B16, V15.B16
	VFMLA   V6.S4, V0.S4, V14.S4
	VFMLA   V7.S4, V1.S4, V15.S4
	VFMLA   V8.S4, V2.S4, V14.S4
	VFMLA   V9.S4, V3.S4, V15.S4
	VFMLA   V10.S4, V16.S4, V14.S4
	VFMLA   V11.S4, V17.S4, V15.S4
	VFMLA   V12.S4, V18.S4, V14.S4
	VFMLA   V13.S4, V19.S4, V15.S4
	FADD4(14, 14, 15)
	FMLAE(29, 14, 5, 0)
	MOVHU.P 2(R5), R10
	VLD1.P  32(R5), [V0.B16, V1.B16]
	SXTL8(2, 0)
	SXTL8H(3, 0)
	SXTL8(4, 1)
	SXTL8H(17, 1)
	Q8I2F(2, 6)
	Q8I2F(3, 8)
	Q8I2F(4, 10)
	Q8I2F(17, 12)
	FMOVS   R10, F5
	FCVTSH(5, 5)
	MOVD    R0, R11
	VLD1.P  64(R11), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1    (R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VEOR    V14.B16, V14.B16, V14.B16
	VEOR    V15.B16, V15.B16, V15.B16
	VFMLA   V6.S4, V0.S4, V14.S4
	VFMLA   V7.S4, V1.S4, V15.S4
	VFMLA   V8.S4, V2.S4, V14.S4
	VFMLA   V9.S4, V3.S4, V15.S4
	VFMLA   V10.S4, V16.S4, V14.S4
	VFMLA   V11.S4, V17.S4, V15.S4
	VFMLA   V12.S4, V18.S4, V14.S4
	VFMLA   V13.S4, V19.S4, V15.S4
	FADD4(14, 14, 15)
	FMLAE(22, 14, 5, 0)
	MOVD    R1, R11
	VLD1.P  64(R11), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1    (R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VEOR    V14.B16, V14.B16, V14.B16
	VEOR    V15.B16, V15.B16, V15.B16
	VFMLA   V6.S4, V0.S4, V14.S4
	VFMLA   V7.S4, V1.S4, V15.S4
	VFMLA   V8.S4, V2.S4, V14.S4
	VFMLA   V9.S4, V3.S4, V15.S4
	VFMLA   V10.S4, V16.S4, V14.S4
	VFMLA   V11.S4, V17.S4, V15.S4
	VFMLA   V12.S4, V18.S4, V14.S4
	VFMLA   V13.S4, V19.S4, V15.S4
	FADD4(14, 14, 15)
	FMLAE(26, 14, 5, 0)
	MOVD    R2, R11
	VLD1.P  64(R11), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1    (R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VEOR    V14.B16, V14.B16, V14.B16
	VEOR    V15.B16, V15.B16, V15.B16
	VFMLA   V6.S4, V0.S4, V14.S4
	VFMLA   V7.S4, V1.S4, V15.S4
	VFMLA   V8.S4, V2.S4, V14.S4
	VFMLA   V9.S4, V3.S4, V15.S4
	VFMLA   V10.S4, V16.S4, V14.S4
	VFMLA   V11.S4, V17.S4, V15.S4
	VFMLA   V12.S4, V18.S4, V14.S4
	VFMLA   V13.S4, V19.S4, V15.S4
	FADD4(14, 14, 15)
	FMLAE(30, 14, 5, 0)
	MOVHU.P 2(R6), R10
	VLD1.P  32(R6), [V0.B16, V1.B16]
	SXTL8(2, 0)
	SXTL8H(3, 0)
	SXTL8(4, 1)
	SXTL8H(17, 1)
	Q8I2F(2, 6)
	Q8I2F(3, 8)
	Q8I2F(4, 10)
	Q8I2F(17, 12)
	FMOVS   R10, F5
	FCVTSH(5, 5)
	MOVD    R0, R11
	VLD1.P  64(R11), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1    (R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VEOR    V14.B16, V14.B16, V14.B16
	VEOR    V15.B16, V15.B16, V15.B16
	VFMLA   V6.S4, V0.S4, V14.S4
	VFMLA   V7.S4, V1.S4, V15.S4
	VFMLA   V8.S4, V2.S4, V14.S4
	VFMLA   V9.S4, V3.S4, V15.S4
	VFMLA   V10.S4, V16.S4, V14.S4
	VFMLA   V11.S4, V17.S4, V15.S4
	VFMLA   V12.S4, V18.S4, V14.S4
	VFMLA   V13.S4, V19.S4, V15.S4
	FADD4(14, 14, 15)
	FMLAE(23, 14, 5, 0)
	MOVD    R1, R11
	VLD1.P  64(R11), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1    (R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VEOR    V14.B16, V14.B16, V14.B16
	VEOR    V15.B16, V15.B16, V15.B16
	VFMLA   V6.S4, V0.S4, V14.S4
	VFMLA   V7.S4, V1.S4, V15.S4
	VFMLA   V8.S4, V2.S4, V14.S4
	VFMLA   V9.S4, V3.S4, V15.S4
	VFMLA   V10.S4, V16.S4, V14.S4
	VFMLA   V11.S4, V17.S4, V15.S4
	VFMLA   V12.S4, V18.S4, V14.S4
	VFMLA   V13.S4, V19.S4, V15.S4
	FADD4(14, 14, 15)
	FMLAE(27, 14, 5, 0)
	MOVD    R2, R11
	VLD1.P  64(R11), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1    (R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VEOR    V14.B16, V14.B16, V14.B16
	VEOR    V15.B16, V15.B16, V15.B16
	VFMLA   V6.S4, V0.S4, V14.S4
	VFMLA   V7.S4, V1.S4, V15.S4
	VFMLA   V8.S4, V2.S4, V14.S4
	VFMLA   V9.S4, V3.S4, V15.S4
	VFMLA   V10.S4, V16.S4, V14.S4
	VFMLA   V11.S4, V17.S4, V15.S4
	VFMLA   V12.S4, V18.S4, V14.S4
	VFMLA   V13.S4, V19.S4, V15.S4
	FADD4(14, 14, 15)
	FMLAE(31, 14, 5, 0)
	ADD     $128, R0
	ADD     $128, R1
	ADD     $128, R2
	SUBS    $1, R7
	BNE     tq8block

tq8sum:
	FADDP4(16, 20, 21)
	FADDP4(17, 22, 23)
	FADDP4(16, 16, 17)
	FADDP4(18, 24, 25)
	FADDP4(19, 26, 27)
	FADDP4(18, 18, 19)
	FADDP4(0, 28, 29)
	FADDP4(1, 30, 31)
	FADDP4(0, 0, 1)
	VST1    [V16.S4], (R8)
	ADD     $16, R8
	VST1    [V18.S4], (R8)
	ADD     $16, R8
	VST1    [V0.S4], (R8)
	RET
