package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
)

// Tensor is one named tensor with its raw little-endian bytes.
type Tensor struct {
	Name  string
	DType string // F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL
	Shape []int
	Data  []byte
}

// File is a decoded safetensors file.
type File struct {
	Tensors  []Tensor
	Metadata map[string]string
	index    map[string]int
}

// Get returns the tensor named name.
func (f *File) Get(name string) (Tensor, bool) {
	if f.index == nil {
		f.index = make(map[string]int, len(f.Tensors))
		for i, t := range f.Tensors {
			f.index[t.Name] = i
		}
	}
	i, ok := f.index[name]
	if !ok {
		return Tensor{}, false
	}
	return f.Tensors[i], true
}

var dtypeSize = map[string]int{"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1}

// FromFloat32 builds an F32 tensor.
func FromFloat32(name string, shape []int, data []float32) Tensor {
	b := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return Tensor{Name: name, DType: "F32", Shape: append([]int(nil), shape...), Data: b}
}

// FromFloat32AsBF16 builds a BF16 tensor (round to nearest even).
func FromFloat32AsBF16(name string, shape []int, data []float32) Tensor {
	b := make([]byte, 2*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint16(b[2*i:], BF16FromFloat32(v))
	}
	return Tensor{Name: name, DType: "BF16", Shape: append([]int(nil), shape...), Data: b}
}

// BF16FromFloat32 rounds to bfloat16 (nearest even; NaN stays NaN).
func BF16FromFloat32(f float32) uint16 {
	u := math.Float32bits(f)
	if f != f {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + ((u >> 16) & 1)
	return uint16(u >> 16)
}

// F16ToFloat32 decodes an IEEE half, including subnormals, infinities and NaN.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalise
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		man &= 0x3ff
		return math.Float32frombits(sign | e<<23 | man<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | man<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// Elements is the number of elements the shape describes.
func (t Tensor) Elements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Float32 converts an F32, BF16 or F16 tensor to float32 values.
func (t Tensor) Float32() ([]float32, error) {
	n := t.Elements()
	out := make([]float32, n)
	switch t.DType {
	case "F32":
		if len(t.Data) != 4*n {
			return nil, fmt.Errorf("tensor %s: %d bytes for %d F32 elements", t.Name, len(t.Data), n)
		}
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case "BF16":
		if len(t.Data) != 2*n {
			return nil, fmt.Errorf("tensor %s: %d bytes for %d BF16 elements", t.Name, len(t.Data), n)
		}
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(t.Data[2*i:])) << 16)
		}
	case "F16":
		if len(t.Data) != 2*n {
			return nil, fmt.Errorf("tensor %s: %d bytes for %d F16 elements", t.Name, len(t.Data), n)
		}
		for i := range out {
			out[i] = F16ToFloat32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	default:
		return nil, fmt.Errorf("tensor %s: dtype %s is not a float type (want F32, BF16 or F16)", t.Name, t.DType)
	}
	return out, nil
}

type headerEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

const maxHeader = 100 << 20

// ReadFile reads a whole safetensors file.
func ReadFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return Read(f, fi.Size(), path)
}

// Read decodes a safetensors file of the given size; name is used in errors.
func Read(r io.ReaderAt, size int64, name string) (*File, error) {
	out, offs, err := readHeader(r, size, name)
	if err != nil {
		return nil, err
	}
	for i := range out.Tensors {
		t := &out.Tensors[i]
		buf := make([]byte, offs[i][1]-offs[i][0])
		if _, err := r.ReadAt(buf, offs[i][0]); err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %q: read data: %w", name, t.Name, err)
		}
		t.Data = buf
	}
	return out, nil
}

// readHeader decodes and checks the header of a safetensors file of the given size: the
// tensors (in name order, without data) and each one's [start, end) file offsets.
func readHeader(r io.ReaderAt, size int64, name string) (*File, [][2]int64, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("safetensors %s: %s", name, fmt.Sprintf(format, args...))
	}
	if size < 8 {
		return nil, nil, bad("file is %d bytes, too short for a header", size)
	}
	var lb [8]byte
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return nil, nil, bad("read header length: %v", err)
	}
	hl := binary.LittleEndian.Uint64(lb[:])
	if hl > maxHeader || int64(hl) > size-8 {
		return nil, nil, bad("header length %d exceeds the file (%d bytes) or the 100 MiB limit: truncated or not a safetensors file", hl, size)
	}
	hb := make([]byte, hl)
	if _, err := r.ReadAt(hb, 8); err != nil {
		return nil, nil, bad("read header: %v", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hb, &raw); err != nil {
		return nil, nil, bad("header is not valid JSON: %v", err)
	}
	out := &File{Metadata: map[string]string{}}
	base := 8 + int64(hl)
	dataLen := size - base
	type span struct {
		a, b int64
		name string
	}
	var spans []span
	for k, v := range raw {
		if k == "__metadata__" {
			if err := json.Unmarshal(v, &out.Metadata); err != nil {
				return nil, nil, bad("__metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		var e headerEntry
		if err := json.Unmarshal(v, &e); err != nil {
			return nil, nil, bad("tensor %q: bad header entry: %v", k, err)
		}
		w, ok := dtypeSize[e.DType]
		if !ok {
			return nil, nil, bad("tensor %q: unknown dtype %q", k, e.DType)
		}
		n := int64(1)
		for _, d := range e.Shape {
			if d < 0 {
				return nil, nil, bad("tensor %q: negative dimension in shape %v", k, e.Shape)
			}
			n *= int64(d)
			if n > dataLen {
				return nil, nil, bad("tensor %q: shape %v is larger than the file", k, e.Shape)
			}
		}
		a, b := e.DataOffsets[0], e.DataOffsets[1]
		if a < 0 || b < a || b > dataLen {
			return nil, nil, bad("tensor %q: data_offsets [%d, %d] outside the data section of %d bytes (truncated file?)", k, a, b, dataLen)
		}
		if b-a != n*int64(w) {
			return nil, nil, bad("tensor %q: %d bytes for shape %v of %s (want %d)", k, b-a, e.Shape, e.DType, n*int64(w))
		}
		spans = append(spans, span{a, b, k})
		out.Tensors = append(out.Tensors, Tensor{Name: k, DType: e.DType, Shape: e.Shape})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].a < spans[j].a })
	for i := 1; i < len(spans); i++ {
		if spans[i].a < spans[i-1].b {
			return nil, nil, bad("tensors %q and %q overlap", spans[i-1].name, spans[i].name)
		}
	}
	byName := map[string]span{}
	for _, s := range spans {
		byName[s.name] = s
	}
	sort.Slice(out.Tensors, func(i, j int) bool { return out.Tensors[i].Name < out.Tensors[j].Name })
	offs := make([][2]int64, len(out.Tensors))
	for i, t := range out.Tensors {
		s := byName[t.Name]
		offs[i] = [2]int64{base + s.a, base + s.b}
	}
	return out, offs, nil
}

// Encode serialises tensors (in name order) and metadata.
func Encode(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	ts := append([]Tensor(nil), tensors...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	entries := make([]Entry, len(ts))
	for i, t := range ts {
		entries[i] = Entry{Name: t.Name, DType: t.DType, Shape: t.Shape}
		if w, ok := dtypeSize[t.DType]; ok && len(t.Data) != w*t.Elements() {
			return fmt.Errorf("safetensors: tensor %s: %d bytes for shape %v of %s", t.Name, len(t.Data), t.Shape, t.DType)
		}
	}
	hb, _, err := EncodeHeader(entries, metadata)
	if err != nil {
		return err
	}
	if _, err := w.Write(hb); err != nil {
		return err
	}
	for _, t := range ts {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile writes a safetensors file atomically (temp file, fsync, rename).
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := Encode(bw, tensors, metadata); err != nil {
		tmp.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
