//go:build amd64 && !purego

package kern

// dotQ4KAVX returns the dot of x[:256·nb] with nb Q4_K super-blocks whose scales and
// mins are unpacked in sc (16 floats a super-block: d·sc_j, dmin·m_j).
//
//go:noescape
func dotQ4KAVX(x *float32, blk *byte, sc *float32, nb int) float32

// dotQ5AVX returns the dot of x[:32·nb] with nb Q5_0 blocks.
//
//go:noescape
func dotQ5AVX(x *float32, blk *byte, nb int) float32

// widenQ5AVX writes the 32·nb weights of nb Q5_0 blocks to dst.
//
//go:noescape
func widenQ5AVX(dst *float32, blk *byte, nb int)

// widenQ4KAVX writes the 256·nb weights of nb Q4_K super-blocks, their scales and mins
// unpacked in sc, to dst.
//
//go:noescape
func widenQ4KAVX(dst *float32, blk *byte, sc *float32, nb int)

// dotQ6KAVX returns the dot of x[:256·nb] with nb Q6_K super-blocks whose sixteen
// scales are unpacked in sc (d·sc_i, 16 floats a super-block).
//
//go:noescape
func dotQ6KAVX(x *float32, blk *byte, sc *float32, nb int) float32

// hasWidenQ6K: no Q6_K widening in assembly here (widenK widens Q6_K in Go).
const hasWidenQ6K = false

// widenQ6KAVX is never called here (hasWidenQ6K is false).
func widenQ6KAVX(dst *float32, blk *byte, sc *float32, nb int) {
	panic("kern: widenQ6KAVX without the assembly")
}
