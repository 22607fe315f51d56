package logstore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeFrame: any payload decodes or is refused, never panics, and a decoded frame
// encodes back to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	frame, _ := encodeFrame([]op{{kind: opSet, key: "ns\x00k", val: []byte("v"), exp: 5}, {kind: opDel, key: "ns\x00x"}})
	f.Add(frame[frameHeader:])
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, p []byte) {
		ops, voffs, err := decodeFrame(p)
		if err != nil {
			return
		}
		for i, o := range ops {
			o.val = p[voffs[i] : voffs[i]+len(o.val)]
			ops[i] = o
		}
		again, _ := encodeFrame(ops)
		if string(again[frameHeader:]) != string(p) {
			t.Fatalf("re-encoding differs")
		}
	})
}

// FuzzOpen: a store file with any contents opens or is refused with an error; it never
// panics, and whatever opens is readable and writable, and checks (the tail an open cut
// off, kept aside, included).
func FuzzOpen(f *testing.F) {
	frame, _ := encodeFrame([]op{{kind: opSet, key: "n\x00k", val: []byte("v")}})
	f.Add([]byte(magic + string(frame)))
	f.Add([]byte(magic + string(frame[:5])))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, "n")
		if err != nil {
			return
		}
		defer s.Close()
		if _, err := Check(path); err != nil {
			t.Fatalf("check after an open: %v", err)
		}
		ctx := context.Background()
		_ = s.Scan(ctx, "", func(string, []byte) error { return nil })
		if err := s.Set(ctx, "new", []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		if v, err := s.Get(ctx, "new"); err != nil || string(v) != "x" {
			t.Fatalf("get after set: %q %v", v, err)
		}
	})
}
