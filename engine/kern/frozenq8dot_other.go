//go:build !amd64 || purego

package kern

// The one-row integer dots' assembly is amd64's (AVX512-VNNI); elsewhere useVNNI is false
// and these are never called: dotsQ8 and the others take their Go twins.

func quantRowAVX512(q *byte, c *int32, d *float32, x *float32, nb int) {
	panic("kern: quantRowAVX512 without the assembly")
}

func dotsQ8VNNI(q *byte, c *int32, d *float32, w *byte, nb, rows int, out *float32) {
	panic("kern: dotsQ8VNNI without the assembly")
}

func dotsQ4VNNI(q *byte, c *int32, d *float32, w *byte, nb, rows int, out *float32) {
	panic("kern: dotsQ4VNNI without the assembly")
}

// q5IAsm says widenQ5IAVX is the assembly: not here (interleaved Q5_0 is widened by
// rowSeg; only tests interleave where the dots have no assembly).
const q5IAsm = false

func widenQ4KIAVX(dst *float32, o *byte, l int, sc *float32, nb int) {
	panic("kern: widenQ4KIAVX without the assembly")
}

func widenQ5IAVX(dst *float32, o *byte, l, nb int) {
	panic("kern: widenQ5IAVX without the assembly")
}

func dotsQ4KIVNNI(q *byte, c *int32, d *float32, w *byte, nsb, groups int, out *float32) {
	panic("kern: dotsQ4KIVNNI without the assembly")
}

func dotsQ5IVNNI(q *byte, c *int32, d *float32, w *byte, nb, groups int, out *float32) {
	panic("kern: dotsQ5IVNNI without the assembly")
}

func dotsQ5VNNI(q *byte, c *int32, d *float32, w *byte, nb, rows int, out *float32) {
	panic("kern: dotsQ5VNNI without the assembly")
}

func dotsQ4KVNNI(q *byte, c *int32, d *float32, w *byte, nsb, rows int, out *float32) {
	panic("kern: dotsQ4KVNNI without the assembly")
}

func dotsQ6KVNNI(q *byte, c *int32, d *float32, w *byte, nsb, rows int, out *float32) {
	panic("kern: dotsQ6KVNNI without the assembly")
}
