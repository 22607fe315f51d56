package kern

// gemmSmall is gemmStridedMask for a product of at most mr rows of A (not transposed), k
// at most kc, nothing masked and C overwritten: one row panel through the micro-kernels
// gemmBlocks' tiles pick (so the same bits: each element summed from zero, p in order),
// with no closures, no per-call structures and one scratch buffer. A decode step's
// attention makes a dozen such products a layer (a KV head's three stacked query rows
// against a few hundred keys), where gemmBlocks' set-up (scratch taken and returned three
// times, the packing and tile closures, the ragged tile copied to the heap: about six
// allocations) cost more than the products' few thousand multiply-adds.
func gemmSmall(c, a, b []float32, m, n, k, ldc, lda, ldb int, bT bool) {
	_ = c[(m-1)*ldc+n-1]
	_ = a[(m-1)*lda+k-1]
	buf := getScratch(mr*k + k*nr + mr*nr)
	defer putScratch(buf)
	s := *buf
	ap, bp, tile := s[:mr*k], s[mr*k:][:k*nr], s[mr*k+k*nr:][:mr*nr]
	packA(ap, a, 0, m, 0, k, lda, false)
	wide := wideTile()
	for j := 0; j < n; j += nr {
		cols := min(nr, n-j)
		bpan, bs := &bp[0], 4*nr
		if !bT && cols == nr {
			_ = b[(k-1)*ldb+j+nr-1]
			bpan, bs = &b[j], 4*ldb // a full panel read in place, as gemmStridedMask's direct B
		} else {
			packB(bp, b, j, cols, 0, k, ldb, bT)
		}
		out, ldo := &tile[0], nr
		if m == mr && cols == nr {
			out, ldo = &c[j], ldc
		}
		switch {
		case wide:
			sgemm6x16z(k, &ap[0], 4, 4*mr, bpan, bs, out, ldo, false)
		case bs == 4*nr:
			sgemm6x16(k, &ap[0], bpan, out, ldo, false)
		default:
			sgemm6x16s(k, &ap[0], 4, 4*mr, bpan, bs, out, ldo, false)
		}
		if out == &tile[0] {
			for r := 0; r < m; r++ {
				copy(c[r*ldc+j:][:cols], tile[r*nr:][:cols])
			}
		}
	}
}

// smallRowwise says whether GemmRowwiseMasked's product (or k block of it), on the
// assembly path, takes gemmSmall.
func smallRowwise(m, k int, mk Mask) bool {
	return m <= mr && k <= kc && mk.Kind == NoMask
}
