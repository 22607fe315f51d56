package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"reflect"
)

// Writer builds a GGUF file (version 3): metadata entries and tensor descriptions are
// added first, then WriteTo streams the file, asking each tensor for its data in the
// order the tensors were added, so an exporter holds one tensor's bytes at a time.
type Writer struct {
	kv      []KV
	keys    map[string]bool
	tensors []writerTensor
	names   map[string]bool
}

type writerTensor struct {
	info TensorInfo
	data func() ([]byte, error)
}

// NewWriter returns an empty writer with ggml's default alignment (32 bytes).
func NewWriter() *Writer {
	return &Writer{keys: map[string]bool{}, names: map[string]bool{}}
}

// Set adds one metadata entry. The value's Go type gives the GGUF type: uint8, int8,
// uint16, int16, uint32, int32, float32, bool, string, uint64, int64, float64, or a
// slice of one of those (an array). A key may be set once.
func (w *Writer) Set(key string, value any) error {
	if w.keys[key] {
		return fmt.Errorf("gguf writer: key %s is set twice", key)
	}
	t, err := valueTypeOf(reflect.TypeOf(value))
	if err != nil {
		return fmt.Errorf("gguf writer: key %s: %w", key, err)
	}
	w.keys[key] = true
	w.kv = append(w.kv, KV{Key: key, Type: t, Value: value})
	return nil
}

// Value is the value set for key (nil when it is not set).
func (w *Writer) Value(key string) any {
	for _, kv := range w.kv {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

var goTypes = map[reflect.Kind]ValueType{
	reflect.Uint8: TypeUint8, reflect.Int8: TypeInt8, reflect.Uint16: TypeUint16, reflect.Int16: TypeInt16,
	reflect.Uint32: TypeUint32, reflect.Int32: TypeInt32, reflect.Float32: TypeFloat32, reflect.Bool: TypeBool,
	reflect.String: TypeString, reflect.Uint64: TypeUint64, reflect.Int64: TypeInt64, reflect.Float64: TypeFloat64,
}

func valueTypeOf(t reflect.Type) (ValueType, error) {
	if t == nil {
		return 0, fmt.Errorf("a nil value has no GGUF type")
	}
	if t.Kind() == reflect.Slice {
		if _, ok := goTypes[t.Elem().Kind()]; !ok {
			return 0, fmt.Errorf("arrays of %s have no GGUF type", t.Elem())
		}
		return TypeArray, nil
	}
	vt, ok := goTypes[t.Kind()]
	if !ok {
		return 0, fmt.Errorf("%s has no GGUF type (int and uint are ambiguous: use a sized type)", t)
	}
	return vt, nil
}

// AddTensor describes a tensor of shape (outermost first, as safetensors writes it) and
// type typ; data is called once, during WriteTo, and must return exactly the encoded
// bytes (Encode makes them from float32 values).
func (w *Writer) AddTensor(name string, typ TensorType, shape []int, data func() ([]byte, error)) error {
	if w.names[name] {
		return fmt.Errorf("gguf writer: tensor %s is added twice", name)
	}
	if !typ.Known() {
		return fmt.Errorf("gguf writer: tensor %s: type %s is not written", name, typ)
	}
	if len(shape) == 0 || len(shape) > MaxDims {
		return fmt.Errorf("gguf writer: tensor %s: %d dimensions (1 to %d)", name, len(shape), MaxDims)
	}
	dims := make([]uint64, len(shape))
	for i, s := range shape {
		if s <= 0 {
			return fmt.Errorf("gguf writer: tensor %s: dimension %d is %d", name, i, s)
		}
		dims[len(shape)-1-i] = uint64(s)
	}
	if dims[0]%uint64(typ.BlockSize()) != 0 {
		return fmt.Errorf("gguf writer: tensor %s: row length %d is not a multiple of %s's block of %d", name, dims[0], typ, typ.BlockSize())
	}
	w.names[name] = true
	w.tensors = append(w.tensors, writerTensor{info: TensorInfo{Name: name, Dims: dims, Type: typ}, data: data})
	return nil
}

// Tensors lists the described tensors in file order, with their offsets as WriteTo
// places them.
func (w *Writer) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(w.tensors))
	off := uint64(0)
	for i, t := range w.tensors {
		out[i] = t.info
		out[i].Offset = off
		off = alignUp(off+t.info.Bytes(), DefaultAlignment)
	}
	return out
}

// WriteTo writes the file. An error from a tensor's data function, or data of the wrong
// length, stops the write with the tensor named (what was written is then not a valid
// file; callers write into a temporary file and rename it).
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	cw := &countingWriter{w: out}
	bw := bufio.NewWriterSize(cw, 1<<20)
	e := &encoder{w: bw}
	e.raw([]byte(Magic))
	e.u32(3)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.kv)))
	for _, kv := range w.kv {
		e.str(kv.Key)
		e.u32(uint32(kv.Type))
		e.value(reflect.ValueOf(kv.Value))
	}
	infos := w.Tensors()
	for _, t := range infos {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
	}
	e.pad(DefaultAlignment)
	for i, t := range w.tensors {
		if e.err != nil {
			break
		}
		b, err := t.data()
		if err != nil {
			return cw.n, fmt.Errorf("gguf writer: tensor %s: %w", t.info.Name, err)
		}
		if uint64(len(b)) != infos[i].Bytes() {
			return cw.n, fmt.Errorf("gguf writer: tensor %s: %d bytes of data, %s %v needs %d", t.info.Name, len(b), t.info.Type, t.info.Shape(), infos[i].Bytes())
		}
		e.raw(b)
		e.pad(DefaultAlignment)
	}
	if e.err == nil {
		e.err = bw.Flush()
	}
	return cw.n, e.err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// encoder writes little-endian values, keeping the first error and the offset.
type encoder struct {
	w   io.Writer
	n   uint64
	err error
}

func (e *encoder) raw(b []byte) {
	if e.err != nil {
		return
	}
	var n int
	n, e.err = e.w.Write(b)
	e.n += uint64(n)
}

func (e *encoder) u32(v uint32) { e.raw(binary.LittleEndian.AppendUint32(nil, v)) }
func (e *encoder) u64(v uint64) { e.raw(binary.LittleEndian.AppendUint64(nil, v)) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.raw([]byte(s)) }

func (e *encoder) pad(a uint64) {
	if r := e.n % a; r != 0 {
		e.raw(make([]byte, a-r))
	}
}

func (e *encoder) value(v reflect.Value) {
	if v.Kind() == reflect.Slice {
		et, _ := valueTypeOf(v.Type().Elem())
		e.u32(uint32(et))
		e.u64(uint64(v.Len()))
		for i := range v.Len() {
			e.value(v.Index(i))
		}
		return
	}
	var b []byte
	switch v.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		b = binary.LittleEndian.AppendUint64(nil, v.Uint())[:v.Type().Size()]
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b = binary.LittleEndian.AppendUint64(nil, uint64(v.Int()))[:v.Type().Size()]
	case reflect.Float32:
		b = binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(v.Float())))
	case reflect.Float64:
		b = binary.LittleEndian.AppendUint64(nil, math.Float64bits(v.Float()))
	case reflect.Bool:
		b = []byte{0}
		if v.Bool() {
			b[0] = 1
		}
	case reflect.String:
		e.str(v.String())
		return
	}
	e.raw(b)
}

// Encode turns float32 values into the bytes of type t: F32, F16 and BF16 rounded to
// nearest even, Q8_0 quantised as ggml's reference quantiser does (per block of 32: the
// scale max|x|/127 stored as F16, each value x/scale rounded half away from zero).
func Encode(t TensorType, v []float32) ([]byte, error) {
	switch t {
	case F32:
		out := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
		}
		return out, nil
	case F16, BF16:
		conv := F32ToF16
		if t == BF16 {
			conv = F32ToBF16
		}
		out := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(out[2*i:], conv(x))
		}
		return out, nil
	case Q8_0:
		return quantizeQ8_0(v)
	}
	return nil, fmt.Errorf("encoding to %s is not supported (F32, F16, BF16, Q8_0)", t)
}

func quantizeQ8_0(v []float32) ([]byte, error) {
	const bs = 32
	if len(v)%bs != 0 {
		return nil, fmt.Errorf("Q8_0 needs a multiple of %d values, got %d", bs, len(v))
	}
	out := make([]byte, 0, len(v)/bs*(2+bs))
	for b := 0; b < len(v); b += bs {
		blk := v[b : b+bs]
		amax := float32(0)
		for _, x := range blk {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("value %d is not finite", b)
			}
			amax = max(amax, float32(math.Abs(float64(x))))
		}
		d := amax / 127
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		out = binary.LittleEndian.AppendUint16(out, F32ToF16(d))
		for _, x := range blk {
			out = append(out, byte(int8(math.Round(float64(x*id)))))
		}
	}
	return out, nil
}

// F32ToBF16 rounds f to bfloat16 (nearest, ties to even; NaN stays NaN).
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// F32ToF16 rounds f to IEEE half precision (nearest, ties to even; beyond its range to
// ±Inf; NaN stays NaN).
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	e8 := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if e8 == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	exp := e8 - 127 + 15
	if exp >= 31 {
		return sign | 0x7c00
	}
	if exp <= 0 { // a subnormal half (or zero)
		if exp < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint32(14 - exp)
		h := m >> shift
		rem, halfway := m&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > halfway || (rem == halfway && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | mant>>13
	if rem := mant & 0x1fff; rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry into the exponent is the right rounding (up to Inf)
	}
	return sign | uint16(h)
}
