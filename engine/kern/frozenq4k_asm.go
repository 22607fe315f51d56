//go:build (amd64 || arm64) && !purego

package kern

// The K-quant kernels in assembly: AVX2 on amd64 (frozenq4k_amd64.s), NEON on arm64
// (frozenq4k_arm64.s) with the same signatures and data layouts. The shared Go (dotQ4KFast,
// dotQ6KFast, widenK) unpacks the super-blocks' scales to float32 and calls them wherever
// useAVX2 (on arm64: NEON) and useF16C are on.

// dotQ4KAVX returns the dot of x[:256·nb] with nb Q4_K super-blocks whose scales and
// mins are unpacked in sc (16 floats a super-block: d·sc_j, dmin·m_j).
//
//go:noescape
func dotQ4KAVX(x *float32, blk *byte, sc *float32, nb int) float32

// dotQ5AVX returns the dot of x[:32·nb] with nb Q5_0 blocks.
//
//go:noescape
func dotQ5AVX(x *float32, blk *byte, nb int) float32

// widenQ5AVX writes the 32·nb weights of nb Q5_0 blocks to dst, bit for bit deqQ5's.
//
//go:noescape
func widenQ5AVX(dst *float32, blk *byte, nb int)

// widenQ4KAVX writes the 256·nb weights of nb Q4_K super-blocks, their scales and mins
// unpacked in sc, to dst, bit for bit deqQ4K's.
//
//go:noescape
func widenQ4KAVX(dst *float32, blk *byte, sc *float32, nb int)

// dotQ6KAVX returns the dot of x[:256·nb] with nb Q6_K super-blocks whose sixteen
// scales are unpacked in sc (d·sc_i, 16 floats a super-block).
//
//go:noescape
func dotQ6KAVX(x *float32, blk *byte, sc *float32, nb int) float32

// widenQ6KAVX writes the 256·nb weights of nb Q6_K super-blocks, their scales unpacked in
// sc as for dotQ6KAVX, to dst, bit for bit deqQ6K's.
//
//go:noescape
func widenQ6KAVX(dst *float32, blk *byte, sc *float32, nb int)
