//go:build !amd64 || purego

package kern

import "unsafe"

// roundBF16AVX is the portable twin of the assembly; never dispatched to here.
func roundBF16AVX(dst *uint16, src *float32, n int) {
	d, s := unsafe.Slice(dst, n), unsafe.Slice(src, n)
	for i, v := range s {
		d[i] = ToBF16(v)
	}
}

// roundWideBF16AVX is the portable twin of the assembly; never dispatched to here.
func roundWideBF16AVX(dst, src *float32, n int) {
	d, s := unsafe.Slice(dst, n), unsafe.Slice(src, n)
	for i, v := range s {
		d[i] = FromBF16(ToBF16(v))
	}
}
