//go:build !amd64 || purego

package kern

import "unsafe"

// useTileF32 is false without the amd64 assembly: f32 Frozen products take the general
// float32 paths (matMulNT32), NEON's included.
var useTileF32 = false

// tileF32AVX is the portable twin of the assembly tile, so the driver and its tests
// build everywhere; it is never dispatched to here.
func tileF32AVX(a0, a1, a2 *float32, w *float32, ldw, n int, out *float32) {
	o := unsafe.Slice(out, 12)
	for r, a := range []*float32{a0, a1, a2} {
		tile1F32AVX(a, w, ldw, n, &o[4*r])
	}
}

// tile1F32AVX is the portable twin of the one-row tile; never dispatched to here.
func tile1F32AVX(a0 *float32, w *float32, ldw, n int, out *float32) {
	x := unsafe.Slice(a0, n)
	o := unsafe.Slice(out, 4)
	for j := range o {
		o[j] = dot32Go(x, unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(w), j*ldw)), n))
	}
}

// dotsF32AVX is the portable twin of the row dots; never dispatched to here.
func dotsF32AVX(a, w *float32, n, rows int, out *float32) {
	x, o := unsafe.Slice(a, n), unsafe.Slice(out, rows)
	for r := range o {
		o[r] = dot32Go(x, unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(w), 4*r*n)), n))
	}
}
