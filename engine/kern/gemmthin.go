package kern

// Thin deep products: C is a few thousand elements and k is the rows of a batch (a LoRA
// weight's gradient, Aᵀ·B over 512 rows with 16 columns on one side). The operand read
// along k walks a row-major matrix with a stride of a whole row per step, which the
// hardware prefetchers do not follow when a block is hundreds of steps deep: such a
// product ran at 22 GFLOP/s with its operands in L3 against 49 in L2. In blocks of
// thinKc steps the column panels of one block touch each row's lines one after another,
// which the prefetchers do follow, and the cores split k rather than C's few panels.
const (
	thinKc    = 32    // k per block of a thin deep product
	thinSlab  = 128   // k per part: the cores take parts, each with its own partial C
	thinMaxC  = 32768 // most elements of C for the split (16 × 2048)
	thinMinKs = 2     // fewest parts worth splitting into
)

// thinDeep says whether a product of shape m×n×k takes gemmSplitK: A transposed (k is
// the rows of both operands, as in a weight's gradient), one side of C at most 16, C at
// most thinMaxC elements, and k deep enough for thinMinKs parts. Decode's products (A
// not transposed, k a weight's width) never do.
func thinDeep(m, n, k int, aT bool) bool {
	return aT && min(m, n) <= nr && m*n <= thinMaxC && k >= thinMinKs*thinSlab
}

// gemmSplitK computes a thin deep product C = Aᵀ·B as parts of thinSlab steps of k, each
// into its own partial C (in blocks of thinKc), the parts shared among the cores, then
// C (+)= the parts' sum, added in part order: the parts and their order depend on k
// alone, so the result is the same bits whatever the number of cores. With few rows of
// C and B row-major in place (the LoRA A's gradient, 16 × 576), each part computes Cᵀ =
// Bᵀ·A instead: 12-row tiles down C's long side rather than a 12-row and a ragged 4-row
// one, each the same sum of the same products.
func gemmSplitK(c, a []float32, pack panelPacker, direct []float32, m, n, k, ldc, lda, ldb int, aT, acc bool) {
	parts := (k + thinSlab - 1) / thinSlab
	ps := getScratch(parts * m * n)
	defer putScratch(ps)
	part := *ps
	swap := m < n && direct != nil
	share(parts, m*n*k, 1, 1, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			p0 := q * thinSlab
			kk := min(thinSlab, k-p0)
			dst := part[q*m*n:][:m*n]
			as := a[p0*lda:] // A is transposed: row p of k is a[p·lda:]
			if swap {
				bs := direct[p0*ldb:]
				pk := func(d []float32, j, cols, pc, kb int) { packB(d, as, j, cols, pc, kb, lda, false) }
				gemmBlocks(dst, bs, pk, nil, nil, n, m, kk, m, ldb, lda, thinKc, true, false, false, Mask{}, nil)
				continue
			}
			var ds []float32
			if direct != nil {
				ds = direct[p0*ldb:]
			}
			pk := func(d []float32, j, cols, pc, kb int) { pack(d, j, cols, p0+pc, kb) }
			gemmBlocks(dst, as, pk, ds, nil, m, n, kk, n, lda, ldb, thinKc, aT, false, false, Mask{}, nil)
		}
	})
	sum := part[:m*n]
	for q := 1; q < parts; q++ {
		axpy32(1, part[q*m*n:][:m*n], sum) // 1·x + y is x + y exactly
	}
	for i := 0; i < m; i++ {
		cr := c[i*ldc:][:n]
		switch {
		case swap && acc:
			for j := range cr {
				cr[j] += sum[j*m+i]
			}
		case swap:
			for j := range cr {
				cr[j] = sum[j*m+i]
			}
		case acc:
			axpy32(1, sum[i*n:][:n], cr)
		default:
			copy(cr, sum[i*n:][:n])
		}
	}
}
