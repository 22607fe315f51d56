//go:build unix

package kern

import (
	"syscall"
	"unsafe"
)

// panelMemory is n zeroed floats outside the Go heap, and the function that hands them
// back. Kept panels are large (a gigabyte for SmolLM2-135M), pointer-free and live as long
// as their matrix: on the heap they raised the collector's goal by their size, and the
// garbage it let the rest of a run leave behind raised the peak RSS by 400 MB more than
// the panels themselves. Without a mapping it falls back to the heap.
func panelMemory(n int) ([]float32, func()) {
	b, err := syscall.Mmap(-1, 0, 4*n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil || n == 0 {
		return make([]float32, n), func() {}
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n), func() { _ = syscall.Munmap(b) }
}
