package kern

// Products of a few to a few hundred rows with float32, bfloat16 (bf16tiles.go) or
// block-format weights on machines with AVX-512: 4×4 tiles of 16-wide FMAs (tileF32x512)
// over rows of A and rows of W, neither packed. Each thread takes a range of W's rows four
// at a time; a bfloat16 or block format's four rows are widened once into float32 scratch
// that stays in L1 while every row of A meets them, where the 3×4 AVX2 tiles widen each
// weight again for every third row of A and the packed GEMM widens and transposes W into
// panels (at 16 rows, 40% of a decode step's time went to that packing).

// zTileMaxRows bounds the rows the 16-wide tiles take. Measured with the MLP's up
// projection (BenchmarkFrozenPrompt, GFLOP/s on 2 threads against the AVX2 paths): at 16
// rows f32 80 vs 30, q8_0 79 vs 53; at 128 rows f32 80 vs 78, q8_0 92 vs 81; at 512
// rows f32 80 vs 87 and q4_1 85 vs 86, where A no longer fits in L2 and the packed GEMM's
// blocking wins: larger products (training) keep it.
const zTileMaxRows = 256

// zTileable reports whether tileF32x512 takes a product of m rows with W.
func (w *Frozen) zTileable(m int) bool {
	if !useAVX512 || m < 2 {
		return false
	}
	switch w.Format {
	case F32:
		return w.Cols%16 == 0
	case BF16:
		return w.Cols%16 == 0 && bf16ZTiles()
	case Q8_0, Q4_1, Q4_K, Q6_K, Q5_0:
		return w.Cols%16 == 0
	}
	return false
}

// zProduct is C[m×Rows] (+)= A·Wᵀ on the 16-wide tiles.
func (w *Frozen) zProduct(c, a []float32, m int, acc bool) {
	n, k := w.Rows, w.Cols
	split(n, m*n*k, 4, func(lo, hi int) {
		var out [16]float32
		var wbuf, abuf *[]float32
		if w.Format != F32 {
			wbuf = getScratch(4 * k)
			defer putScratch(wbuf)
		}
		for j := lo; j < hi; j += 4 {
			rows := min(4, hi-j)
			var wp *float32
			switch {
			case w.Format == F32 && rows == 4:
				wp = &w.f32[j*k]
			case w.Format == F32:
				if wbuf == nil {
					wbuf = getScratch(4 * k)
					defer putScratch(wbuf)
				}
				clear((*wbuf)[copy(*wbuf, w.f32[j*k:(j+rows)*k]):])
				wp = &(*wbuf)[0]
			default:
				wb := *wbuf
				for r := 0; r < rows; r++ {
					w.widen(wb[r*k:(r+1)*k], j+r, 0)
				}
				clear(wb[rows*k:])
				wp = &wb[0]
			}
			for i := 0; i < m; i += 4 {
				ap := &a[i*k]
				if m-i == 1 { // one row: its own tile, the same sums as in a padded one
					tile1F32x512(ap, wp, 4*k, k/16, &out[0])
					storeTile(c, out[:], i, j, 1, rows, n, acc)
					continue
				}
				if m-i < 4 { // the last rows of A, padded with zero rows
					if abuf == nil {
						abuf = getScratch(4 * k)
						defer putScratch(abuf)
						ab := *abuf
						clear(ab[copy(ab, a[i*k:m*k]):])
					}
					ap = &(*abuf)[0]
				}
				tileF32x512(ap, 4*k, wp, 4*k, k/16, &out[0])
				storeTile(c, out[:], i, j, min(4, m-i), rows, n, acc)
			}
		}
	})
}

// storeTile writes (or adds) the rows×cols corner of a 4×4 tile out to C at (i, j).
func storeTile(c, out []float32, i, j, rows, cols, n int, acc bool) {
	for r := 0; r < rows; r++ {
		cr := c[(i+r)*n+j:][:cols]
		if acc {
			for x := range cr {
				cr[x] += out[4*r+x]
			}
		} else {
			copy(cr, out[4*r:4*r+cols])
		}
	}
}
