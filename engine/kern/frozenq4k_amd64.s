//go:build amd64 && !purego

#include "textflag.h"

// The decode dots of the K-quant formats (frozenq4k.go) with AVX2, FMA and F16C.

// KSUM4 sums the four ymm accumulators a, b, c, d horizontally into the low float of
// a's xmm register.
#define KSUM4(a, b, c, d, xa, xt) \
	VADDPS b, a, a \
	VADDPS d, c, c \
	VADDPS c, a, a \
	VEXTRACTF128 $1, a, xt \
	VADDPS xt, xa, xa \
	VHADDPS xa, xa, xa \
	VHADDPS xa, xa, xa

// func dotQ4KAVX(x *float32, blk *byte, sc *float32, nb int) float32
//
// The dot of x with nb Q4_K super-blocks (144 bytes each; their 4-bit values at byte
// 16), whose sub-block scales and mins the caller has unpacked: sc holds, per
// super-block, 16 floats d·sc_j, dmin·m_j for j = 0…7. Each group of 32 bytes holds
// sub-block 2g in its low nibbles and 2g+1 in its high ones: w = d·sc·q − dmin·m.
TEXT ·dotQ4KAVX(SB), NOSPLIT, $0-36
	MOVQ x+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ sc+16(FP), R8
	MOVQ nb+24(FP), CX
	MOVL $15, AX
	MOVQ AX, X15
	VPBROADCASTD X15, Y15
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JEQ   q4kdone
	ADDQ  $16, DI

q4kblock:
	MOVQ $4, BX

q4kgroup:
	VPMOVZXBD    (DI), Y4
	VPMOVZXBD    8(DI), Y5
	VPMOVZXBD    16(DI), Y6
	VPMOVZXBD    24(DI), Y7
	VPSRLD       $4, Y4, Y10
	VPSRLD       $4, Y5, Y11
	VPSRLD       $4, Y6, Y12
	VPSRLD       $4, Y7, Y13
	VPAND        Y15, Y4, Y4
	VPAND        Y15, Y5, Y5
	VPAND        Y15, Y6, Y6
	VPAND        Y15, Y7, Y7
	VCVTDQ2PS    Y4, Y4
	VCVTDQ2PS    Y5, Y5
	VCVTDQ2PS    Y6, Y6
	VCVTDQ2PS    Y7, Y7
	VCVTDQ2PS    Y10, Y10
	VCVTDQ2PS    Y11, Y11
	VCVTDQ2PS    Y12, Y12
	VCVTDQ2PS    Y13, Y13
	VBROADCASTSS (R8), Y8
	VBROADCASTSS 4(R8), Y9
	VFMSUB213PS  Y9, Y8, Y4
	VFMSUB213PS  Y9, Y8, Y5
	VFMSUB213PS  Y9, Y8, Y6
	VFMSUB213PS  Y9, Y8, Y7
	VBROADCASTSS 8(R8), Y8
	VBROADCASTSS 12(R8), Y9
	VFMSUB213PS  Y9, Y8, Y10
	VFMSUB213PS  Y9, Y8, Y11
	VFMSUB213PS  Y9, Y8, Y12
	VFMSUB213PS  Y9, Y8, Y13
	VFMADD231PS  (SI), Y4, Y0
	VFMADD231PS  32(SI), Y5, Y1
	VFMADD231PS  64(SI), Y6, Y2
	VFMADD231PS  96(SI), Y7, Y3
	VFMADD231PS  128(SI), Y10, Y0
	VFMADD231PS  160(SI), Y11, Y1
	VFMADD231PS  192(SI), Y12, Y2
	VFMADD231PS  224(SI), Y13, Y3
	ADDQ         $32, DI
	ADDQ         $16, R8
	ADDQ         $256, SI
	DECQ         BX
	JNE          q4kgroup
	ADDQ         $16, DI
	DECQ         CX
	JNE          q4kblock

q4kdone:
	KSUM4(Y0, Y1, Y2, Y3, X0, X1)
	VZEROUPPER
	MOVSS X0, ret+32(FP)
	RET

DATA q5shift<>+0(SB)/4, $31
DATA q5shift<>+4(SB)/4, $30
DATA q5shift<>+8(SB)/4, $29
DATA q5shift<>+12(SB)/4, $28
DATA q5shift<>+16(SB)/4, $27
DATA q5shift<>+20(SB)/4, $26
DATA q5shift<>+24(SB)/4, $25
DATA q5shift<>+28(SB)/4, $24
DATA q5shift<>+32(SB)/4, $23
DATA q5shift<>+36(SB)/4, $22
DATA q5shift<>+40(SB)/4, $21
DATA q5shift<>+44(SB)/4, $20
DATA q5shift<>+48(SB)/4, $19
DATA q5shift<>+52(SB)/4, $18
DATA q5shift<>+56(SB)/4, $17
DATA q5shift<>+60(SB)/4, $16
DATA q5shift<>+64(SB)/4, $15
DATA q5shift<>+68(SB)/4, $14
DATA q5shift<>+72(SB)/4, $13
DATA q5shift<>+76(SB)/4, $12
DATA q5shift<>+80(SB)/4, $11
DATA q5shift<>+84(SB)/4, $10
DATA q5shift<>+88(SB)/4, $9
DATA q5shift<>+92(SB)/4, $8
DATA q5shift<>+96(SB)/4, $7
DATA q5shift<>+100(SB)/4, $6
DATA q5shift<>+104(SB)/4, $5
DATA q5shift<>+108(SB)/4, $4
DATA q5shift<>+112(SB)/4, $3
DATA q5shift<>+116(SB)/4, $2
DATA q5shift<>+120(SB)/4, $1
DATA q5shift<>+124(SB)/4, $0
GLOBL q5shift<>(SB), RODATA|NOPTR, $128

// Q5BITS ORs bit j of qh (Y9) into bit 4 of each lane of w, lane i being weight j =
// 8k+i, k the group at off in q5shift: qh << (31−j), then >> 31, then << 4.
#define Q5BITS(off, w) \
	VPSLLVD q5shift<>+off(SB), Y9, Y10 \
	VPSRLD  $31, Y10, Y10 \
	VPSLLD  $4, Y10, Y10 \
	VPOR    Y10, w, w

DATA q5idx<>+0(SB)/8, $0x0000000000000000
DATA q5idx<>+8(SB)/8, $0x0101010101010101
DATA q5idx<>+16(SB)/8, $0x0202020202020202
DATA q5idx<>+24(SB)/8, $0x0303030303030303
GLOBL q5idx<>(SB), RODATA|NOPTR, $32
DATA q5bit<>+0(SB)/8, $0x7fbfdfeff7fbfdfe
DATA q5bit<>+8(SB)/8, $0x7fbfdfeff7fbfdfe
DATA q5bit<>+16(SB)/8, $0x7fbfdfeff7fbfdfe
DATA q5bit<>+24(SB)/8, $0x7fbfdfeff7fbfdfe
GLOBL q5bit<>(SB), RODATA|NOPTR, $32

// func dotQ5AVX(x *float32, blk *byte, nb int) float32
//
// The dot of x with nb Q5_0 blocks (22 bytes: half d, 32 bits qh, 16 bytes of nibbles;
// weight j < 16 is the low nibble of byte j with bit j of qh as its fifth bit, weight
// j+16 the high nibble with bit j+16): Σ_b d_b·Σ_j x_j·(q_j − 16). As llama.cpp's
// bytes_from_bits_32: byte j of qh's broadcast (VPSHUFB with q5idx) ORed with all bits but
// j%8 (q5bit) is all ones exactly when bit j is set; where it is not, 0xF0 ORed into the
// nibble makes the signed byte nibble − 16, and where it is, the nibble is q − 16 already
// (q = nibble + 16).
TEXT ·dotQ5AVX(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVL $0x0F0F0F0F, AX
	MOVQ AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0xF0F0F0F0, AX
	MOVQ AX, X14
	VPBROADCASTD X14, Y14
	VPCMPEQB Y13, Y13, Y13
	VMOVDQU q5idx<>(SB), Y12
	VMOVDQU q5bit<>(SB), Y11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	TESTQ CX, CX
	JEQ   q5done

q5loop:
	VMOVDQU      6(DI), X4
	VPSRLW       $4, X4, X5
	VPAND        X15, X4, X4
	VPAND        X15, X5, X5
	VINSERTI128  $1, X5, Y4, Y4
	VPBROADCASTD 2(DI), Y6
	VPSHUFB      Y12, Y6, Y6
	VPOR         Y11, Y6, Y6
	VPCMPEQB     Y13, Y6, Y6
	VPANDN       Y14, Y6, Y6
	VPOR         Y6, Y4, Y4
	VEXTRACTI128 $1, Y4, X7
	VPMOVSXBD    X4, Y5
	VPSRLDQ      $8, X4, X4
	VPMOVSXBD    X4, Y6
	VPMOVSXBD    X7, Y8
	VPSRLDQ      $8, X7, X7
	VPMOVSXBD    X7, Y9
	VCVTDQ2PS    Y5, Y5
	VCVTDQ2PS    Y6, Y6
	VCVTDQ2PS    Y8, Y8
	VCVTDQ2PS    Y9, Y9
	VMULPS       (SI), Y5, Y5
	VMULPS       32(SI), Y6, Y6
	VMULPS       64(SI), Y8, Y8
	VMULPS       96(SI), Y9, Y9
	VADDPS       Y6, Y5, Y5
	VADDPS       Y9, Y8, Y8
	VADDPS       Y8, Y5, Y5
	VPBROADCASTW (DI), X10
	VCVTPH2PS    X10, Y10
	VFMADD231PS  Y5, Y10, Y0
	ADDQ         $128, SI
	ADDQ         $22, DI
	DECQ         CX
	JNE          q5loop

q5done:
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	KSUM4(Y0, Y1, Y2, Y3, X0, X13)
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// W5BLOCK writes to (SI) the 32 weights d·(q − 16) of the block whose 16 bytes of nibbles
// are in Y4–Y5 (as dwords), its fifth bits in Y9 and its half scale at d.
#define W5BLOCK(d) \
	VPSRLD $4, Y4, Y6 \
	VPSRLD $4, Y5, Y7 \
	VPAND Y11, Y4, Y4 \
	VPAND Y11, Y5, Y5 \
	Q5BITS(0, Y4) \
	Q5BITS(32, Y5) \
	Q5BITS(64, Y6) \
	Q5BITS(96, Y7) \
	VPSUBD Y12, Y4, Y4 \
	VPSUBD Y12, Y5, Y5 \
	VPSUBD Y12, Y6, Y6 \
	VPSUBD Y12, Y7, Y7 \
	VCVTDQ2PS Y4, Y4 \
	VCVTDQ2PS Y5, Y5 \
	VCVTDQ2PS Y6, Y6 \
	VCVTDQ2PS Y7, Y7 \
	VPBROADCASTW d, X8 \
	VCVTPH2PS X8, Y8 \
	VMULPS Y8, Y4, Y4 \
	VMULPS Y8, Y5, Y5 \
	VMULPS Y8, Y6, Y6 \
	VMULPS Y8, Y7, Y7 \
	VMOVUPS Y4, (SI) \
	VMOVUPS Y5, 32(SI) \
	VMOVUPS Y6, 64(SI) \
	VMOVUPS Y7, 96(SI)

// func widenQ5AVX(dst *float32, blk *byte, nb int)
//
// Writes the 32·nb weights of nb Q5_0 blocks to dst: d·(q − 16), as deqQ5.
TEXT ·widenQ5AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVL $15, AX
	MOVQ AX, X11
	VPBROADCASTD X11, Y11
	MOVL $16, AX
	MOVQ AX, X12
	VPBROADCASTD X12, Y12
	TESTQ CX, CX
	JEQ   w5done

w5loop:
	VPBROADCASTD 2(DI), Y9
	VPMOVZXBD    6(DI), Y4
	VPMOVZXBD    14(DI), Y5
	W5BLOCK((DI))
	ADDQ         $128, SI
	ADDQ         $22, DI
	DECQ         CX
	JNE          w5loop

w5done:
	VZEROUPPER
	RET

// func widenQ5IAVX(dst *float32, o *byte, l, nb int)
//
// widenQ5AVX for lane l of nb group-blocks of an interleaved Q5_0 matrix (frozenq5i.go)
// from o: the lane's fifth bits at 288+4l, its nibbles' bytes 0–3, 4–7, 8–11 and 12–15
// at 32+4l, 96+4l, 160+4l and 224+4l, its scale at 2l.
TEXT ·widenQ5IAVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), SI
	MOVQ o+8(FP), DI
	MOVQ l+16(FP), AX
	MOVQ nb+24(FP), CX
	LEAQ (DI)(AX*4), R8
	LEAQ (DI)(AX*2), R9
	MOVL $15, AX
	MOVQ AX, X11
	VPBROADCASTD X11, Y11
	MOVL $16, AX
	MOVQ AX, X12
	VPBROADCASTD X12, Y12
	TESTQ CX, CX
	JEQ   w5idone

w5iloop:
	VPBROADCASTD 288(R8), Y9
	VMOVD        32(R8), X4
	VPINSRD      $1, 96(R8), X4, X4
	VMOVD        160(R8), X5
	VPINSRD      $1, 224(R8), X5, X5
	VPMOVZXBD    X4, Y4
	VPMOVZXBD    X5, Y5
	W5BLOCK((R9))
	ADDQ         $128, SI
	ADDQ         $352, R8
	ADDQ         $352, R9
	DECQ         CX
	JNE          w5iloop

w5idone:
	VZEROUPPER
	RET

// W4KGROUP widens the 32 bytes of nibbles in Y4–Y7 (as dwords) to 64 weights at (SI): the
// low nibbles times d·sc at (R8) less dmin·m at 4(R8), the high ones with 8(R8) and 12(R8).
#define W4KGROUP \
	VPSRLD $4, Y4, Y10 \
	VPSRLD $4, Y5, Y11 \
	VPSRLD $4, Y6, Y12 \
	VPSRLD $4, Y7, Y13 \
	VPAND  Y15, Y4, Y4 \
	VPAND  Y15, Y5, Y5 \
	VPAND  Y15, Y6, Y6 \
	VPAND  Y15, Y7, Y7 \
	VCVTDQ2PS Y4, Y4 \
	VCVTDQ2PS Y5, Y5 \
	VCVTDQ2PS Y6, Y6 \
	VCVTDQ2PS Y7, Y7 \
	VCVTDQ2PS Y10, Y10 \
	VCVTDQ2PS Y11, Y11 \
	VCVTDQ2PS Y12, Y12 \
	VCVTDQ2PS Y13, Y13 \
	VBROADCASTSS (R8), Y8 \
	VBROADCASTSS 4(R8), Y9 \
	VMULPS Y8, Y4, Y4 \
	VMULPS Y8, Y5, Y5 \
	VMULPS Y8, Y6, Y6 \
	VMULPS Y8, Y7, Y7 \
	VSUBPS Y9, Y4, Y4 \
	VSUBPS Y9, Y5, Y5 \
	VSUBPS Y9, Y6, Y6 \
	VSUBPS Y9, Y7, Y7 \
	VBROADCASTSS 8(R8), Y8 \
	VBROADCASTSS 12(R8), Y9 \
	VMULPS Y8, Y10, Y10 \
	VMULPS Y8, Y11, Y11 \
	VMULPS Y8, Y12, Y12 \
	VMULPS Y8, Y13, Y13 \
	VSUBPS Y9, Y10, Y10 \
	VSUBPS Y9, Y11, Y11 \
	VSUBPS Y9, Y12, Y12 \
	VSUBPS Y9, Y13, Y13 \
	VMOVUPS Y4, (SI) \
	VMOVUPS Y5, 32(SI) \
	VMOVUPS Y6, 64(SI) \
	VMOVUPS Y7, 96(SI) \
	VMOVUPS Y10, 128(SI) \
	VMOVUPS Y11, 160(SI) \
	VMOVUPS Y12, 192(SI) \
	VMOVUPS Y13, 224(SI)

// func widenQ4KIAVX(dst *float32, o *byte, l int, sc *float32, nb int)
//
// widenQ4KAVX for lane l of nb group-blocks of an interleaved Q4_K matrix (frozenq4ki.go)
// from o, the scales unpacked in sc (unpackQ4KIScales): the lane's bytes of nibbles
// 32u+4j…32u+4j+3 at 256+64(4j+u)+4l, two words to a VPMOVZXBD.
TEXT ·widenQ4KIAVX(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), SI
	MOVQ o+8(FP), DI
	MOVQ l+16(FP), AX
	MOVQ sc+24(FP), R8
	MOVQ nb+32(FP), CX
	LEAQ 256(DI)(AX*4), DI
	MOVL $15, AX
	MOVQ AX, X15
	VPBROADCASTD X15, Y15
	TESTQ CX, CX
	JEQ   w4kidone

w4kiblock:
	MOVQ $4, BX

w4kigroup:
	VMOVD        (DI), X4
	VPINSRD      $1, 256(DI), X4, X4
	VMOVD        512(DI), X5
	VPINSRD      $1, 768(DI), X5, X5
	VMOVD        1024(DI), X6
	VPINSRD      $1, 1280(DI), X6, X6
	VMOVD        1536(DI), X7
	VPINSRD      $1, 1792(DI), X7, X7
	VPMOVZXBD    X4, Y4
	VPMOVZXBD    X5, Y5
	VPMOVZXBD    X6, Y6
	VPMOVZXBD    X7, Y7
	W4KGROUP
	ADDQ         $64, DI
	ADDQ         $16, R8
	ADDQ         $256, SI
	DECQ         BX
	JNE          w4kigroup
	ADDQ         $2048, DI
	DECQ         CX
	JNE          w4kiblock

w4kidone:
	VZEROUPPER
	RET

// func widenQ4KAVX(dst *float32, blk *byte, sc *float32, nb int)
//
// Writes the 256·nb weights of nb Q4_K super-blocks to dst, their scales and mins
// unpacked in sc as for dotQ4KAVX: (d·sc)·q − dmin·m, rounded after the product as
// deqQ4K rounds (no fused multiply-add), so the two agree bit for bit.
TEXT ·widenQ4KAVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ sc+16(FP), R8
	MOVQ nb+24(FP), CX
	MOVL $15, AX
	MOVQ AX, X15
	VPBROADCASTD X15, Y15
	TESTQ CX, CX
	JEQ   w4kdone
	ADDQ  $16, DI

w4kblock:
	MOVQ $4, BX

w4kgroup:
	VPMOVZXBD    (DI), Y4
	VPMOVZXBD    8(DI), Y5
	VPMOVZXBD    16(DI), Y6
	VPMOVZXBD    24(DI), Y7
	W4KGROUP
	ADDQ         $32, DI
	ADDQ         $16, R8
	ADDQ         $256, SI
	DECQ         BX
	JNE          w4kgroup
	ADDQ         $16, DI
	DECQ         CX
	JNE          w4kblock

w4kdone:
	VZEROUPPER
	RET

// Q6WEIGHTS widens eight weights of each of a Q6_K half's four quarters into Y7, Y9, Y10,
// Y11: lanes l0…l0+7 (lo, their byte offset in ql at R9 and qh at R10; lo32 = lo+32) of
// weights l, l+32, l+64, l+96, times their scales (d·sc, floats at R8) at s0…s3. The
// fifth and sixth bits of weight l+32k are bits 2k, 2k+1 of qh[l]: shifted to bits 4–5
// and masked with 0x30 (Y14); the weights are offset by 32 (Y13).
#define Q6WEIGHTS(lo, lo32, s0, s1, s2, s3) \
	VPMOVZXBD    lo(R9), Y4 \
	VPMOVZXBD    lo32(R9), Y5 \
	VPMOVZXBD    lo(R10), Y6 \
	VPAND        Y15, Y4, Y7 \
	VPSLLD       $4, Y6, Y8 \
	VPAND        Y14, Y8, Y8 \
	VPOR         Y8, Y7, Y7 \
	VPAND        Y15, Y5, Y9 \
	VPSLLD       $2, Y6, Y8 \
	VPAND        Y14, Y8, Y8 \
	VPOR         Y8, Y9, Y9 \
	VPSRLD       $4, Y4, Y10 \
	VPAND        Y14, Y6, Y8 \
	VPOR         Y8, Y10, Y10 \
	VPSRLD       $4, Y5, Y11 \
	VPSRLD       $2, Y6, Y8 \
	VPAND        Y14, Y8, Y8 \
	VPOR         Y8, Y11, Y11 \
	VPSUBD       Y13, Y7, Y7 \
	VPSUBD       Y13, Y9, Y9 \
	VPSUBD       Y13, Y10, Y10 \
	VPSUBD       Y13, Y11, Y11 \
	VCVTDQ2PS    Y7, Y7 \
	VCVTDQ2PS    Y9, Y9 \
	VCVTDQ2PS    Y10, Y10 \
	VCVTDQ2PS    Y11, Y11 \
	VBROADCASTSS s0(R8), Y12 \
	VMULPS       Y12, Y7, Y7 \
	VBROADCASTSS s1(R8), Y12 \
	VMULPS       Y12, Y9, Y9 \
	VBROADCASTSS s2(R8), Y12 \
	VMULPS       Y12, Y10, Y10 \
	VBROADCASTSS s3(R8), Y12 \
	VMULPS       Y12, Y11, Y11

// Q6CHUNK multiplies Q6WEIGHTS' quarters into the accumulators Y0…Y3 with their x at
// x0…x3(SI).
#define Q6CHUNK(lo, lo32, x0, x1, x2, x3, s0, s1, s2, s3) \
	Q6WEIGHTS(lo, lo32, s0, s1, s2, s3) \
	VFMADD231PS  x0(SI), Y7, Y0 \
	VFMADD231PS  x1(SI), Y9, Y1 \
	VFMADD231PS  x2(SI), Y10, Y2 \
	VFMADD231PS  x3(SI), Y11, Y3

// func dotQ6KAVX(x *float32, blk *byte, sc *float32, nb int) float32
//
// The dot of x with nb Q6_K super-blocks (210 bytes: ql[128], qh[64], int8 scales[16],
// half d), whose sixteen scales the caller has unpacked as floats d·sc_i in sc.
TEXT ·dotQ6KAVX(SB), NOSPLIT, $0-36
	MOVQ x+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ sc+16(FP), R8
	MOVQ nb+24(FP), CX
	MOVL $15, AX
	MOVQ AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x30, AX
	MOVQ AX, X14
	VPBROADCASTD X14, Y14
	MOVL $32, AX
	MOVQ AX, X13
	VPBROADCASTD X13, Y13
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JEQ   q6kdone

q6kblock:
	MOVQ DI, R9
	LEAQ 128(DI), R10
	MOVQ $2, BX

q6khalf:
	Q6CHUNK(0, 32, 0, 128, 256, 384, 0, 8, 16, 24)
	Q6CHUNK(8, 40, 32, 160, 288, 416, 0, 8, 16, 24)
	Q6CHUNK(16, 48, 64, 192, 320, 448, 4, 12, 20, 28)
	Q6CHUNK(24, 56, 96, 224, 352, 480, 4, 12, 20, 28)
	ADDQ $64, R9
	ADDQ $32, R10
	ADDQ $512, SI
	ADDQ $32, R8
	DECQ BX
	JNE  q6khalf
	ADDQ $210, DI
	DECQ CX
	JNE  q6kblock

q6kdone:
	KSUM4(Y0, Y1, Y2, Y3, X0, X1)
	VZEROUPPER
	MOVSS X0, ret+32(FP)
	RET

// Q6WCHUNK writes Q6WEIGHTS' quarters, (q − 32)·(d·sc), to dst (SI) at x0…x3: one
// rounding, as deqQ6K's (d·sc)·q.
#define Q6WCHUNK(lo, lo32, x0, x1, x2, x3, s0, s1, s2, s3) \
	Q6WEIGHTS(lo, lo32, s0, s1, s2, s3) \
	VMOVUPS      Y7, x0(SI) \
	VMOVUPS      Y9, x1(SI) \
	VMOVUPS      Y10, x2(SI) \
	VMOVUPS      Y11, x3(SI)


// func widenQ6KAVX(dst *float32, blk *byte, sc *float32, nb int)
//
// Writes the 256·nb weights of nb Q6_K super-blocks to dst, their sixteen scales
// unpacked in sc as for dotQ6KAVX, bit for bit deqQ6K's.
TEXT ·widenQ6KAVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), SI
	MOVQ blk+8(FP), DI
	MOVQ sc+16(FP), R8
	MOVQ nb+24(FP), CX
	MOVL $15, AX
	MOVQ AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x30, AX
	MOVQ AX, X14
	VPBROADCASTD X14, Y14
	MOVL $32, AX
	MOVQ AX, X13
	VPBROADCASTD X13, Y13
	TESTQ CX, CX
	JEQ   w6kdone

w6kblock:
	MOVQ DI, R9
	LEAQ 128(DI), R10
	MOVQ $2, BX

w6khalf:
	Q6WCHUNK(0, 32, 0, 128, 256, 384, 0, 8, 16, 24)
	Q6WCHUNK(8, 40, 32, 160, 288, 416, 0, 8, 16, 24)
	Q6WCHUNK(16, 48, 64, 192, 320, 448, 4, 12, 20, 28)
	Q6WCHUNK(24, 56, 96, 224, 352, 480, 4, 12, 20, 28)
	ADDQ $64, R9
	ADDQ $32, R10
	ADDQ $512, SI
	ADDQ $32, R8
	DECQ BX
	JNE  w6khalf
	ADDQ $210, DI
	DECQ CX
	JNE  w6kblock

w6kdone:
	VZEROUPPER
	RET
