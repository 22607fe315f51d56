//go:build arm64 && !purego

package kern

import "golang.org/x/sys/cpu"

// useVNNI is an amd64 extension: false here.
var useVNNI = false

// useSDOT routes products of several rows with q8_0 and q4_1 weights to the integer
// tiles (frozenq8.go) through q8TileSDOT, on cores with the ARMv8.2 dot product
// (HWCAP asimddp; x/sys/cpu names it HasASIMDDP). A variable so tests can force the
// portable tile; without it the products take the float NEON paths.
var useSDOT = cpu.ARM64.HasASIMDDP

// q8TileSDOT is q8TileGo with SDOT (frozenq8_arm64.s), bit for bit.
//
//go:noescape
func q8TileSDOT(a *byte, d *float32, w *byte, ldw int, tab *uint32, nb int, out *float32)

// q8TileVNNI is never dispatched to on arm64.
func q8TileVNNI(a *byte, d *float32, w *byte, ldw int, tab *uint32, nb int, out *float32) {
	q8TileGo(a, d, w, ldw, tab, nb, out)
}

// quantActsAVX512 is never dispatched to on arm64 (useVNNI is false).
func quantActsAVX512(q *byte, d *float32, x *float32, nb int) {
	panic("kern: quantActsAVX512 without the assembly")
}

// unpackQ4AVX is unpackQ4Go in NEON (frozenq8_arm64.s), bit for bit: the q4_1 integer
// product's unpacking of W with the dot-product tiles.
//
//go:noescape
func unpackQ4AVX(dst *byte, src *byte, nb int, tab *uint32, mw *float32)
