package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"unicode/utf8"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// MaxDims is the most dimensions a ggml tensor has.
const MaxDims = 4

// ValueType is a metadata value's type tag.
type ValueType uint32

// The metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// fixedSize is the encoded size of a scalar type (0 for string and array).
func (t ValueType) fixedSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// KV is one metadata entry. Value holds a Go value of the type's natural kind: uint8,
// int8, uint16, int16, uint32, int32, float32, bool, string, uint64, int64, float64; an
// array is a typed slice of those ([]string, []int32, []float32…), or []any for an
// array of arrays.
type KV struct {
	Key   string
	Type  ValueType
	Value any
}

// TensorInfo is one entry of the tensor directory.
type TensorInfo struct {
	Name string
	// Dims are ggml's dimensions, innermost first (ne[0] is the row length). Shape
	// gives them outermost first, as safetensors and PyTorch write them.
	Dims []uint64
	Type TensorType
	// Offset is where the data starts, relative to File.DataOffset.
	Offset uint64
}

// Elements is the number of values the tensor holds.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Shape is the tensor's shape outermost first (a [out, in] matrix for a Linear weight).
func (t TensorInfo) Shape() []int {
	s := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		s[len(t.Dims)-1-i] = int(d)
	}
	return s
}

// Bytes is the size of the tensor's data in the file.
func (t TensorInfo) Bytes() uint64 {
	return t.Elements() / uint64(t.Type.BlockSize()) * uint64(t.Type.BlockBytes())
}

// File is a GGUF file's header, metadata and tensor directory; tensor data is read on
// demand through Float32 or Raw.
type File struct {
	Version    uint32
	KV         []KV // in file order
	Tensors    []TensorInfo
	Alignment  uint64
	DataOffset int64 // where tensor data starts

	kv      map[string]int
	tensors map[string]int
	r       io.ReaderAt
	size    int64
	closer  io.Closer
}

// Open reads the header of the GGUF file at path; Close releases it.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	g, err := Read(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	g.closer = f
	return g, nil
}

// Close closes the file Open opened (a no-op for Read's).
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	return f.closer.Close()
}

// Read decodes the header, metadata and tensor directory of a GGUF file of size bytes,
// and checks that every tensor's data lies inside it.
func Read(r io.ReaderAt, size int64) (*File, error) {
	d := &decoder{r: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 1<<16), size: size}
	magic := d.bytes(4, "magic")
	if d.err == nil && string(magic) != Magic {
		return nil, fmt.Errorf("gguf: not a GGUF file (magic %q, want %q)", magic, Magic)
	}
	f := &File{r: r, size: size, kv: map[string]int{}, tensors: map[string]int{}}
	f.Version = d.u32("version")
	if d.err == nil && f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("gguf: version %d is not supported (2 or 3)", f.Version)
	}
	nt := d.count("tensor_count", 8+4+8+4+8)
	nkv := d.count("metadata_kv_count", 8+1+4)
	if d.err != nil {
		return nil, fmt.Errorf("gguf: header: %w", d.err)
	}
	for i := uint64(0); i < nkv; i++ {
		key := d.str("metadata key")
		if d.err != nil {
			return nil, fmt.Errorf("gguf: metadata entry %d: %w", i, d.err)
		}
		t := ValueType(d.u32("value type"))
		v := d.value(t, 0)
		if d.err != nil {
			return nil, fmt.Errorf("gguf: metadata key %q: %w", key, d.err)
		}
		if _, dup := f.kv[key]; dup {
			return nil, fmt.Errorf("gguf: metadata key %q appears twice", key)
		}
		f.kv[key] = len(f.KV)
		f.KV = append(f.KV, KV{Key: key, Type: t, Value: v})
	}
	f.Alignment = DefaultAlignment
	if _, ok := f.kv["general.alignment"]; ok {
		a, err := f.Uint("general.alignment")
		if err != nil {
			return nil, err
		}
		if a == 0 || a&(a-1) != 0 || a > 1<<20 {
			return nil, fmt.Errorf("gguf: metadata key \"general.alignment\": %d is not a power of two up to 1 MiB", a)
		}
		f.Alignment = a
	}
	for i := uint64(0); i < nt; i++ {
		ti, err := d.tensorInfo()
		if err != nil {
			return nil, fmt.Errorf("gguf: tensor %d (%q): %w", i, ti.Name, err)
		}
		if _, dup := f.tensors[ti.Name]; dup {
			return nil, fmt.Errorf("gguf: tensor %q appears twice", ti.Name)
		}
		f.tensors[ti.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, ti)
	}
	f.DataOffset = int64(alignUp(uint64(d.pos), f.Alignment))
	for _, t := range f.Tensors {
		if t.Offset%f.Alignment != 0 {
			return nil, fmt.Errorf("gguf: tensor %q: offset %d is not a multiple of the alignment %d", t.Name, t.Offset, f.Alignment)
		}
		end := uint64(f.DataOffset) + t.Offset + t.Bytes()
		if t.Offset > uint64(size) || end > uint64(size) {
			return nil, fmt.Errorf("gguf: tensor %q: data [%d, %d) lies past the end of the file (%d bytes): truncated?", t.Name, uint64(f.DataOffset)+t.Offset, end, size)
		}
	}
	return f, nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// decoder reads little-endian values, keeping the first error and the position, and
// refusing counts the remaining bytes cannot hold.
type decoder struct {
	r    *bufio.Reader
	pos  int64
	size int64
	err  error
	buf  [8]byte
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *decoder) bytes(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if int64(n) > d.size-d.pos {
		d.fail("%s: %d bytes needed at offset %d, the file has %d: truncated", what, n, d.pos, d.size)
		return nil
	}
	var b []byte
	if n <= len(d.buf) {
		b = d.buf[:n]
	} else {
		b = make([]byte, n)
	}
	if _, err := io.ReadFull(d.r, b); err != nil {
		d.fail("%s at offset %d: %w", what, d.pos, err)
		return nil
	}
	d.pos += int64(n)
	return b
}

func (d *decoder) u32(what string) uint32 {
	b := d.bytes(4, what)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (d *decoder) u64(what string) uint64 {
	b := d.bytes(8, what)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

// count reads a uint64 count of items each at least minBytes long and refuses one the
// rest of the file cannot hold.
func (d *decoder) count(what string, minBytes int64) uint64 {
	n := d.u64(what)
	if d.err == nil && n > uint64(d.size-d.pos)/uint64(minBytes) {
		d.fail("%s %d does not fit in the %d bytes left: truncated or corrupt", what, n, d.size-d.pos)
		return 0
	}
	return n
}

func (d *decoder) str(what string) string {
	n := d.count(what+" length", 1)
	b := d.bytes(int(n), what)
	if d.err != nil {
		return ""
	}
	if !utf8.Valid(b) {
		d.fail("%s is not valid UTF-8", what)
		return ""
	}
	return string(b)
}

// value decodes one value of type t; depth bounds nested arrays.
func (d *decoder) value(t ValueType, depth int) any {
	switch t {
	case TypeString:
		return d.str("string value")
	case TypeArray:
		if depth >= 4 {
			d.fail("arrays nested deeper than 4")
			return nil
		}
		et := ValueType(d.u32("array element type"))
		minB := int64(et.fixedSize())
		switch {
		case et == TypeString:
			minB = 8
		case et == TypeArray:
			minB = 12
		case minB == 0:
			d.fail("array element type %d is unknown", uint32(et))
			return nil
		}
		n := d.count("array length", minB)
		if d.err != nil {
			return nil
		}
		return d.array(et, int(n), depth)
	}
	if t.fixedSize() == 0 {
		d.fail("value type %d is unknown", uint32(t))
		return nil
	}
	return d.scalar(t)
}

func (d *decoder) scalar(t ValueType) any {
	b := d.bytes(t.fixedSize(), t.String()+" value")
	if b == nil {
		return zero(t)
	}
	switch t {
	case TypeUint8:
		return b[0]
	case TypeInt8:
		return int8(b[0])
	case TypeBool:
		if b[0] > 1 {
			d.fail("bool value %d is neither 0 nor 1", b[0])
		}
		return b[0] == 1
	case TypeUint16:
		return binary.LittleEndian.Uint16(b)
	case TypeInt16:
		return int16(binary.LittleEndian.Uint16(b))
	case TypeUint32:
		return binary.LittleEndian.Uint32(b)
	case TypeInt32:
		return int32(binary.LittleEndian.Uint32(b))
	case TypeFloat32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b))
	case TypeUint64:
		return binary.LittleEndian.Uint64(b)
	case TypeInt64:
		return int64(binary.LittleEndian.Uint64(b))
	case TypeFloat64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	return nil
}

func zero(t ValueType) any {
	switch t {
	case TypeUint8:
		return uint8(0)
	case TypeInt8:
		return int8(0)
	case TypeBool:
		return false
	case TypeUint16:
		return uint16(0)
	case TypeInt16:
		return int16(0)
	case TypeUint32:
		return uint32(0)
	case TypeInt32:
		return int32(0)
	case TypeFloat32:
		return float32(0)
	case TypeUint64:
		return uint64(0)
	case TypeInt64:
		return int64(0)
	case TypeFloat64:
		return float64(0)
	}
	return nil
}

// array decodes n elements of type et into a typed slice.
func (d *decoder) array(et ValueType, n, depth int) any {
	switch et {
	case TypeString:
		out := make([]string, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			out = append(out, d.str(fmt.Sprintf("string element %d", i)))
		}
		return out
	case TypeArray:
		out := make([]any, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			out = append(out, d.value(TypeArray, depth+1))
		}
		return out
	}
	switch et {
	case TypeUint8:
		return collect[uint8](d, et, n)
	case TypeInt8:
		return collect[int8](d, et, n)
	case TypeBool:
		return collect[bool](d, et, n)
	case TypeUint16:
		return collect[uint16](d, et, n)
	case TypeInt16:
		return collect[int16](d, et, n)
	case TypeUint32:
		return collect[uint32](d, et, n)
	case TypeInt32:
		return collect[int32](d, et, n)
	case TypeFloat32:
		return collect[float32](d, et, n)
	case TypeUint64:
		return collect[uint64](d, et, n)
	case TypeInt64:
		return collect[int64](d, et, n)
	default:
		return collect[float64](d, et, n)
	}
}

func collect[E any](d *decoder, et ValueType, n int) []E {
	out := make([]E, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.scalar(et).(E))
	}
	return out
}

func (d *decoder) tensorInfo() (TensorInfo, error) {
	var t TensorInfo
	t.Name = d.str("tensor name")
	nd := d.u32("n_dims")
	if d.err == nil && (nd == 0 || nd > MaxDims) {
		d.fail("n_dims %d is not between 1 and %d", nd, MaxDims)
	}
	elems := uint64(1)
	for i := uint32(0); i < nd && d.err == nil; i++ {
		v := d.u64("dimension")
		if d.err == nil && (v == 0 || v > uint64(d.size)*2 || elems > math.MaxInt64/v) {
			d.fail("dimension %d is %d: empty or larger than the file could hold", i, v)
		}
		elems *= max(v, 1)
		t.Dims = append(t.Dims, v)
	}
	t.Type = TensorType(d.u32("tensor type"))
	t.Offset = d.u64("tensor offset")
	if d.err != nil {
		return t, d.err
	}
	if !t.Type.Known() {
		return t, fmt.Errorf("tensor type %s is not supported (%s)", t.Type, SupportedTypes())
	}
	if bs := uint64(t.Type.BlockSize()); t.Dims[0]%bs != 0 {
		return t, fmt.Errorf("row length %d is not a multiple of %s's block of %d", t.Dims[0], t.Type, bs)
	}
	if elems > uint64(d.size)*8 { // even 1-bit data could not hold this many values
		return t, fmt.Errorf("%d elements cannot fit in a file of %d bytes", elems, d.size)
	}
	return t, nil
}

// Raw reads a tensor's bytes as stored.
func (f *File) Raw(t TensorInfo) ([]byte, error) {
	n := t.Bytes()
	off := uint64(f.DataOffset) + t.Offset
	if off+n > uint64(f.size) {
		return nil, fmt.Errorf("gguf: tensor %q: data past the end of the file: truncated", t.Name)
	}
	b := make([]byte, n)
	if _, err := f.r.ReadAt(b, int64(off)); err != nil {
		return nil, fmt.Errorf("gguf: tensor %q: read: %w", t.Name, err)
	}
	return b, nil
}

// Float32 reads a tensor and dequantises it to float32, in ggml's order (rows of
// Dims[0] values, the Shape's last axis fastest).
func (f *File) Float32(t TensorInfo) ([]float32, error) {
	raw, err := f.Raw(t)
	if err != nil {
		return nil, err
	}
	out := make([]float32, t.Elements())
	if err := Dequantize(t.Type, raw, out); err != nil {
		return nil, fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
	}
	return out, nil
}
