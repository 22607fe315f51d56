package gguf

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
)

// dequantFixture is written by tools/ggufref/reference.py with the gguf Python package.
type dequantFixture struct {
	Cases []struct {
		Type   string    `json:"type"`
		Code   uint32    `json:"code"`
		Raw    string    `json:"raw"`
		Values []float32 `json:"values"`
	} `json:"cases"`
}

// TestDequantizeMatchesGGUFPackage compares every block format with ggml's own Python
// dequantisation on random blocks.
func TestDequantizeMatchesGGUFPackage(t *testing.T) {
	t.Parallel()
	var fx dequantFixture
	readJSON(t, "testdata/dequant.json", &fx)
	seen := map[string]bool{}
	for _, c := range fx.Cases {
		raw, err := hex.DecodeString(c.Raw)
		if err != nil {
			t.Fatal(err)
		}
		tt := TensorType(c.Code)
		if tt.String() != c.Type {
			t.Errorf("type %d is %s here, %s in gguf", c.Code, tt, c.Type)
		}
		out := make([]float32, len(c.Values))
		if err := Dequantize(tt, raw, out); err != nil {
			t.Fatalf("%s: %v", c.Type, err)
		}
		for i := range out {
			if !close32(out[i], c.Values[i]) {
				t.Fatalf("%s: value %d = %g, gguf gives %g", c.Type, i, out[i], c.Values[i])
			}
		}
		seen[c.Type] = true
	}
	for _, want := range strings.Split(SupportedTypes(), ", ") {
		if !seen[want] {
			t.Errorf("no reference case for %s", want)
		}
	}
}

// close32 allows for the reference's float32 rounding order (it computes d·q − m in
// numpy with a different association).
func close32(a, b float32) bool {
	return math.Abs(float64(a-b)) <= 1e-6+1e-5*math.Abs(float64(b))
}

// TestReadReferenceFile reads a file written by gguf.GGUFWriter: every metadata type and
// tensors of four types.
func TestReadReferenceFile(t *testing.T) {
	t.Parallel()
	f, err := Open("testdata/ref.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Version != 3 {
		t.Errorf("version %d", f.Version)
	}
	want := map[string]any{"t.u8": uint8(200), "t.i8": int8(-100), "t.u16": uint16(60000), "t.i16": int16(-30000),
		"t.u32": uint32(4000000000), "t.i32": int32(-2000000000), "t.f32": float32(1.5), "t.bool": true,
		"t.str": "héllo ▁ wörld", "t.u64": uint64(1 << 60), "t.i64": int64(-(1 << 60)), "t.f64": 2.25,
		"t.strs": []string{"a", "", "ç"}, "t.i32s": []int32{1, -2, 3}, "t.f32s": []float32{0.5, -1.25},
		"general.architecture": "llama"}
	for k, v := range want {
		kv, ok := f.Lookup(k)
		if !ok {
			t.Errorf("key %s missing", k)
			continue
		}
		if !reflect.DeepEqual(kv.Value, v) {
			t.Errorf("%s = %#v, want %#v", k, kv.Value, v)
		}
	}
	if u, err := f.Uint("t.u32"); err != nil || u != 4000000000 {
		t.Errorf("Uint = %d, %v", u, err)
	}
	if _, err := f.Uint("t.i8"); err == nil || !strings.Contains(err.Error(), `"t.i8"`) {
		t.Errorf("negative Uint: %v", err)
	}
	if _, err := f.String("t.u8"); err == nil || !strings.Contains(err.Error(), `"t.u8"`) {
		t.Errorf("String of a uint8: %v", err)
	}
	if _, err := f.String("nope"); err == nil || !strings.Contains(err.Error(), `"nope" is missing`) {
		t.Errorf("missing key: %v", err)
	}
	var ref struct {
		Tensors map[string]struct {
			Shape  []int     `json:"shape"`
			Values []float32 `json:"values"`
		} `json:"tensors"`
	}
	readJSON(t, "testdata/ref.json", &ref)
	if len(f.Tensors) != len(ref.Tensors) {
		t.Fatalf("%d tensors, want %d", len(f.Tensors), len(ref.Tensors))
	}
	for name, r := range ref.Tensors {
		ti, ok := f.Tensor(name)
		if !ok {
			t.Fatalf("tensor %s missing", name)
		}
		if !reflect.DeepEqual(ti.Shape(), r.Shape) {
			t.Errorf("%s shape %v, want %v", name, ti.Shape(), r.Shape)
		}
		v, err := f.Float32(ti)
		if err != nil {
			t.Fatal(err)
		}
		for i := range v {
			if !close32(v[i], r.Values[i]) {
				t.Fatalf("%s[%d] = %g, want %g", name, i, v[i], r.Values[i])
			}
		}
	}
}

// TestTruncatedFilesAreRefused: every proper prefix of a valid file is an error (the
// header names what it was reading), never a panic.
func TestTruncatedFilesAreRefused(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/ref.gguf")
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(b); n++ {
		if _, err := Read(bytes.NewReader(b[:n]), int64(n)); err == nil {
			t.Fatalf("a %d-byte prefix of a %d-byte file was accepted", n, len(b))
		}
	}
	_, err = Read(bytes.NewReader(b[:len(b)-1]), int64(len(b)-1))
	if err == nil || !strings.Contains(err.Error(), `tensor "d.q4_k"`) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("a file missing its last byte: %v (want the last tensor named)", err)
	}
}

// TestMalformedHeaders: hostile counts and types are refused before any allocation, each
// error naming what is wrong.
func TestMalformedHeaders(t *testing.T) {
	t.Parallel()
	hdr := func(nt, nkv uint64, rest ...[]byte) []byte {
		var b bytes.Buffer
		b.WriteString("GGUF")
		binary.Write(&b, binary.LittleEndian, uint32(3))
		binary.Write(&b, binary.LittleEndian, nt)
		binary.Write(&b, binary.LittleEndian, nkv)
		for _, r := range rest {
			b.Write(r)
		}
		return b.Bytes()
	}
	str := func(s string) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(s)))
		return append(b, s...)
	}
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	cases := []struct {
		name, want string
		data       []byte
	}{
		{"magic", "not a GGUF file", []byte("GGML\x03\x00\x00\x00")},
		{"version", "version 7", append([]byte("GGUF"), 7, 0, 0, 0)},
		{"huge tensor count", "tensor_count", hdr(1<<60, 0)},
		{"huge kv count", "metadata_kv_count", hdr(0, 1<<40)},
		{"huge string", `metadata entry 0`, hdr(0, 1, u64(1<<50))},
		{"unknown value type", `metadata key "k": value type 99`, hdr(0, 1, str("k"), u32(99))},
		{"huge array", `metadata key "k": array length`, hdr(0, 1, str("k"), u32(uint32(TypeArray)), u32(uint32(TypeUint32)), u64(1<<40))},
		{"bad bool", `metadata key "k": bool value 7`, hdr(0, 1, str("k"), u32(uint32(TypeBool)), []byte{7})},
		{"duplicate key", `"k" appears twice`, hdr(0, 2, str("k"), u32(uint32(TypeUint8)), []byte{1}, str("k"), u32(uint32(TypeUint8)), []byte{1})},
		{"bad alignment", "general.alignment", hdr(0, 1, str("general.alignment"), u32(uint32(TypeUint32)), u32(3))},
		{"too many dims", `tensor 0 ("w"): n_dims 5`, hdr(1, 0, str("w"), u32(5))},
		{"unknown tensor type", `tensor 0 ("w"): tensor type IQ2_XXS (16) is not supported`, hdr(1, 0, str("w"), u32(1), u64(32), u32(16), u64(0))},
		{"ragged row", `tensor 0 ("w"): row length 33 is not a multiple of Q4_0's block of 32`, hdr(1, 0, str("w"), u32(1), u64(33), u32(uint32(Q4_0)), u64(0))},
		{"data past the end", `tensor "w": data`, hdr(1, 0, str("w"), u32(1), u64(32), u32(uint32(F32)), u64(0))},
		{"misaligned", `tensor "w": offset 4`, hdr(1, 0, str("w"), u32(1), u64(1), u32(uint32(F32)), u64(4))},
		{"not utf-8", "not valid UTF-8", hdr(0, 1, str("\xff"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := append(c.data, make([]byte, 64)...) // room, so only the field at fault is wrong
			if c.name == "data past the end" {
				data = c.data
			}
			_, err := Read(bytes.NewReader(data), int64(len(data)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// FuzzRead: any input is decoded or refused with an error; never a panic, and a decoded
// file's tensors lie inside it.
func FuzzRead(f *testing.F) {
	b, err := os.ReadFile("testdata/ref.gguf")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:100])
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Read(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for _, ti := range g.Tensors {
			if uint64(g.DataOffset)+ti.Offset+ti.Bytes() > uint64(len(data)) {
				t.Fatalf("tensor %s lies past the end", ti.Name)
			}
			if _, err := g.Float32(ti); err != nil {
				t.Fatalf("tensor %s: %v", ti.Name, err)
			}
		}
	})
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
