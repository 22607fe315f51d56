//go:build amd64 && !purego

package kern

import "golang.org/x/sys/cpu"

// useVNNI routes products of several rows with q8_0 weights to the integer tiles
// (frozenq8_amd64.s): AVX-512 with VNNI's VPDPBUSD. A variable so tests can force the
// float paths.
var useVNNI = useAVX512 && cpu.X86.HasAVX512VNNI

// useSDOT is arm64's dot-product tile (frozenq8_arm64.go): false here.
var useSDOT = false

// q8TileSDOT is never dispatched to on amd64.
func q8TileSDOT(a *byte, d *float32, w *byte, ldw int, tab *uint32, nb int, out *float32) {
	q8TileGo(a, d, w, ldw, tab, nb, out)
}

// q8TileVNNI is q8TileGo in AVX-512 VNNI assembly, bit for bit.
//
//go:noescape
func q8TileVNNI(a *byte, d *float32, w *byte, ldw int, tab *uint32, nb int, out *float32)

// quantActsAVX512 is quantActBlock for the nb blocks of one row of A, written into the
// row's slots of its tile (q: the first 4-byte slot, d: the first scale).
//
//go:noescape
func quantActsAVX512(q *byte, d *float32, x *float32, nb int)

// quantRowAVX512 is quantRow's quantisation in assembly (q8Row's layout), bit for bit.
//
//go:noescape
func quantRowAVX512(q *byte, c *int32, d *float32, x *float32, nb int)

// dotsQ8VNNI is dotsQ8Go in AVX-512 VNNI assembly, bit for bit (rows ≥ 1, nb ≥ 1).
//
//go:noescape
func dotsQ8VNNI(q *byte, c *int32, d *float32, w *byte, nb, rows int, out *float32)

// dotsQ4VNNI is dotsQ4Go in AVX-512 VNNI assembly, bit for bit (rows ≥ 1, nb ≥ 1).
//
//go:noescape
func dotsQ4VNNI(q *byte, c *int32, d *float32, w *byte, nb, rows int, out *float32)

// dotsQ5VNNI is dotsQ5Go in AVX-512 VNNI assembly, bit for bit (rows ≥ 1, nb ≥ 1).
//
//go:noescape
func dotsQ5VNNI(q *byte, c *int32, d *float32, w *byte, nb, rows int, out *float32)

// dotsQ5IVNNI is dotsQ5IGo in AVX-512 VNNI assembly, bit for bit (groups ≥ 1, nb ≥ 1):
// sixteen outputs a group.
//
//go:noescape
func dotsQ5IVNNI(q *byte, c *int32, d *float32, w *byte, nb, groups int, out *float32)

// dotsQ4KIVNNI is dotsQ4KIGo in AVX-512 VNNI assembly, bit for bit (groups ≥ 1, nsb ≥
// 1): sixteen outputs a group.
//
//go:noescape
func dotsQ4KIVNNI(q *byte, c *int32, d *float32, w *byte, nsb, groups int, out *float32)

// widenQ4KIAVX writes the weights of lane l of nb group-blocks of an interleaved Q4_K
// matrix at o to dst, their scales unpacked in sc, bit for bit deqQ4K's
// (frozenq4k_amd64.s).
//
//go:noescape
func widenQ4KIAVX(dst *float32, o *byte, l int, sc *float32, nb int)

// q5IAsm says widenQ5IAVX and widenQ4KIAVX are the assembly (AVX2, F16C).
const q5IAsm = true

// widenQ5IAVX writes the weights of lane l of nb group-blocks of an interleaved Q5_0
// matrix at o to dst, bit for bit deqQ5's (frozenq4k_amd64.s).
//
//go:noescape
func widenQ5IAVX(dst *float32, o *byte, l, nb int)

// dotsQ4KVNNI is dotsQ4KGo in AVX-512 VNNI assembly, bit for bit (rows ≥ 1, nsb ≥ 1).
//
//go:noescape
func dotsQ4KVNNI(q *byte, c *int32, d *float32, w *byte, nsb, rows int, out *float32)

// dotsQ6KVNNI is dotsQ6KGo in AVX-512 VNNI assembly, bit for bit (rows ≥ 1, nsb ≥ 1).
//
//go:noescape
func dotsQ6KVNNI(q *byte, c *int32, d *float32, w *byte, nsb, rows int, out *float32)

// unpackQ4AVX is unpackQ4Go in assembly (AVX, F16C), bit for bit.
//
//go:noescape
func unpackQ4AVX(dst *byte, src *byte, nb int, tab *uint32, mw *float32)
