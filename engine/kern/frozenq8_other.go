//go:build !(amd64 || arm64) || purego

package kern

// useVNNI is false without the assembly: q8_0 products take the float paths.
var useVNNI = false

// useSDOT is false without the assembly (an arm64 extension).
var useSDOT = false

// q8TileSDOT is never dispatched to without the assembly.
func q8TileSDOT(a *byte, d *float32, w *byte, ldw int, tab *uint32, nb int, out *float32) {
	q8TileGo(a, d, w, ldw, tab, nb, out)
}

// q8TileVNNI is never dispatched to without the assembly.
func q8TileVNNI(a *byte, d *float32, w *byte, ldw int, tab *uint32, nb int, out *float32) {
	q8TileGo(a, d, w, ldw, tab, nb, out)
}

// quantActsAVX512 is never dispatched to without the assembly.
func quantActsAVX512(q *byte, d *float32, x *float32, nb int) {
	panic("kern: quantActsAVX512 without the assembly")
}

// unpackQ4AVX is never dispatched to without the assembly.
func unpackQ4AVX(dst *byte, src *byte, nb int, tab *uint32, mw *float32) {
	panic("kern: unpackQ4AVX without the assembly")
}
