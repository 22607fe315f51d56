package gguf

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// A file the writer makes reads back through the reader: every metadata type, and
// tensors of each written type within that type's rounding.
func TestWriterRoundTrip(t *testing.T) {
	t.Parallel()
	w := NewWriter()
	meta := map[string]any{
		"general.architecture": "llama", "u8": uint8(7), "i8": int8(-7), "u16": uint16(700), "i16": int16(-700),
		"u32": uint32(70000), "i32": int32(-70000), "f32": float32(1.5), "yes": true, "u64": uint64(1 << 40),
		"i64": int64(-1 << 40), "f64": 2.25, "tokens": []string{"a", "b c", ""}, "types": []int32{1, 3, 6},
		"scores": []float32{0.5, -1},
	}
	keys := []string{"general.architecture", "u8", "i8", "u16", "i16", "u32", "i32", "f32", "yes", "u64", "i64", "f64", "tokens", "types", "scores"}
	for _, k := range keys {
		if err := w.Set(k, meta[k]); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	vals := make([]float32, 64*3)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64())
	}
	tol := map[TensorType]float64{F32: 0, F16: 1e-3, BF16: 8e-3, Q8_0: 1.0 / 127}
	order := []TensorType{F32, F16, BF16, Q8_0}
	for _, typ := range order {
		if err := w.AddTensor("t."+typ.String(), typ, []int{3, 64}, func() ([]byte, error) { return Encode(typ, vals) }); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo: %d, %v (buffer %d)", n, err, buf.Len())
	}
	f, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || len(f.KV) != len(keys) || len(f.Tensors) != len(order) {
		t.Fatalf("version %d, %d keys, %d tensors", f.Version, len(f.KV), len(f.Tensors))
	}
	for i, k := range keys {
		if f.KV[i].Key != k || !reflect.DeepEqual(f.KV[i].Value, meta[k]) {
			t.Errorf("key %d: got %s = %#v, want %s = %#v", i, f.KV[i].Key, f.KV[i].Value, k, meta[k])
		}
	}
	for _, typ := range order {
		ti, ok := f.Tensor("t." + typ.String())
		if !ok || ti.Type != typ || !reflect.DeepEqual(ti.Shape(), []int{3, 64}) {
			t.Fatalf("tensor %s: %+v", typ, ti)
		}
		got, err := f.Float32(ti)
		if err != nil {
			t.Fatal(err)
		}
		for i := range vals {
			// Q8_0's error is relative to its block's largest value.
			scale := 1.0
			if typ == Q8_0 {
				scale = 0
				for _, x := range vals[i/32*32 : i/32*32+32] {
					scale = math.Max(scale, math.Abs(float64(x)))
				}
			} else {
				scale = math.Abs(float64(vals[i]))
			}
			if d := math.Abs(float64(got[i] - vals[i])); d > tol[typ]*scale+1e-7 {
				t.Fatalf("%s value %d: %g, wrote %g", typ, i, got[i], vals[i])
			}
		}
	}
}

func TestF32ToF16(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   float32
		want uint16
	}{
		{0, 0}, {float32(math.Copysign(0, -1)), 0x8000}, {1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65520, 0x7c00},
		{1e6, 0x7c00}, {float32(math.Inf(-1)), 0xfc00}, {5.960464477539063e-08, 0x0001}, {6.103515625e-05, 0x0400},
		{2.98e-08, 0}, {1 + 1.0/2048, 0x3c00}, {1 + 3.0/2048, 0x3c02}, {0.333251953125, 0x3555},
	}
	for _, c := range cases {
		if got := F32ToF16(c.in); got != c.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	if got := F32ToF16(float32(math.NaN())); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Errorf("NaN became %#04x", got)
	}
	if got := F32ToBF16(1 + 1.0/256); got != 0x3f80 { // a tie rounds to even
		t.Errorf("F32ToBF16 tie = %#04x", got)
	}
}

func TestWriterRefuses(t *testing.T) {
	t.Parallel()
	w := NewWriter()
	data := func() ([]byte, error) { return nil, nil }
	for _, c := range []struct {
		err  error
		want string
	}{
		{w.Set("k", 1), "ambiguous"},
		{w.Set("m", []int{1}), "arrays of int"},
		{w.AddTensor("q", Q8_0, []int{2, 48}, data), "multiple of Q8_0's block"},
		{w.AddTensor("z", F32, []int{0}, data), "dimension 0 is 0"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", c.err, c.want)
		}
	}
	if err := w.Set("a", "x"); err != nil {
		t.Fatal(err)
	}
	if err := w.Set("a", "y"); err == nil {
		t.Error("a key set twice was accepted")
	}
	if err := w.AddTensor("short", F32, []int{4}, func() ([]byte, error) { return make([]byte, 8), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTo(&bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "tensor short: 8 bytes") {
		t.Errorf("short data: %v", err)
	}
	if _, err := Encode(Q4_0, []float32{1}); err == nil {
		t.Error("Encode to Q4_0 was accepted")
	}
}
