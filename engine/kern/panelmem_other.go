//go:build !unix

package kern

// panelMemory is n zeroed floats on the heap (panelmem_unix.go maps them outside it).
func panelMemory(n int) ([]float32, func()) { return make([]float32, n), func() {} }
