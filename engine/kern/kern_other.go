//go:build !amd64 || purego

package kern

import "unsafe"

// useAVX2 is false without the assembly: every float32 kernel takes its pure-Go path.
var useAVX2 = false

// sgemm6x16 is the portable twin of the assembly micro-kernel, so the packed driver
// (and its tests) still build and run everywhere; it is never dispatched to here.
func sgemm6x16(k int, a, b, c *float32, ldc int, load bool) {
	ap := unsafe.Slice(a, k*mr)
	bp := unsafe.Slice(b, k*nr)
	var t [mr][nr]float32
	for p := 0; p < k; p++ {
		bv := bp[p*nr : p*nr+nr]
		for r := 0; r < mr; r++ {
			av := ap[p*mr+r]
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

func dot32AVX(a, b []float32) float32 { return dot32Go(a, b) }

func axpy32AVX(alpha float32, x, y []float32) { axpy32Go(alpha, x, y) }

func packNT16(d, b *float32, ldb, kb8 int) {
	ds := unsafe.Slice(d, kb8*8*nr)
	bs := unsafe.Slice(b, (nr-1)*ldb+kb8*8)
	for x := 0; x < nr; x++ {
		for p, v := range bs[x*ldb : x*ldb+kb8*8] {
			ds[p*nr+x] = v
		}
	}
}

func packNN16(d, b *float32, ldb, kb int) {
	ds := unsafe.Slice(d, kb*nr)
	bs := unsafe.Slice(b, (kb-1)*ldb+nr)
	for p := 0; p < kb; p++ {
		copy(ds[p*nr:p*nr+nr], bs[p*ldb:])
	}
}

func packA6(d, a *float32, lda, kb8 int) {
	ds := unsafe.Slice(d, kb8*8*mr)
	as := unsafe.Slice(a, (mr-1)*lda+kb8*8)
	for r := 0; r < mr; r++ {
		for p, v := range as[r*lda : r*lda+kb8*8] {
			ds[p*mr+r] = v
		}
	}
}

func exp32AVX(dst, src *float32, n int, scale, bias float32) { panic("kern: no assembly") }
