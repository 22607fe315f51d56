package safetensors

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

func TestRoundTripAndConversions(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.safetensors")
	f32 := FromFloat32("a.weight", []int{2, 3}, []float32{1, -2, 3.5, 0, 1e-3, -7})
	bf := FromFloat32AsBF16("b", []int{3}, []float32{1, -2.5, 3})
	if err := WriteFile(path, []Tensor{bf, f32}, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["format"] != "pt" || len(f.Tensors) != 2 {
		t.Fatalf("%+v", f)
	}
	a, _ := f.Get("a.weight")
	v, _ := a.Float32()
	if v[2] != 3.5 || v[5] != -7 {
		t.Fatalf("f32 %v", v)
	}
	b, _ := f.Get("b")
	bv, _ := b.Float32()
	if bv[1] != -2.5 {
		t.Fatalf("bf16 %v", bv)
	}
}

func TestF16(t *testing.T) {
	t.Parallel()
	for h, want := range map[uint16]float32{0x3c00: 1, 0xc000: -2, 0x0001: float32(math.Pow(2, -24)), 0x7c00: float32(math.Inf(1)), 0x0000: 0} {
		if got := F16ToFloat32(h); got != want {
			t.Errorf("%#04x: %v want %v", h, got, want)
		}
	}
	if !math.IsNaN(float64(F16ToFloat32(0x7e00))) {
		t.Error("NaN")
	}
}

func TestMalformedFilesAreNamed(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	_ = Encode(&buf, []Tensor{FromFloat32("x", []int{4}, []float32{1, 2, 3, 4})}, nil)
	good := buf.Bytes()
	cases := map[string][]byte{
		"too short":   good[:4],
		"truncated":   good[:len(good)-3],
		"header past": append([]byte{0xff, 0xff, 0, 0, 0, 0, 0, 0}, good[8:]...),
		"bad json":    append(append([]byte{}, good[:8]...), bytes.Repeat([]byte("{"), len(good)-8)...),
	}
	for name, b := range cases {
		_, err := Read(bytes.NewReader(b), int64(len(b)), "model.safetensors")
		if err == nil || !strings.Contains(err.Error(), "model.safetensors") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	_ = Encode(&buf, []Tensor{FromFloat32("x", []int{2}, []float32{1, 2}), FromFloat32AsBF16("y", []int{1}, []float32{3})}, map[string]string{"k": "v"})
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Read(bytes.NewReader(b), int64(len(b)), "fuzz")
		if err != nil {
			return
		}
		for _, tt := range file.Tensors {
			_, _ = tt.Float32()
		}
	})
}
