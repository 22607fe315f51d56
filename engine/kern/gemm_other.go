//go:build (!amd64 && !arm64) || purego

package kern

import "unsafe"

// sgemm6x16s is the portable twin of the in-place micro-kernel in gemm_amd64.s (the
// packed driver and its tests build everywhere; it is only dispatched to with AVX2): A[r,
// p] is at a + r·ars + p·aps bytes, B's step p (16 floats) at b + p·bps bytes.
func sgemm6x16s(k int, a *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, load bool) {
	var t [mr][nr]float32
	for p := 0; p < k; p++ {
		bv := unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(b), p*bps)), nr)
		for r := 0; r < mr; r++ {
			av := *(*float32)(unsafe.Add(unsafe.Pointer(a), r*ars+p*aps))
			for j, x := range bv {
				t[r][j] += av * x
			}
		}
	}
	cs := unsafe.Slice(c, (mr-1)*ldc+nr)
	for r := 0; r < mr; r++ {
		row := cs[r*ldc : r*ldc+nr]
		for j := range row {
			if load {
				row[j] += t[r][j]
			} else {
				row[j] = t[r][j]
			}
		}
	}
}
