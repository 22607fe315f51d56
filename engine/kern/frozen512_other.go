//go:build !amd64 || purego

package kern

import "unsafe"

// useDPBF16 is false without the assembly: bfloat16 products take the float32 paths.
var useDPBF16 = false

// tileDPBF16 is the portable twin of the assembly tile, so the driver and its tests
// build everywhere; it is never dispatched to here.
func tileDPBF16(a *uint16, lda int, w *uint16, ldw, k32 int, out *float32) {
	k := 32 * k32
	o := unsafe.Slice(out, 16)
	for r := 0; r < 4; r++ {
		ar := unsafe.Slice((*uint16)(unsafe.Add(unsafe.Pointer(a), r*lda)), k)
		for j := 0; j < 4; j++ {
			wr := unsafe.Slice((*uint16)(unsafe.Add(unsafe.Pointer(w), j*ldw)), k)
			var s float32
			for p := range ar {
				s += FromBF16(ar[p]) * FromBF16(wr[p])
			}
			o[4*r+j] = s
		}
	}
}

// tileF32x512 is the portable twin of the assembly tile; never dispatched to here.
func tileF32x512(a *float32, lda int, w *float32, ldw, k16 int, out *float32) {
	k := 16 * k16
	o := unsafe.Slice(out, 16)
	for r := 0; r < 4; r++ {
		ar := unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(a), r*lda)), k)
		for j := 0; j < 4; j++ {
			wr := unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(w), j*ldw)), k)
			var s float32
			for p := range ar {
				s += ar[p] * wr[p]
			}
			o[4*r+j] = s
		}
	}
}

// tile1F32x512 is the portable twin of the one-row tile; never dispatched to here.
func tile1F32x512(a *float32, w *float32, ldw, k16 int, out *float32) {
	var o [16]float32
	tileF32x512(a, 0, w, ldw, k16, &o[0])
	copy(unsafe.Slice(out, 4), o[:4])
}

// dotsF32x512 is the portable twin of the row dots; never dispatched to here.
func dotsF32x512(a, w *float32, k16, rows int, out *float32) {
	k := 16 * k16
	x, o := unsafe.Slice(a, k), unsafe.Slice(out, rows)
	for r := range o {
		o[r] = dot32Go(x, unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(w), 4*r*k)), k))
	}
}

// dotsBF16x512 is never dispatched to without the assembly.
func dotsBF16x512(x *float32, w *uint16, n, rows int, out *float32) { dotsBF16AVX(x, w, n, rows, out) }

// widenQ8AVX512 is never dispatched to without the assembly.
func widenQ8AVX512(dst *float32, blk *byte, nb int) { widenQ8AVX(dst, blk, nb) }

// widenQ4AVX512 is never dispatched to without the assembly.
func widenQ4AVX512(dst *float32, blk *byte, nb int) { widenQ4AVX(dst, blk, nb) }

// dotsQ5x512 is the portable twin of the Q5_0 row dots; never dispatched to here.
func dotsQ5x512(x *float32, blk *byte, nb, rows int, out *float32) {
	const bb = 22
	xs, o := unsafe.Slice(x, nb*QBlock), unsafe.Slice(out, rows)
	for r := range o {
		o[r] = dotQ5Go(xs, unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(blk), r*nb*bb)), nb*bb))
	}
}

// dotsQ4Kx512 is the portable twin of the Q4_K row dots; never dispatched to here.
func dotsQ4Kx512(x *float32, blk *byte, sc *float32, nb, rows int, out *float32) {
	const bb = 144
	xs, o := unsafe.Slice(x, nb*QKBlock), unsafe.Slice(out, rows)
	for r := range o {
		o[r] = dotQ4KGo(xs, unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(blk), r*nb*bb)), nb*bb))
	}
}

// dotsQ6Kx512 is the portable twin of the Q6_K row dots; never dispatched to here.
func dotsQ6Kx512(x *float32, blk *byte, sc *float32, nb, rows int, out *float32) {
	const bb = 210
	xs, o := unsafe.Slice(x, nb*QKBlock), unsafe.Slice(out, rows)
	for r := range o {
		o[r] = dotQ6KGo(xs, unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(blk), r*nb*bb)), nb*bb))
	}
}

// dotsBF16z is the portable twin of the bfloat16 row dots; never dispatched to here.
func dotsBF16z(x *float32, w *uint16, k16, rows int, out *float32) {
	k := 16 * k16
	xs, o := unsafe.Slice(x, k), unsafe.Slice(out, rows)
	wide := make([]float32, k)
	for r := range o {
		for i, h := range unsafe.Slice((*uint16)(unsafe.Add(unsafe.Pointer(w), 2*r*k)), k) {
			wide[i] = FromBF16(h)
		}
		o[r] = dot32Go(xs, wide)
	}
}
