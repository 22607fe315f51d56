//go:build !amd64 || purego

package kern

import "unsafe"

// sgemm12x16z is two sgemm6x16s tiles, rows 0–5 from a0 and 6–11 from a1: the driver
// dispatches to it only with AVX-512 (gemm_amd64.s), this twin keeps every build whole.
func sgemm12x16z(k int, a0, a1 *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, load bool) {
	sgemm6x16s(k, a0, ars, aps, b, bps, c, ldc, load)
	sgemm6x16s(k, a1, ars, aps, b, bps, (*float32)(unsafe.Add(unsafe.Pointer(c), 4*mr*ldc)), ldc, load)
}

// sgemm6x16z is sgemm6x16s (the AVX-512 assembly's twin, as sgemm12x16z's).
func sgemm6x16z(k int, a *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, load bool) {
	sgemm6x16s(k, a, ars, aps, b, bps, c, ldc, load)
}

// wideTileAsm says sgemm12x16z is the AVX-512 assembly, which needs the CPU to have it.
const wideTileAsm = false
