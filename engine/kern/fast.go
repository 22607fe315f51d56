package kern

import (
	"sync"
)

// minParallelWork is the multiply-add count below which a product runs on one goroutine.
const minParallelWork = 1 << 16

// split runs f over [0, n) in contiguous chunks on up to GOMAXPROCS goroutines; align
// keeps chunk boundaries on multiples of the micro-kernel's block. In a burst the chunks
// go to its spinning partners instead (team.go).
func split(n, work, align int, f func(lo, hi int)) {
	w := Procs()
	if work < minParallelWork || w <= 1 || n < 2*align {
		f(0, n)
		return
	}
	if teamSplit(n, align, w, f) {
		return
	}
	chunk := (n + w - 1) / w
	chunk = (chunk + align - 1) / align * align
	// The first chunk runs on the calling goroutine, which would otherwise only wait: a
	// training step makes thousands of these calls, many of them short (LoRA's products).
	var wg sync.WaitGroup
	for lo := chunk; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	f(0, min(chunk, n))
	wg.Wait()
}

// matMulNT32 is C = A·Bᵀ for float32: a 4×4 register block over k, the four rows of B
// streamed once per four rows of A.
func matMulNT32(c, a, b []float32, m, n, k int, acc bool) {
	if usePacked(m, n, k) {
		gemm32(c, a, b, m, n, k, false, true, acc)
		return
	}
	if useAVX2 && m < mr {
		// GEMV-like: packing B would cost as much as the product; assembly dots instead.
		split(n, m*n*k, 4, func(lo, hi int) { nt32dots(c, a, b, m, lo, hi, n, k, acc) })
		return
	}
	if m >= n || m >= 8 {
		split(m, m*n*k, 4, func(lo, hi int) { nt32rows(c, a, b, lo, hi, n, k, acc) })
		return
	}
	// Few rows (decode): split the output columns instead, so both cores stream half of B.
	split(n, m*n*k, 4, func(lo, hi int) { nt32cols(c, a, b, m, lo, hi, n, k, acc) })
}

// usePacked says whether the packed assembly GEMM pays: it needs AVX2+FMA, at least a
// full tile of rows (fewer waste most of each 6×16 tile) and enough work to amortise
// packing. With a short k (a LoRA B product: k is the rank) two rows or more pay too:
// the alternative is one dot product of length k per output, whose call costs more than
// the arithmetic (2.4x slower at 4×1536×16, the rows of one adapter among several in a
// decode step).
func usePacked(m, n, k int) bool {
	return useAVX2 && (m >= mr || (m >= 2 && k <= 64)) && n >= nr/2 && m*n*k >= 1<<12
}

// nt32dots computes columns [lo, hi) of C = A·Bᵀ as one dot product per element.
func nt32dots(c, a, b []float32, m, lo, hi, n, k int, acc bool) {
	for i := 0; i < m; i++ {
		ar := a[i*k : i*k+k]
		cr := c[i*n : i*n+n]
		for j := lo; j < hi; j++ {
			s := dot32(ar, b[j*k:j*k+k])
			if acc {
				cr[j] += s
			} else {
				cr[j] = s
			}
		}
	}
}

func nt32rows(c, a, b []float32, lo, hi, n, k int, acc bool) {
	i := lo
	for ; i+4 <= hi; i += 4 {
		nt32block(c, a, b, i, 4, 0, n, n, k, acc)
	}
	if i < hi {
		nt32block(c, a, b, i, hi-i, 0, n, n, k, acc)
	}
}

func nt32cols(c, a, b []float32, m, lo, hi, n, k int, acc bool) {
	for i := 0; i < m; i += 4 {
		nt32block(c, a, b, i, min(4, m-i), lo, hi, n, k, acc)
	}
}

// nt32block computes rows [i0, i0+rows) × columns [j0, j1) of C.
func nt32block(c, a, b []float32, i0, rows, j0, j1, n, k int, acc bool) {
	if rows < 4 {
		for r := 0; r < rows; r++ {
			ar := a[(i0+r)*k : (i0+r+1)*k]
			cr := c[(i0+r)*n : (i0+r+1)*n]
			j := j0
			for ; j+4 <= j1; j += 4 {
				b0, b1, b2, b3 := b[j*k:(j+1)*k], b[(j+1)*k:(j+2)*k], b[(j+2)*k:(j+3)*k], b[(j+3)*k:(j+4)*k]
				var s0, s1, s2, s3 float32
				for p, av := range ar {
					s0 += av * b0[p]
					s1 += av * b1[p]
					s2 += av * b2[p]
					s3 += av * b3[p]
				}
				store4(cr[j:j+4], s0, s1, s2, s3, acc)
			}
			for ; j < j1; j++ {
				s := dot32(ar, b[j*k:(j+1)*k])
				if acc {
					cr[j] += s
				} else {
					cr[j] = s
				}
			}
		}
		return
	}
	a0, a1, a2, a3 := a[i0*k:(i0+1)*k], a[(i0+1)*k:(i0+2)*k], a[(i0+2)*k:(i0+3)*k], a[(i0+3)*k:(i0+4)*k]
	c0, c1, c2, c3 := c[i0*n:(i0+1)*n], c[(i0+1)*n:(i0+2)*n], c[(i0+2)*n:(i0+3)*n], c[(i0+3)*n:(i0+4)*n]
	j := j0
	for ; j+2 <= j1; j += 2 {
		b0, b1 := b[j*k:(j+1)*k], b[(j+1)*k:(j+2)*k]
		b0 = b0[:len(a0)]
		b1 = b1[:len(a0)]
		a1 := a1[:len(a0)]
		a2 := a2[:len(a0)]
		a3 := a3[:len(a0)]
		var s00, s01, s10, s11, s20, s21, s30, s31 float32
		for p, x0 := range a0 {
			y0, y1 := b0[p], b1[p]
			x1, x2, x3 := a1[p], a2[p], a3[p]
			s00 += x0 * y0
			s01 += x0 * y1
			s10 += x1 * y0
			s11 += x1 * y1
			s20 += x2 * y0
			s21 += x2 * y1
			s30 += x3 * y0
			s31 += x3 * y1
		}
		if acc {
			c0[j] += s00
			c0[j+1] += s01
			c1[j] += s10
			c1[j+1] += s11
			c2[j] += s20
			c2[j+1] += s21
			c3[j] += s30
			c3[j+1] += s31
		} else {
			c0[j], c0[j+1] = s00, s01
			c1[j], c1[j+1] = s10, s11
			c2[j], c2[j+1] = s20, s21
			c3[j], c3[j+1] = s30, s31
		}
	}
	for ; j < j1; j++ {
		bj := b[j*k : (j+1)*k]
		for r, cr := range [][]float32{c0, c1, c2, c3} {
			s := dot32(a[(i0+r)*k:(i0+r+1)*k], bj)
			if acc {
				cr[j] += s
			} else {
				cr[j] = s
			}
		}
	}
}

func store4(c []float32, s0, s1, s2, s3 float32, acc bool) {
	if acc {
		c[0] += s0
		c[1] += s1
		c[2] += s2
		c[3] += s3
		return
	}
	c[0], c[1], c[2], c[3] = s0, s1, s2, s3
}

// dot32 is Σ a[i]·b[i] over len(a).
func dot32(a, b []float32) float32 {
	if useAVX2 && len(a) >= 8 {
		_ = b[:len(a)] // the assembly trusts the length
		return dot32AVX(a, b)
	}
	return dot32Go(a, b)
}

func dot32Go(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy32 is y += alpha·x over len(x).
func axpy32(alpha float32, x, y []float32) {
	if useAVX2 && len(x) >= 8 {
		_ = y[:len(x)] // the assembly trusts the length
		axpy32AVX(alpha, x, y)
		return
	}
	axpy32Go(alpha, x, y)
}

// axpy32Go is the portable axpy, unrolled.
func axpy32Go(alpha float32, x, y []float32) {
	y = y[:len(x)]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		y[i] += alpha * x[i]
		y[i+1] += alpha * x[i+1]
		y[i+2] += alpha * x[i+2]
		y[i+3] += alpha * x[i+3]
	}
	for ; i < len(x); i++ {
		y[i] += alpha * x[i]
	}
}

// matMulNN32 is C = A·B (B k×n) as row axpys, parallel over rows of C.
func matMulNN32(c, a, b []float32, m, n, k int, acc bool) {
	if usePacked(m, n, k) {
		gemm32(c, a, b, m, n, k, false, false, acc)
		return
	}
	split(m, m*n*k, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			cr := c[i*n : i*n+n]
			if !acc {
				clear(cr)
			}
			ar := a[i*k : i*k+k]
			for p, av := range ar {
				if av != 0 {
					axpy32(av, b[p*n:p*n+n], cr)
				}
			}
		}
	})
}

// matMulTN32 is C = Aᵀ·B (A k×m, B k×n), parallel over rows of C.
func matMulTN32(c, a, b []float32, m, n, k int, acc bool) {
	if usePacked(m, n, k) {
		gemm32(c, a, b, m, n, k, true, false, acc)
		return
	}
	split(m, m*n*k, 1, func(lo, hi int) {
		if !acc {
			clear(c[lo*n : hi*n])
		}
		for p := 0; p < k; p++ {
			br := b[p*n : p*n+n]
			ar := a[p*m : p*m+m]
			for i := lo; i < hi; i++ {
				if av := ar[i]; av != 0 {
					axpy32(av, br, c[i*n:i*n+n])
				}
			}
		}
	})
}
