package kern

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
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
//	q4_k  0.5625 bytes: GGUF's Q4_K, super-blocks of 256 (frozenq4k.go, with q6_k and
//	      q5_0, the other formats of a Q4_K_M file, which load keeps as they are).
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
	Q4_K // frozenq4k.go
	Q6_K // what q4_k mixes in for some matrices, as llama.cpp's Q4_K_M (engine/weights.go)
	Q5_0 // q4_k's fallback for rows that are not whole super-blocks
)

// QBlock is the number of weights in one block of Q8_0 and Q4_1.
const QBlock = 32

var formatNames = [...]string{F32: "f32", BF16: "bf16", Q8_0: "q8_0", Q4_1: "q4_1", Q4_K: "q4_k", Q6_K: "q6_k", Q5_0: "q5_0"}

// Chosen reports whether f can be asked for (engine.cpu_weight_format): the formats
// NewFrozen quantises into on request. Q6_K and Q5_0 are what a Q4_K_M file holds and
// what q4_k mixes in or falls back to, not choices of their own.
func (f WeightFormat) Chosen() bool { return f <= Q4_K }

// String is the format's name as configuration spells it.
func (f WeightFormat) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("WeightFormat(%d)", f)
}

// ParseWeightFormat reads a format name: f32, bf16, q8_0, q4_1 or q4_k.
func ParseWeightFormat(s string) (WeightFormat, error) {
	for f, n := range formatNames {
		if n == s && WeightFormat(f).Chosen() {
			return WeightFormat(f), nil
		}
	}
	return 0, fmt.Errorf("weight format %q: want f32, bf16, q8_0, q4_1 or q4_k", s)
}

// blockBytes is the bytes of one block of a block format.
func (f WeightFormat) blockBytes() int {
	switch f {
	case Q8_0:
		return 2 + QBlock
	case Q4_1:
		return 4 + QBlock/2
	case Q4_K:
		return 2 + 2 + 12 + QKBlock/2
	case Q6_K:
		return QKBlock/2 + QKBlock/4 + QKBlock/16 + 2
	case Q5_0:
		return 2 + 4 + QBlock/2
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
	blk        []byte    // block formats: Cols/blockLen blocks a row (nil where ilv holds them)
	ilv        []byte    // Q5_0 and Q4_K rows interleaved by sixteen for the integer dots (frozenilv.go)

	q8once sync.Once // builds q8tab on the first integer product (frozenq8.go)
	q8tab  []uint32

	ntOnce, nnOnce sync.Once // build ntPre and nnPre on first use (gemmpre.go)
	ntPre, nnPre   *prePanels
}

// NewFrozen stores src [rows×cols] in format f: an F32 matrix aliases src, the others
// are copies. Q4_K over rows whose length is not a multiple of 256 falls back to Q5_0
// and Q6_K to Q8_0 (llama.cpp's fallbacks for them), and a block format over rows whose
// length is not a multiple of 32 to BF16 (Format says what was stored).
func NewFrozen(src []float32, rows, cols int, f WeightFormat) *Frozen {
	if len(src) != rows*cols {
		panic(fmt.Sprintf("kern: NewFrozen: %d values for %d×%d", len(src), rows, cols))
	}
	if f == F32 {
		return &Frozen{Format: F32, Rows: rows, Cols: cols, f32: src}
	}
	return NewFrozenRows(rows, cols, f, func(dst []float32, r int) { copy(dst, src[r*cols:]) })
}

// NewFrozenRows stores a [rows×cols] matrix in format f, asking row(dst, r) for each row
// in float32 (dst has cols elements; rows are asked for concurrently, each once). Only one
// row per worker exists in float32 at a time, so a model loads from its stored bytes
// without a float32 copy of any tensor. Formats fall back as NewFrozen's do.
func NewFrozenRows(rows, cols int, f WeightFormat, row func(dst []float32, r int)) *Frozen {
	if f == Q4_K && cols%QKBlock != 0 {
		f = Q5_0
	}
	if f == Q6_K && cols%QKBlock != 0 {
		f = Q8_0
	}
	if f.blockBytes() > 0 && cols%QBlock != 0 {
		f = BF16
	}
	w := &Frozen{Format: f, Rows: rows, Cols: cols}
	bl, bb := f.blockLen(), f.blockBytes()
	nb := cols / bl
	var quant func(dst []byte, x []float32)
	switch f {
	case F32:
		w.f32 = w.heldFloats(rows * cols)
	case BF16:
		w.bf = w.heldUint16s(rows * cols)
	case Q8_0, Q4_1, Q4_K, Q6_K, Q5_0:
		if w.interleaves() {
			w.blk = make([]byte, rows*nb*bb) // interleave copies it into weight memory
		} else {
			w.blk = w.held(rows * nb * bb)
		}
		quant = map[WeightFormat]func([]byte, []float32){Q8_0: quantQ8, Q4_1: quantQ4, Q4_K: quantQ4K, Q6_K: quantQ6K, Q5_0: quantQ5}[f]
	default:
		panic(fmt.Sprintf("kern: NewFrozenRows: unknown format %d", f))
	}
	split(rows, rows*cols*16, 1, func(lo, hi int) {
		var buf *[]float32
		if f != F32 {
			buf = getScratch(cols)
			defer putScratch(buf)
		}
		for r := lo; r < hi; r++ {
			if f == F32 {
				row(w.f32[r*cols:(r+1)*cols], r)
				continue
			}
			x := (*buf)[:cols]
			row(x, r)
			if f == BF16 {
				for i, v := range x {
					w.bf[r*cols+i] = ToBF16(v)
				}
				continue
			}
			for b := 0; b < nb; b++ {
				quant(w.blk[(r*nb+b)*bb:][:bb], x[b*bl:][:bl])
			}
		}
	})
	w.interleave()
	return w
}

// interleave stores a Q5_0 or Q4_K matrix's blocks as the integer dots read them where
// they run (frozenilv.go); the file-ordered bytes are then no longer held.
func (w *Frozen) interleave() {
	if !w.interleaves() {
		return
	}
	w.ilv = w.held(len(w.blk))
	interleaveRows(w.Format, w.ilv, w.blk, w.Rows, w.Cols/w.Format.blockLen())
	w.blk = nil
}

// interleaves reports whether w's blocks are kept interleaved (interleave).
func (w *Frozen) interleaves() bool { return ilvFormat(w.Format) && ilvRows(w.Rows) }

// FrozenBlocks stores GGUF Q8_0, Q4_1, Q4_K, Q6_K or Q5_0 data for a [rows×cols] matrix:
// a copy in weight memory (weightmem.go), interleaved for the kernels where they read
// Q5_0 and Q4_K so; data is not kept.
func FrozenBlocks(f WeightFormat, data []byte, rows, cols int) (*Frozen, error) {
	if f.blockBytes() == 0 {
		return nil, fmt.Errorf("kern: FrozenBlocks: %s is not a block format", f)
	}
	if cols%f.blockLen() != 0 {
		return nil, fmt.Errorf("kern: FrozenBlocks: rows of %d weights are not whole blocks of %d", cols, f.blockLen())
	}
	if want := rows * cols / f.blockLen() * f.blockBytes(); len(data) != want {
		return nil, fmt.Errorf("kern: FrozenBlocks: %d bytes for %d×%d %s, want %d", len(data), rows, cols, f, want)
	}
	w := &Frozen{Format: f, Rows: rows, Cols: cols, blk: data}
	if !w.interleaves() {
		w.blk = w.held(len(data))
		copy(w.blk, data)
	}
	w.interleave()
	return w, nil
}

// F32 is an F32 Frozen's float32 matrix (nil for the other formats). Outside the heap
// when w holds its own copy (weightmem.go): valid while w is reachable.
func (w *Frozen) F32() []float32 { return w.f32 }

// Blocks is a block format's bytes in llama.cpp's layout, rows in order (nil in f32 and
// bf16): the stored bytes (valid while w is reachable: weightmem.go), or a copy put back
// together where they are kept interleaved.
func (w *Frozen) Blocks() []byte {
	if w.ilv != nil {
		var buf []byte
		return w.kRows(&buf, 0, w.Rows, 0, w.Cols/w.Format.blockLen())
	}
	return w.blk
}

// Bytes is the memory the stored weights take.
func (w *Frozen) Bytes() int {
	return 4*len(w.f32) + 2*len(w.bf) + len(w.blk) + len(w.ilv)
}

// Row writes row r, widened to float32, to dst[:Cols].
func (w *Frozen) Row(dst []float32, r int) {
	w.rowSeg(dst[:w.Cols], r, 0)
	runtime.KeepAlive(w) // its memory is unmapped when it is collected (weightmem.go)
}

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
	case Q4_K, Q6_K, Q5_0:
		w.rowSegK(dst, r, c0)
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
