package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/tuft-go/tuft/engine/kern"
)

// TensorType is a ggml tensor data type.
type TensorType uint32

// The ggml tensor types this package decodes (their numbers are the file format's).
const (
	F32  TensorType = 0
	F16  TensorType = 1
	Q4_0 TensorType = 2
	Q4_1 TensorType = 3
	Q5_0 TensorType = 6
	Q5_1 TensorType = 7
	Q8_0 TensorType = 8
	Q4_K TensorType = 12
	Q5_K TensorType = 13
	Q6_K TensorType = 14
	BF16 TensorType = 30
)

// qk is the K-quants' super-block length.
const qk = 256

type typeInfo struct {
	name        string
	block, size int // values per block, bytes per block
}

var types = map[TensorType]typeInfo{
	F32: {"F32", 1, 4}, F16: {"F16", 1, 2}, BF16: {"BF16", 1, 2},
	Q4_0: {"Q4_0", 32, 2 + 16}, Q4_1: {"Q4_1", 32, 2 + 2 + 16},
	Q5_0: {"Q5_0", 32, 2 + 4 + 16}, Q5_1: {"Q5_1", 32, 2 + 2 + 4 + 16},
	Q8_0: {"Q8_0", 32, 2 + 32},
	Q4_K: {"Q4_K", qk, 2 + 2 + 12 + qk/2}, Q5_K: {"Q5_K", qk, 2 + 2 + 12 + qk/8 + qk/2},
	Q6_K: {"Q6_K", qk, qk/2 + qk/4 + qk/16 + 2},
}

// otherNames names the ggml types this package does not decode, for error messages.
var otherNames = map[TensorType]string{9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS",
	18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32",
	27: "I64", 28: "F64", 29: "IQ1_M", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4"}

// Known reports whether the package decodes the type.
func (t TensorType) Known() bool { _, ok := types[t]; return ok }

// BlockSize is the number of values per block (1 for plain floats).
func (t TensorType) BlockSize() int { return max(types[t].block, 1) }

// BlockBytes is the encoded size of one block.
func (t TensorType) BlockBytes() int { return types[t].size }

func (t TensorType) String() string {
	if ti, ok := types[t]; ok {
		return ti.name
	}
	if n, ok := otherNames[t]; ok {
		return fmt.Sprintf("%s (%d)", n, uint32(t))
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// SupportedTypes lists the decoded types, for error messages.
func SupportedTypes() string {
	return strings.Join([]string{"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"}, ", ")
}

// Dequantize decodes raw data of type t into out (len(out) values; raw holds exactly
// their blocks).
func Dequantize(t TensorType, raw []byte, out []float32) error {
	ti, ok := types[t]
	if !ok {
		return fmt.Errorf("tensor type %s is not supported (%s)", t, SupportedTypes())
	}
	if len(out)%ti.block != 0 || len(raw) != len(out)/ti.block*ti.size {
		return fmt.Errorf("%d bytes of %s do not hold %d values", len(raw), ti.name, len(out))
	}
	nb := len(out) / ti.block
	for i := 0; i < nb; i++ {
		b := raw[i*ti.size : (i+1)*ti.size]
		y := out[i*ti.block : (i+1)*ti.block]
		switch t {
		case F32:
			y[0] = math.Float32frombits(binary.LittleEndian.Uint32(b))
		case F16:
			y[0] = f16(b)
		case BF16:
			y[0] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16)
		case Q8_0:
			d := f16(b)
			for j := 0; j < 32; j++ {
				y[j] = d * float32(int8(b[2+j]))
			}
		case Q4_0:
			d := f16(b)
			qs := b[2:]
			for j := 0; j < 16; j++ {
				y[j] = d * float32(int(qs[j]&0xF)-8)
				y[j+16] = d * float32(int(qs[j]>>4)-8)
			}
		case Q4_1:
			d, m := f16(b), f16(b[2:])
			qs := b[4:]
			for j := 0; j < 16; j++ {
				y[j] = d*float32(qs[j]&0xF) + m
				y[j+16] = d*float32(qs[j]>>4) + m
			}
		case Q5_0:
			kern.Q5_0.DequantBlock(y, b)
		case Q5_1:
			d, m := f16(b), f16(b[2:])
			qh := binary.LittleEndian.Uint32(b[4:])
			qs := b[8:]
			for j := 0; j < 16; j++ {
				lo := int(qs[j]&0xF) | int((qh>>j)&1)<<4
				hi := int(qs[j]>>4) | int((qh>>(j+16))&1)<<4
				y[j] = d*float32(lo) + m
				y[j+16] = d*float32(hi) + m
			}
		case Q4_K:
			kern.Q4_K.DequantBlock(y, b)
		case Q5_K:
			q5k(b, y)
		case Q6_K:
			kern.Q6_K.DequantBlock(y, b)
		}
	}
	return nil
}

// scaleMin unpacks the j-th 6-bit scale and min of a Q4_K/Q5_K super-block's 12 bytes.
func scaleMin(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return (s[j+4] & 0xF) | (s[j-4]>>6)<<4, (s[j+4] >> 4) | (s[j]>>6)<<4
}

// q5k is Q5_K: Q4_K (d, dmin, 12 bytes of 6-bit scales and mins, eight sub-blocks of 32,
// y = d·scale·q − dmin·min; kern dequantises it) with a fifth bit per value from 32 bytes
// of high bits.
func q5k(b []byte, y []float32) {
	d, dmin := f16(b), f16(b[2:])
	sc := b[4:16]
	qh := b[16:48]
	qs := b[48:]
	u1, u2 := uint8(1), uint8(2)
	for j, is := 0, 0; j < qk; j, is = j+64, is+2 {
		s1, m1 := scaleMin(is, sc)
		s2, m2 := scaleMin(is+1, sc)
		d1, o1 := d*float32(s1), dmin*float32(m1)
		d2, o2 := d*float32(s2), dmin*float32(m2)
		q := qs[j/2 : j/2+32]
		for l := 0; l < 32; l++ {
			lo, hi := q[l]&0xF, q[l]>>4
			if qh[l]&u1 != 0 {
				lo += 16
			}
			if qh[l]&u2 != 0 {
				hi += 16
			}
			y[j+l] = d1*float32(lo) - o1
			y[j+32+l] = d2*float32(hi) - o2
		}
		u1 <<= 2
		u2 <<= 2
	}
}

// f16 decodes a little-endian IEEE half.
func f16(b []byte) float32 {
	h := binary.LittleEndian.Uint16(b)
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | man<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}
