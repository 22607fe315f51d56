package kern

// Products with f32 Frozen weights of fewer than f32TileMaxRows rows of A (decode steps,
// short prompts) on AVX2: the 3×4 float32 tiles of frozenf32_amd64.s over rows of A and
// rows of W, neither packed. The general float32 GEMM packs (transposes) W into panels
// on every call, which at 16 rows cost more than the product: an f32 model's batch-16
// decode step ran at 0.78× llama.cpp's. (With AVX-512 the 16-wide tiles of frozen512.go
// take these products.) A row of A meets W in the same order in a one-row product
// (f32Dots: dotsF32AVX, or dotsF32x512 where the 16-wide tiles run) as in a tile, so
// each row of C is the same bit for bit however many rows the product has (below the
// tiles' bound): a prompt's last row computed in a prefill equals the same row decoded
// alone after a cached prefix.

// f32TileMaxRows is the rows of A from which the packed GEMM beats the float32 tiles
// (BenchmarkFrozenTileVsPacked, one goroutine, 256×576 W in L2, GFLOP per CPU second:
// tiles 75 vs packed 67 at 16 rows, 72 vs 77 at 32, 73 vs 83 at 48, 67 vs 86 at 64).
const f32TileMaxRows = 32

// f32Tiled reports whether the float32 tiles take a product of m rows with W.
func (w *Frozen) f32Tiled(m int) bool {
	return useTileF32 && w.Format == F32 && w.Cols%8 == 0 && m >= 1 && m < f32TileMaxRows
}

// f32Dottable reports whether a one-row product with W has a kernel whose sums are the
// tiles' (dotsF32x512 for tileF32x512, dotsF32AVX for tileF32AVX).
func (w *Frozen) f32Dottable() bool {
	return w.Format == F32 && (useAVX512 && w.Cols%16 == 0 || useTileF32 && w.Cols%8 == 0)
}

// f32Dots computes columns [lo, hi) of the one row c = a·Wᵀ, one row of W at a time
// (a decode step: W streams from memory once, row after row).
func (w *Frozen) f32Dots(c, a []float32, lo, hi int, acc bool) {
	k := w.Cols
	z := useAVX512 && k%16 == 0 // the rows of two or more take tileF32x512 (zTileable)
	_ = a[k-1]
	_ = w.f32[hi*k-1]
	dotRows(c, lo, hi, hi-lo, acc, func(j int, out []float32) {
		if z {
			dotsF32x512(&a[0], &w.f32[j*k], k/16, len(out), &out[0])
		} else {
			dotsF32AVX(&a[0], &w.f32[j*k], k, len(out), &out[0])
		}
	})
}

// f32Tiles computes columns [lo, hi) of C = A·Wᵀ (lo a multiple of 4): each group of
// four rows of W meets every row of A, three at a time, while it is in L1.
func (w *Frozen) f32Tiles(c, a []float32, m, lo, hi int, acc bool) {
	n, k := w.Rows, w.Cols
	var out [12]float32
	j := lo
	for ; j+4 <= hi; j += 4 {
		wp := &w.f32[j*k]
		_ = w.f32[(j+4)*k-1] // the kernels read these four rows
		for i := 0; i < m; i += 3 {
			rows := min(3, m-i)
			switch rows {
			case 1:
				tile1F32AVX(&a[i*k], wp, 4*k, k, &out[0])
			case 2: // the third row repeats the second and its sums are dropped
				tileF32AVX(&a[i*k], &a[(i+1)*k], &a[(i+1)*k], wp, 4*k, k, &out[0])
			default:
				tileF32AVX(&a[i*k], &a[(i+1)*k], &a[(i+2)*k], wp, 4*k, k, &out[0])
			}
			storeTile(c, out[:], i, j, rows, 4, n, acc)
		}
	}
	for ; j < hi; j++ { // the last rows of W, one dot each (the tiles' sums)
		_ = w.f32[(j+1)*k-1]
		for i := 0; i < m; i++ {
			var s float32
			dotsF32AVX(&a[i*k], &w.f32[j*k], k, 1, &s)
			if acc {
				c[i*n+j] += s
			} else {
				c[i*n+j] = s
			}
		}
	}
}
