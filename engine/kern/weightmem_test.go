package kern

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// Weight memory is zeroed, aligned and never shared between live allocations; a slab is
// unmapped once it is closed and everything cut from it is released.
func TestWeightBytes(t *testing.T) {
	slabs.Lock()
	slabs.open = nil // a fresh slab for this test
	slabs.Unlock()
	var bufs [][]byte
	var rels []func()
	for _, n := range []int{1, 100, 4096, 1 << 20, 3} {
		b, rel := weightBytes(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("weightBytes(%d): len %d cap %d", n, len(b), cap(b))
		}
		if p := uintptr(unsafe.Pointer(&b[0])); p%memAlign != 0 {
			t.Errorf("weightBytes(%d) at %#x: not %d-byte aligned", n, p, memAlign)
		}
		for i, v := range b {
			if v != 0 {
				t.Fatalf("weightBytes(%d)[%d] = %d, want zeroed memory", n, i, v)
			}
		}
		for i := range b {
			b[i] = byte(len(bufs) + 1)
		}
		bufs, rels = append(bufs, b), append(rels, rel)
	}
	for i, b := range bufs {
		for _, v := range b {
			if v != byte(i+1) {
				t.Fatalf("allocation %d overwritten by another", i)
			}
		}
	}
	slabs.Lock()
	first := slabs.open
	unmapped := 0
	first.unmap = func() { unmapped++ } // the mapping stays: the test keeps writing it above
	slabs.Unlock()
	if first.live != len(bufs) {
		t.Fatalf("slab holds %d live allocations, want %d", first.live, len(bufs))
	}
	// More than is left in the slab: a new one opens, the first closes.
	for i := 0; i < 4 && slabs.open == first; i++ {
		_, rel := weightBytes(slabBytes / 4)
		if slabs.open == first {
			rels = append(rels, rel)
		} else {
			defer rel()
		}
	}
	if slabs.open == first || !first.closed {
		t.Fatal("a full slab stayed open")
	}
	for _, rel := range rels[1:] {
		rel()
	}
	rels[1]()                             // released twice: counted once
	if unmapped != 0 || first.live != 1 { // rels[0] still holds it
		t.Fatalf("unmapped %d times with %d live allocations, want 0 and 1", unmapped, first.live)
	}
	rels[0]()
	if unmapped != 1 || first.live != 0 {
		t.Fatalf("unmapped %d times with %d live allocations, want once and 0", unmapped, first.live)
	}
}

// A matrix's memory is released when it is collected, and advised for huge pages on
// Linux (the mapping's VmFlags carry "hg").
func TestFrozenWeightMemory(t *testing.T) {
	slabs.Lock()
	slabs.open = nil
	slabs.Unlock()
	advised := adviceShows(t)
	rng := rand.New(rand.NewPCG(5, 6))
	src := randSlice(rng, 64*96)
	for _, f := range allFormats {
		w := NewFrozen(src, 64, 96, f)
		if f == F32 {
			continue // aliases src
		}
		mem := unsafe.Pointer(unsafe.SliceData(w.Blocks()))
		switch {
		case w.bf != nil:
			mem = unsafe.Pointer(&w.bf[0])
		case w.ilv != nil:
			mem = unsafe.Pointer(&w.ilv[0])
		}
		if advised && !strings.Contains(vmFlags(t, uintptr(mem)), " hg") {
			t.Errorf("%s: weights not advised for huge pages", f)
		}
	}
	slabs.Lock()
	s := slabs.open
	slabs.Unlock()
	if s == nil || s.live == 0 {
		t.Fatal("no matrix in weight memory")
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		runtime.GC()
		slabs.Lock()
		live := s.live
		slabs.Unlock()
		if live == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d allocations still live after their matrices were collected", live)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
