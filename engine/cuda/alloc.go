package cuda

import (
	"errors"
	"fmt"
	"math/bits"
)

// errOutOfMemory is what a raw allocation returns when the device is full.
var errOutOfMemory = errors.New("out of memory")

// allocator is a caching allocator of device memory: a freed block is kept, by its
// rounded size, and handed out again, because cuMemAlloc and cuMemFree are slow and
// synchronise the device while a pass allocates and frees the same shapes over and
// over. Sizes are rounded up to a multiple of a quarter of the power of two below them
// (at most 25% waste).
// When the device (or the limit) is full, the cached blocks are released and the
// allocation is retried. It is not safe for concurrent use: the device serialises it.
type allocator struct {
	raw     func(bytes uintptr) (uintptr, error) // errOutOfMemory (wrapped) when full
	release func(ptr uintptr) error
	limit   int64 // cap on reserved bytes; 0: none

	cache map[uintptr][]uintptr // rounded size → free blocks
	live  map[uintptr]uintptr   // block handed out → its rounded size

	reserved int64 // bytes obtained from the device (live + cached)
	inUse    int64 // bytes handed out
	peak     int64 // largest inUse seen
}

func newAllocator(raw func(uintptr) (uintptr, error), release func(uintptr) error, limit int64) *allocator {
	return &allocator{raw: raw, release: release, limit: limit, cache: map[uintptr][]uintptr{}, live: map[uintptr]uintptr{}}
}

// roundSize rounds n up to a multiple of 512 bytes and of a quarter of the power of two
// below n.
func roundSize(n uintptr) uintptr {
	const min = 512
	if n <= min {
		return min
	}
	step := uintptr(1) << (bits.Len64(uint64(n-1)) - 3)
	if step < min {
		step = min
	}
	return (n + step - 1) / step * step
}

// get returns a block of at least n bytes.
func (a *allocator) get(n uintptr) (uintptr, error) {
	size := roundSize(n)
	if free := a.cache[size]; len(free) > 0 {
		p := free[len(free)-1]
		a.cache[size] = free[:len(free)-1]
		a.take(p, size)
		return p, nil
	}
	if a.limit > 0 && a.reserved+int64(size) > a.limit {
		a.trim()
		if a.reserved+int64(size) > a.limit {
			return 0, fmt.Errorf("%w: %d bytes more would pass the limit of %d (%d in use)", errOutOfMemory, size, a.limit, a.inUse)
		}
	}
	p, err := a.raw(size)
	if errors.Is(err, errOutOfMemory) {
		a.trim()
		p, err = a.raw(size)
	}
	if err != nil {
		return 0, fmt.Errorf("allocate %d bytes (%d in use, %d cached): %w", size, a.inUse, a.reserved-a.inUse, err)
	}
	a.reserved += int64(size)
	a.take(p, size)
	return p, nil
}

func (a *allocator) take(p, size uintptr) {
	a.live[p] = size
	a.inUse += int64(size)
	a.peak = max(a.peak, a.inUse)
}

// put gives a block back to the cache.
func (a *allocator) put(p uintptr) error {
	size, ok := a.live[p]
	if !ok {
		return fmt.Errorf("free of %#x, which is not an allocated block", p)
	}
	delete(a.live, p)
	a.inUse -= int64(size)
	a.cache[size] = append(a.cache[size], p)
	return nil
}

// trim releases every cached block to the device.
func (a *allocator) trim() {
	for size, free := range a.cache {
		for _, p := range free {
			if a.release(p) == nil {
				a.reserved -= int64(size)
			}
		}
		delete(a.cache, size)
	}
}

// releaseAll gives every block, cached or handed out, back to the device: the device is
// closing. Closing the context would not do it: cuBLAS's runtime keeps the primary context
// retained, so its memory outlives our release of it (a reference run on the same card
// then found the engine's 86 GiB still taken).
func (a *allocator) releaseAll() {
	a.trim()
	for p, size := range a.live {
		if a.release(p) == nil {
			a.reserved -= int64(size)
		}
		delete(a.live, p)
	}
	a.inUse = 0
}

// Stats are the allocator's figures (bytes) and the decode-step graphs' counts.
type Stats struct {
	InUse, Reserved, Peak int64 // bytes
	// Graphs kept; captures made; launches of a graph (the capture's first one included);
	// steps that asked for a graph and ran eagerly (a capture that failed, a replay whose
	// operations differed from the capture's).
	Graphs, GraphCaptures, GraphLaunches, GraphFallbacks int64
}

func (a *allocator) stats() Stats { return Stats{InUse: a.inUse, Reserved: a.reserved, Peak: a.peak} }
