//go:build !(amd64 || arm64) || purego

package kern

import "unsafe"

// dotQ4KAVX is the portable dot where there is no assembly (never dispatched to:
// useAVX2 is false here).
func dotQ4KAVX(x *float32, blk *byte, sc *float32, nb int) float32 {
	return dotQ4KGo(unsafe.Slice(x, nb*QKBlock), unsafe.Slice(blk, nb*144))
}

// dotQ5AVX is the portable dot where there is no assembly.
func dotQ5AVX(x *float32, blk *byte, nb int) float32 {
	return dotQ5Go(unsafe.Slice(x, nb*QBlock), unsafe.Slice(blk, nb*22))
}

// widenQ5AVX is the portable widening where there is no assembly.
func widenQ5AVX(dst *float32, blk *byte, nb int) {
	d, b := unsafe.Slice(dst, nb*QBlock), unsafe.Slice(blk, nb*22)
	for i := 0; i < nb; i++ {
		deqQ5(d[i*QBlock:], b[i*22:])
	}
}

// widenQ4KAVX is the portable widening where there is no assembly.
func widenQ4KAVX(dst *float32, blk *byte, sc *float32, nb int) {
	d, b := unsafe.Slice(dst, nb*QKBlock), unsafe.Slice(blk, nb*144)
	for i := 0; i < nb; i++ {
		deqQ4K(d[i*QKBlock:], b[i*144:])
	}
}

// dotQ6KAVX is the portable dot where there is no assembly.
func dotQ6KAVX(x *float32, blk *byte, sc *float32, nb int) float32 {
	return dotQ6KGo(unsafe.Slice(x, nb*QKBlock), unsafe.Slice(blk, nb*210))
}

// widenQ6KAVX is the portable widening where there is no assembly.
func widenQ6KAVX(dst *float32, blk *byte, sc *float32, nb int) {
	d, b := unsafe.Slice(dst, nb*QKBlock), unsafe.Slice(blk, nb*210)
	for i := 0; i < nb; i++ {
		deqQ6K(d[i*QKBlock:], b[i*210:])
	}
}
