package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenMatchesReadFile maps a file and checks that every tensor's bytes equal what
// ReadFile reads, also after Release (the pages are read again from the file).
func TestOpenMatchesReadFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.safetensors")
	big := make([]float32, 300_000) // spans many pages
	for i := range big {
		big[i] = float32(i%977) - 400
	}
	ts := []Tensor{FromFloat32AsBF16("a", []int{600, 500}, big), FromFloat32("b", []int{3}, []float32{1, 2, 3}),
		FromFloat32("c", []int{1000, 300}, big)}
	if err := WriteFile(path, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	want, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Metadata["format"] != "pt" || len(m.Tensors) != len(want.Tensors) {
		t.Fatalf("metadata %v, %d tensors", m.Metadata, len(m.Tensors))
	}
	for pass := 0; pass < 2; pass++ {
		for i, w := range want.Tensors {
			g := m.Tensors[i]
			if g.Name != w.Name || g.DType != w.DType || !bytes.Equal(g.Data, w.Data) {
				t.Fatalf("pass %d: tensor %s differs from ReadFile's", pass, w.Name)
			}
			m.Release(g)
		}
	}
}

// TestWriteParallelMatchesWriteFile checks that a file written piece by piece is the file
// WriteFile writes from the same tensors (the same header and layout).
func TestWriteParallelMatchesWriteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := make([]byte, 3*ChunkBytes+10) // several chunks, the last one short
	for i := range data {
		data[i] = byte(i * 7)
	}
	ts := []Tensor{{Name: "z", DType: "U8", Shape: []int{len(data)}, Data: data},
		{Name: "a", DType: "F32", Shape: []int{2, 2}, Data: data[:16]}, {Name: "e", DType: "BF16", Shape: []int{0}, Data: nil}}
	meta := map[string]string{"k": "v"}
	if err := WriteFile(filepath.Join(dir, "a"), ts, meta); err != nil {
		t.Fatal(err)
	}
	es := make([]Entry, len(ts))
	for i, x := range ts {
		es[i] = Entry{Name: x.Name, DType: x.DType, Shape: x.Shape}
	}
	err := WriteParallel(filepath.Join(dir, "b"), es, meta, 3, func(i int, first int64, dst []byte) error {
		w := int64(dtypeSize[es[i].DType])
		copy(dst, ts[i].Data[first*w:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	a, errA := os.ReadFile(filepath.Join(dir, "a"))
	b, errB := os.ReadFile(filepath.Join(dir, "b"))
	if errA != nil || errB != nil || !bytes.Equal(a, b) {
		t.Fatalf("WriteParallel's file differs from WriteFile's (%v, %v)", errA, errB)
	}
}

// FuzzOpen: a mapped file of any bytes either fails to open or gives tensors whose data
// lie inside the mapping and equal what Read reads.
func FuzzOpen(f *testing.F) {
	var buf bytes.Buffer
	_ = Encode(&buf, []Tensor{FromFloat32("x", []int{2}, []float32{1, 2}), FromFloat32AsBF16("y", []int{1}, []float32{3})}, map[string]string{"k": "v"})
	f.Add(buf.Bytes())
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "f.safetensors")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		m, err := Open(path)
		want, rerr := Read(bytes.NewReader(b), int64(len(b)), path)
		if (err == nil) != (rerr == nil) {
			t.Fatalf("Open: %v, Read: %v", err, rerr)
		}
		if err != nil {
			return
		}
		defer m.Close()
		for i, x := range m.Tensors {
			if !bytes.Equal(x.Data, want.Tensors[i].Data) {
				t.Fatalf("tensor %s differs", x.Name)
			}
			m.Release(x)
		}
	})
}
