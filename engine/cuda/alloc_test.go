package cuda

import (
	"fmt"
	"testing"
)

// fakeMemory is a device with capacity bytes.
type fakeMemory struct {
	capacity, used uintptr
	next           uintptr
	blocks         map[uintptr]uintptr
	allocs, frees  int
}

func (f *fakeMemory) raw(n uintptr) (uintptr, error) {
	if f.used+n > f.capacity {
		return 0, fmt.Errorf("cuMemAlloc: %w", errOutOfMemory)
	}
	f.next += 1 << 30
	f.blocks[f.next] = n
	f.used += n
	f.allocs++
	return f.next, nil
}

func (f *fakeMemory) release(p uintptr) error {
	n, ok := f.blocks[p]
	if !ok {
		return fmt.Errorf("free of unknown %#x", p)
	}
	delete(f.blocks, p)
	f.used -= n
	f.frees++
	return nil
}

func TestRoundSize(t *testing.T) {
	for _, c := range []struct{ in, want uintptr }{
		{1, 512}, {512, 512}, {513, 1024}, {1000, 1024}, {4096, 4096}, {4097, 5120},
		{1 << 20, 1 << 20}, {1<<20 + 1, 1<<20 + 1<<18}, {3 << 20, 3 << 20},
	} {
		if got := roundSize(c.in); got != c.want {
			t.Errorf("roundSize(%d) = %d, want %d", c.in, got, c.want)
		}
		if got := roundSize(c.in); got < c.in || float64(got) > 1.25*float64(c.in)+512 {
			t.Errorf("roundSize(%d) = %d wastes too much", c.in, got)
		}
	}
}

func TestAllocatorReusesFreedBlocks(t *testing.T) {
	f := &fakeMemory{capacity: 1 << 30, blocks: map[uintptr]uintptr{}}
	a := newAllocator(f.raw, f.release, 0)
	p, err := a.get(1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.put(p); err != nil {
		t.Fatal(err)
	}
	q, _ := a.get(900) // same rounded size
	if q != p || f.allocs != 1 {
		t.Fatalf("a freed block of the same size was not reused: %#x vs %#x, %d device allocations", q, p, f.allocs)
	}
	r, _ := a.get(5000)
	if r == p || f.allocs != 2 {
		t.Fatal("a block was handed out twice")
	}
	if s := a.stats(); s.InUse != 1024+5120 || s.Reserved != 1024+5120 || s.Peak != s.InUse {
		t.Fatalf("stats %+v", s)
	}
	if err := a.put(r + 1); err == nil {
		t.Fatal("freeing an address that is not a block succeeded")
	}
}

// When the device is full, cached blocks go back to it and the allocation is retried.
func TestAllocatorReleasesCacheWhenFull(t *testing.T) {
	f := &fakeMemory{capacity: 10 << 20, blocks: map[uintptr]uintptr{}}
	a := newAllocator(f.raw, f.release, 0)
	var ps []uintptr
	for i := 0; i < 4; i++ {
		p, err := a.get(2 << 20)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		a.put(p)
	}
	// 4 MiB blocks do not fit beside 8 MiB of cached 2 MiB blocks.
	if _, err := a.get(4 << 20); err != nil {
		t.Fatalf("allocation after freeing enough failed: %v", err)
	}
	if f.frees != 4 {
		t.Fatalf("%d cached blocks released, want 4", f.frees)
	}
	if _, err := a.get(8 << 20); err == nil {
		t.Fatal("an allocation beyond the device's memory succeeded")
	}
}

func TestAllocatorLimit(t *testing.T) {
	f := &fakeMemory{capacity: 1 << 30, blocks: map[uintptr]uintptr{}}
	a := newAllocator(f.raw, f.release, 3<<20)
	p, err := a.get(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.get(2 << 20); err == nil {
		t.Fatal("the limit was passed")
	}
	a.put(p)
	if _, err := a.get(2 << 20); err != nil {
		t.Fatalf("a cached block within the limit was refused: %v", err)
	}
}

// Closing gives the device back everything: blocks handed out and cached alike.
func TestAllocatorReleaseAll(t *testing.T) {
	f := &fakeMemory{capacity: 1 << 30, blocks: map[uintptr]uintptr{}}
	a := newAllocator(f.raw, f.release, 0)
	var ps []uintptr
	for _, n := range []uintptr{1000, 5000, 1 << 20} {
		p, err := a.get(n)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if err := a.put(ps[1]); err != nil {
		t.Fatal(err)
	}
	a.releaseAll()
	if f.used != 0 || len(f.blocks) != 0 || f.frees != 3 {
		t.Fatalf("after releaseAll the device still holds %d bytes in %d blocks (%d frees)", f.used, len(f.blocks), f.frees)
	}
	if s := a.stats(); s.InUse != 0 || s.Reserved != 0 {
		t.Fatalf("stats after releaseAll %+v", s)
	}
}
