//go:build amd64 && !purego

package kern

// sgemm6x16s is sgemm6x16 over operands read in place (gemm_amd64.s): A[r, p] is at a +
// r·ars + p·aps bytes, B's step p (16 floats) at b + p·bps bytes. The packed driver uses it
// where packing would cost as much as the product: thin products (a LoRA rank of 16 on
// one side) and attention's blocks.
//
//go:noescape
func sgemm6x16s(k int, a *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, load bool)
