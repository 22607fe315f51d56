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

// quantRowAVX512 is never dispatched to without VNNI.
func quantRowAVX512(q *byte, c *int32, d *float32, x *float32, nb int) {
	panic("kern: quantRowAVX512 without the assembly")
}

// dotsQ8VNNI is never dispatched to without VNNI.
func dotsQ8VNNI(q *byte, c *int32, d *float32, w *byte, nb, rows int, out *float32) {
	panic("kern: dotsQ8VNNI without the assembly")
}

// dotsQ5VNNI is never dispatched to without VNNI.
func dotsQ5VNNI(q *byte, c *int32, d *float32, w *byte, nb, rows int, out *float32) {
	panic("kern: dotsQ5VNNI without the assembly")
}

// dotsQ4KVNNI is never dispatched to without VNNI.
func dotsQ4KVNNI(q *byte, c *int32, d *float32, w *byte, nsb, rows int, out *float32) {
	panic("kern: dotsQ4KVNNI without the assembly")
}

// dotsQ6KVNNI is never dispatched to without VNNI.
func dotsQ6KVNNI(q *byte, c *int32, d *float32, w *byte, nsb, rows int, out *float32) {
	panic("kern: dotsQ6KVNNI without the assembly")
}
