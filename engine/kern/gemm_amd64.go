//go:build amd64 && !purego

package kern

// sgemm6x16s is sgemm6x16 over operands read in place (gemm_amd64.s): A[r, p] is at a +
// r·ars + p·aps bytes, B's step p (16 floats) at b + p·bps bytes. The packed driver uses it
// where packing would cost as much as the product: thin products (a LoRA rank of 16 on
// one side) and attention's blocks.
//
//go:noescape
func sgemm6x16s(k int, a *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, load bool)

// sgemm12x16z is sgemm6x16s over twelve rows on AVX-512 (gemm_amd64.s): rows 0–5 of A
// from a0, rows 6–11 from a1, each with the strides ars and aps; the same bits.
//
//go:noescape
func sgemm12x16z(k int, a0, a1 *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, load bool)

// sgemm6x16z is sgemm6x16s on AVX-512 (gemm_amd64.s): one zmm a row; the same bits.
//
//go:noescape
func sgemm6x16z(k int, a *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, load bool)

// wideTileAsm says sgemm12x16z is the AVX-512 assembly, which needs the CPU to have it.
const wideTileAsm = true
