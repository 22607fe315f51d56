//go:build !unix

package kern

// mapHuge is n zeroed bytes on the heap where there is no mmap.
func mapHuge(n int) ([]byte, func()) { return make([]byte, n), func() {} }
