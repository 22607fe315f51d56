package kern

import (
	"runtime"
	"sync"
	"unsafe"
)

// Weights and kept panels live outside the Go heap, in mappings advised for transparent
// huge pages. A decode step streams every weight once, so each 4 KiB page of them missed
// the TLB once per token, and under a hypervisor's nested paging a miss walks two page
// tables: on the Zen 4 KVM guest of docs/performance.md a q8_0 token's products (30
// layers, 113 MB) streamed at 23 GB/s from 4 KiB pages and at 29 from 2 MiB ones (the
// read pass over the same memory: 31 and 35); whole decode steps, alternated in-process,
// gained 6.5 % in q8_0 and 9.4 % in bf16. Outside the heap they also stay out of the
// collector's goal (a gigabyte of kept panels on the heap raised a 512-token bench's peak
// RSS by 400 MB beyond the panels themselves).
//
// A SmolLM2-135M matrix is 0.1–2 MB, less than a huge page, so matrices share slabs:
// bump allocations from a slab of slabBytes, unmapped when every allocation in it is
// released and no new one can come (a later slab is open). A matrix of more than a
// quarter slab gets a mapping of its own. Space is not reused within a slab: what a
// collected matrix held stays mapped until everything else cut from its slab goes too,
// which suits memory that lives as long as its model: the server loads its base models
// once. (A process that drops a model while others stay loaded keeps the dropped one's
// share of every slab it shares with them: its last weights' slab, and the slabs where
// their panels, packed on first use, interleaved.)

const (
	hugePage  = 2 << 20
	slabBytes = 32 << 20
	memAlign  = 64 // a cache line: the kernels' loads of a row never straddle two
)

// slab is one mapping that weight allocations are cut from in turn.
type slab struct {
	mem    []byte
	unmap  func()
	used   int
	live   int  // allocations not yet released
	closed bool // no longer the open slab: unmapped when live reaches 0
}

var slabs struct {
	sync.Mutex
	open *slab
}

// weightBytes is n zeroed bytes outside the Go heap (aligned to memAlign), and the
// function that releases them; the memory is unmapped once everything sharing its
// mapping is released. Without a mapping (a platform without mmap, or mmap failing)
// it is heap memory and release does nothing.
func weightBytes(n int) ([]byte, func()) {
	if n <= 0 {
		return nil, func() {}
	}
	if n > slabBytes/4 {
		mem, unmap := mapHuge(n)
		var once sync.Once // a second munmap could hit a mapping made since
		return mem[:n:n], func() { once.Do(unmap) }
	}
	slabs.Lock()
	defer slabs.Unlock()
	s := slabs.open
	if s == nil || s.used+n > len(s.mem) {
		if s != nil {
			s.closed = true
			if s.live == 0 {
				s.unmap()
			}
		}
		mem, unmap := mapHuge(slabBytes)
		s = &slab{mem: mem, unmap: unmap}
		slabs.open = s
	}
	b := s.mem[s.used : s.used+n : s.used+n]
	s.used = (s.used + n + memAlign - 1) &^ (memAlign - 1)
	s.live++
	var once sync.Once
	return b, func() {
		once.Do(func() {
			slabs.Lock()
			defer slabs.Unlock()
			s.live--
			if s.live == 0 && s.closed {
				s.unmap()
			}
		})
	}
}

// held is n bytes of weight memory released when w is collected. Every product that
// reads them keeps w alive until it returns (runtime.KeepAlive): a pointer into the
// mapping does not, as a pointer into the heap would.
func (w *Frozen) held(n int) []byte {
	b, release := weightBytes(n)
	runtime.AddCleanup(w, func(release func()) { release() }, release)
	return b
}

// heldFloats is held for n float32.
func (w *Frozen) heldFloats(n int) []float32 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&w.held(4 * n)[0])), n)
}

// heldUint16s is held for n uint16.
func (w *Frozen) heldUint16s(n int) []uint16 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&w.held(2 * n)[0])), n)
}

// WeightMemory is n zeroed float32 in the memory frozen weights are kept in, and the
// function that releases them: a bench reads the machine's bandwidth over the memory
// decode reads its weights from.
func WeightMemory(n int) ([]float32, func()) { return panelMemory(n) }

// panelMemory is n zeroed floats of weight memory for kept panels, and the function that
// releases them.
func panelMemory(n int) ([]float32, func()) {
	b, release := weightBytes(4 * n)
	if n == 0 {
		return nil, release
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n), release
}
