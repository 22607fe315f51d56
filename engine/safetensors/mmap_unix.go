//go:build unix

package safetensors

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapFile maps the whole file read-only, advising sequential reads (the loader walks
// the tensors in order, so the kernel reads ahead).
func mapFile(f *os.File, size int64) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: mmap: %w", f.Name(), err)
	}
	_ = unix.Madvise(m, unix.MADV_SEQUENTIAL) // advice only
	return m, nil
}

func unmapFile(m []byte) error { return unix.Munmap(m) }

// dropPages unmaps the whole pages of the mapping m that lie inside sub (a sub-slice of
// m) from this process with MADV_DONTNEED; partial pages at either end stay.
func dropPages(m, sub []byte) {
	page := uintptr(os.Getpagesize())
	base := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
	a := uintptr(unsafe.Pointer(unsafe.SliceData(sub))) - base
	b := a + uintptr(len(sub))
	a = (a + page - 1) / page * page
	b = b / page * page
	if b > a {
		_ = unix.Madvise(m[a:b], unix.MADV_DONTNEED) // advice only: failing costs memory, not correctness
	}
}
