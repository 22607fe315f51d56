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

// hasRowDots is false: dotsBF16AVX below is only the assembly's twin.
const hasRowDots = false

// dotsBF16AVX is the portable twin of the row dots; never dispatched to here.
func dotsBF16AVX(x *float32, w *uint16, n, rows int, out *float32) {
	xs, o := unsafe.Slice(x, n), unsafe.Slice(out, rows)
	for r := range o {
		o[r] = dotBF16Go(xs, unsafe.Slice((*uint16)(unsafe.Add(unsafe.Pointer(w), 2*r*n)), n))
	}
}
