package kern

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Frozen base weights on the CPU. Decoding one token reads every weight once, so its
// speed is the memory bandwidth divided by the bytes a weight takes: a frozen matrix can
// be stored narrower than float32 and widened in registers as the kernels read it.
//
//	f32   4 bytes a weight: exact.
//	bf16  2 bytes: float32 rounded to bfloat16 (nearest, ties to even), as torch does.
//	q8_0  1.0625 bytes: GGUF's Q8_0, blocks of 32 weights along a row, each an IEEE half
//	      scale d and 32 int8 q (w = d·q, d = max|w|/127), 34 bytes a block.
//	q4_1  0.625 bytes: GGUF's Q4_1, blocks of 32 with a half scale d and a half minimum m
//	      and 32 four-bit q (w = d·q + m), 20 bytes a block; q[j] is the low nibble of
//	      byte j and q[j+16] its high nibble.
//
// The block layouts are llama.cpp's, byte for byte, and quantising is its reference
// quantiser (quantize_row_q8_0_ref, quantize_row_q4_1_ref), so a matrix matches what
// llama.cpp computes with at the same format. The block formats need rows whose length
// is a multiple of 32; NewFrozen stores another matrix as bf16 instead.

// WeightFormat is how a Frozen matrix stores its weights.
type WeightFormat uint8

// The weight formats.
const (
	F32 WeightFormat = iota
	BF16
	Q8_0
	Q4_1
)

// QBlock is the number of weights in one block of Q8_0 and Q4_1.
const QBlock = 32

var formatNames = [...]string{F32: "f32", BF16: "bf16", Q8_0: "q8_0", Q4_1: "q4_1"}

// String is the format's name as configuration spells it.
func (f WeightFormat) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("WeightFormat(%d)", f)
}

// ParseWeightFormat reads a format name: f32, bf16, q8_0 or q4_1.
func ParseWeightFormat(s string) (WeightFormat, error) {
	for f, n := range formatNames {
		if n == s {
			return WeightFormat(f), nil
		}
	}
	return 0, fmt.Errorf("weight format %q: want f32, bf16, q8_0 or q4_1", s)
}

// blockBytes is the bytes of one block of a block format.
func (f WeightFormat) blockBytes() int {
	switch f {
	case Q8_0:
		return 2 + QBlock
	case Q4_1:
		return 4 + QBlock/2
	}
	return 0
}

// Frozen is a read-only weight matrix [Rows×Cols], row-major, in one format. It is safe
// for concurrent use.
type Frozen struct {
	Format     WeightFormat
	Rows, Cols int
	f32        []float32 // F32 (aliases the source)
	bf         []uint16  // BF16
	blk        []byte    // Q8_0, Q4_1: Cols/32 blocks a row
}

// NewFrozen stores src [rows×cols] in format f: an F32 matrix aliases src, the others
// are copies. A block format over rows whose length is not a multiple of 32 falls back to
// BF16 (Format says what was stored).
func NewFrozen(src []float32, rows, cols int, f WeightFormat) *Frozen {
	if len(src) != rows*cols {
		panic(fmt.Sprintf("kern: NewFrozen: %d values for %d×%d", len(src), rows, cols))
	}
	if (f == Q8_0 || f == Q4_1) && cols%QBlock != 0 {
		f = BF16
	}
	w := &Frozen{Format: f, Rows: rows, Cols: cols}
	switch f {
	case F32:
		w.f32 = src
	case BF16:
		w.bf = make([]uint16, len(src))
		split(rows, rows*cols*4, 1, func(lo, hi int) {
			for i, v := range src[lo*cols : hi*cols] {
				w.bf[lo*cols+i] = ToBF16(v)
			}
		})
	case Q8_0, Q4_1:
		bb := f.blockBytes()
		nb := cols / QBlock
		w.blk = make([]byte, rows*nb*bb)
		split(rows, rows*cols*16, 1, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				for b := 0; b < nb; b++ {
					x := src[r*cols+b*QBlock:][:QBlock]
					dst := w.blk[(r*nb+b)*bb:][:bb]
					if f == Q8_0 {
						quantQ8(dst, x)
					} else {
						quantQ4(dst, x)
					}
				}
			}
		})
	default:
		panic(fmt.Sprintf("kern: NewFrozen: unknown format %d", f))
	}
	return w
}

// FrozenBlocks wraps GGUF Q8_0 or Q4_1 data for a [rows×cols] matrix without copying it.
func FrozenBlocks(f WeightFormat, data []byte, rows, cols int) (*Frozen, error) {
	if f != Q8_0 && f != Q4_1 {
		return nil, fmt.Errorf("kern: FrozenBlocks: %s is not a block format", f)
	}
	if cols%QBlock != 0 {
		return nil, fmt.Errorf("kern: FrozenBlocks: rows of %d weights are not whole blocks of %d", cols, QBlock)
	}
	if want := rows * cols / QBlock * f.blockBytes(); len(data) != want {
		return nil, fmt.Errorf("kern: FrozenBlocks: %d bytes for %d×%d %s, want %d", len(data), rows, cols, f, want)
	}
	return &Frozen{Format: f, Rows: rows, Cols: cols, blk: data}, nil
}

// F32 is the float32 matrix an F32 Frozen aliases (nil for the other formats).
func (w *Frozen) F32() []float32 { return w.f32 }

// Bytes is the memory the stored weights take.
func (w *Frozen) Bytes() int {
	return 4*len(w.f32) + 2*len(w.bf) + len(w.blk)
}

// Row writes row r, widened to float32, to dst[:Cols].
func (w *Frozen) Row(dst []float32, r int) { w.rowSeg(dst[:w.Cols], r, 0) }

// rowSeg writes elements [c0, c0+len(dst)) of row r to dst.
func (w *Frozen) rowSeg(dst []float32, r, c0 int) {
	n := len(dst)
	switch w.Format {
	case F32:
		copy(dst, w.f32[r*w.Cols+c0:][:n])
	case BF16:
		for i, v := range w.bf[r*w.Cols+c0:][:n] {
			dst[i] = FromBF16(v)
		}
	default:
		bb := w.Format.blockBytes()
		nb := w.Cols / QBlock
		row := w.blk[r*nb*bb : (r+1)*nb*bb]
		for i := 0; i < n; {
			c := c0 + i
			b, j := c/QBlock, c%QBlock
			blk := row[b*bb : b*bb+bb]
			cnt := min(QBlock-j, n-i)
			if w.Format == Q8_0 {
				d := FromF16(binary.LittleEndian.Uint16(blk))
				for t := 0; t < cnt; t++ {
					dst[i+t] = d * float32(int8(blk[2+j+t]))
				}
			} else {
				d, m := FromF16(binary.LittleEndian.Uint16(blk)), FromF16(binary.LittleEndian.Uint16(blk[2:]))
				for t := 0; t < cnt; t++ {
					dst[i+t] = d*float32(nibble(blk[4:], j+t)) + m
				}
			}
			i += cnt
		}
	}
}

// nibble is four-bit weight j of a Q4_1 block's 16 bytes.
func nibble(qs []byte, j int) byte {
	if j < QBlock/2 {
		return qs[j] & 0xF
	}
	return qs[j-QBlock/2] >> 4
}

// quantQ8 is llama.cpp's quantize_row_q8_0_ref for one block.
func quantQ8(dst []byte, x []float32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(dst, ToF16(d))
	for j, v := range x {
		dst[2+j] = byte(int8(roundf(v * id)))
	}
}

// quantQ4 is llama.cpp's quantize_row_q4_1_ref for one block.
func quantQ4(dst []byte, x []float32) {
	lo, hi := float32(math.MaxFloat32), float32(-math.MaxFloat32)
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	d := (hi - lo) / 15
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(dst, ToF16(d))
	binary.LittleEndian.PutUint16(dst[2:], ToF16(lo))
	for j := 0; j < QBlock/2; j++ {
		q0 := min(15, int8((x[j]-lo)*id+0.5))
		q1 := min(15, int8((x[j+QBlock/2]-lo)*id+0.5))
		dst[4+j] = byte(q0) | byte(q1)<<4
	}
}

// roundf rounds half away from zero, as C's roundf.
func roundf(v float32) float32 { return float32(math.Round(float64(v))) }

// ToBF16 rounds v to bfloat16 (nearest, ties to even; NaN stays NaN).
func ToBF16(v float32) uint16 {
	b := math.Float32bits(v)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// FromBF16 widens a bfloat16 to float32 (exact).
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// ToF16 rounds v to an IEEE half (nearest, ties to even), as F16C's VCVTPS2PH.
func ToF16(v float32) uint16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf, NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127+15 >= 0x1f: // overflows
		return sign | 0x7c00
	case exp-127+15 <= 0: // subnormal half, or zero
		if exp-127+15 < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint(14 - (exp - 127 + 15)) // 24-bit mantissa down to the half's 10 bits
		h := man >> shift
		rem := man & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp-127+15)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is still right
	}
	return sign | uint16(h)
}

// FromF16 widens an IEEE half to float32 (exact).
func FromF16(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		return math.Float32frombits(sign) + float32(man)*(1.0/(1<<24))*sign1(sign)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

func sign1(s uint32) float32 {
	if s != 0 {
		return -1
	}
	return 1
}
