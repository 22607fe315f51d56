//go:build unix

package kern

import (
	"syscall"
	"unsafe"
)

// mapHuge maps at least n zeroed bytes, a whole number of huge pages starting on a huge
// page's boundary, advised for transparent huge pages (adviseHuge), and returns them with
// the function that unmaps them; without a mapping, heap bytes and a no-op.
func mapHuge(n int) ([]byte, func()) {
	size := (n + hugePage - 1) &^ (hugePage - 1)
	m, err := syscall.Mmap(-1, 0, size+hugePage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, size), func() {}
	}
	off := int(-uintptr(unsafe.Pointer(&m[0])) & (hugePage - 1))
	b := m[off : off+size : off+size]
	adviseHuge(b)
	return b, func() { _ = syscall.Munmap(m) }
}
