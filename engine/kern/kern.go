package kern

// Float is the element type of every kernel.
type Float interface{ ~float32 | ~float64 }

// MatMulNT computes C[m×n] = A[m×k]·B[n×k]ᵀ (or adds it to C when acc is true).
// This is a Linear layer's forward pass with W stored [out, in].
func MatMulNT[T Float](c, a, b []T, m, n, k int, acc bool) {
	if c32, ok := any(c).([]float32); ok {
		matMulNT32(c32, any(a).([]float32), any(b).([]float32), m, n, k, acc)
		return
	}
	refNT(c, a, b, m, n, k, acc)
}

func refNT[T Float](c, a, b []T, m, n, k int, acc bool) {
	for i := 0; i < m; i++ {
		ar := a[i*k : i*k+k]
		cr := c[i*n : i*n+n]
		for j := 0; j < n; j++ {
			br := b[j*k : j*k+k]
			var s T
			for p := range ar {
				s += ar[p] * br[p]
			}
			if acc {
				cr[j] += s
			} else {
				cr[j] = s
			}
		}
	}
}

// MatMulNN computes C[m×n] = A[m×k]·B[k×n] (or adds it to C when acc is true).
// This is a Linear layer's input gradient: dX = dY·W.
func MatMulNN[T Float](c, a, b []T, m, n, k int, acc bool) {
	if c32, ok := any(c).([]float32); ok {
		matMulNN32(c32, any(a).([]float32), any(b).([]float32), m, n, k, acc)
		return
	}
	refNN(c, a, b, m, n, k, acc)
}

func refNN[T Float](c, a, b []T, m, n, k int, acc bool) {
	for i := 0; i < m; i++ {
		cr := c[i*n : i*n+n]
		if !acc {
			clear(cr)
		}
		for p := 0; p < k; p++ {
			av := a[i*k+p]
			if av == 0 {
				continue
			}
			br := b[p*n : p*n+n]
			for j := range cr {
				cr[j] += av * br[j]
			}
		}
	}
}

// MatMulTN computes C[m×n] = A[k×m]ᵀ·B[k×n] (or adds it to C when acc is true).
// This is a Linear layer's weight gradient: dW[out×in] = dY[T×out]ᵀ·X[T×in].
func MatMulTN[T Float](c, a, b []T, m, n, k int, acc bool) {
	if c32, ok := any(c).([]float32); ok {
		matMulTN32(c32, any(a).([]float32), any(b).([]float32), m, n, k, acc)
		return
	}
	refTN(c, a, b, m, n, k, acc)
}

func refTN[T Float](c, a, b []T, m, n, k int, acc bool) {
	if !acc {
		clear(c[:m*n])
	}
	for p := 0; p < k; p++ {
		ar := a[p*m : p*m+m]
		br := b[p*n : p*n+n]
		for i, av := range ar {
			if av == 0 {
				continue
			}
			cr := c[i*n : i*n+n]
			for j := range cr {
				cr[j] += av * br[j]
			}
		}
	}
}

// Dot returns Σ a[i]·b[i].
func Dot[T Float](a, b []T) T {
	if a32, ok := any(a).([]float32); ok {
		return T(dot32(a32, any(b).([]float32)))
	}
	var s T
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// Axpy computes y += alpha·x.
func Axpy[T Float](alpha T, x, y []T) {
	if x32, ok := any(x).([]float32); ok {
		axpy32(float32(alpha), x32, any(y).([]float32))
		return
	}
	for i := range x {
		y[i] += alpha * x[i]
	}
}

// Gemm computes C[m×n] = op(A)·op(B) (or adds it to C when acc is true) over matrices
// with row strides, on the calling goroutine: callers that run many independent products
// (attention's per-head blocks) spread those over the cores instead. A[i,p] is
// a[i*lda+p], or a[p*lda+i] when aT; B[p,j] is b[p*ldb+j], or b[j*ldb+p] when bT; C[i,j]
// is c[i*ldc+j].
func Gemm[T Float](c, a, b []T, m, n, k, ldc, lda, ldb int, aT, bT, acc bool) {
	if c32, ok := any(c).([]float32); ok && usePacked(m, n, k) {
		gemmStrided(c32, any(a).([]float32), any(b).([]float32), m, n, k, ldc, lda, ldb, aT, bT, acc, false)
		return
	}
	refGemm(c, a, b, m, n, k, ldc, lda, ldb, aT, bT, acc)
}

// refGemm is Gemm without packing: one dot product per element when B is transposed
// (its rows are contiguous), row axpys otherwise.
func refGemm[T Float](c, a, b []T, m, n, k, ldc, lda, ldb int, aT, bT, acc bool) {
	var col []T
	if aT {
		col = make([]T, k)
	}
	for i := 0; i < m; i++ {
		cr := c[i*ldc : i*ldc+n]
		ar := col
		if aT {
			for p := range col {
				col[p] = a[p*lda+i]
			}
		} else {
			ar = a[i*lda : i*lda+k : i*lda+k]
		}
		if bT {
			for j := range cr {
				s := Dot(ar, b[j*ldb:j*ldb+k])
				if acc {
					cr[j] += s
				} else {
					cr[j] = s
				}
			}
			continue
		}
		if !acc {
			clear(cr)
		}
		for p, av := range ar {
			if av != 0 {
				Axpy(av, b[p*ldb:p*ldb+n], cr)
			}
		}
	}
}

// GemmRowwise computes C[m×n] = A·op(B) (A not transposed, C overwritten) like Gemm,
// but each element of C is the same function of its own row of A and column of op(B)
// whatever m and n are (and, with B not transposed, whatever k is beyond the row's last
// nonzero term): a row of attention computed
// within a prompt's block of rows equals, bit for bit, the same row computed alone in a
// decode step over the same keys, so a request's outputs do not depend on whether its
// prompt was cached. Gemm does not promise this: it picks a kernel by shape, splits k
// by its length, and adds a ragged tile to C differently from a full one. Here k runs
// in fixed blocks of kc from p = 0, each block's products summed from zero by the
// packed micro-kernel (one accumulator per element, p in order) and the blocks' sums
// added to C in order; without the assembly (or for float64) refGemm, one dot product or
// one ordered chain of axpys per element (zero terms skipped), which is rowwise already.
// Zero terms past a row's last nonzero A entry add exact zeros, so attention's
// probability row padded with zeros past its keys gives what the row alone gives. (With
// B transposed the fallback's dot products split k by its length: there k must match.)
func GemmRowwise[T Float](c, a, b []T, m, n, k, ldc, lda, ldb int, bT bool) {
	GemmRowwiseMasked(c, a, b, m, n, k, ldc, lda, ldb, bT, Mask{})
}

// GemmRowwiseMasked is GemmRowwise skipping what mk says is zero or unwanted, as
// GemmMasked: every wanted element is the same bits as GemmRowwise's, so rows stay
// independent (a masked row's sum only loses zero terms past its last nonzero one).
// With MaskC the unwanted elements are left unspecified.
func GemmRowwiseMasked[T Float](c, a, b []T, m, n, k, ldc, lda, ldb int, bT bool, mk Mask) {
	c32, ok := any(c).([]float32)
	if !ok || !useAVX2 {
		refGemm(c, a, b, m, n, k, ldc, lda, ldb, false, bT, false)
		return
	}
	a32, b32 := any(a).([]float32), any(b).([]float32)
	if m <= 0 || n <= 0 {
		return
	}
	if k <= kc {
		rowwiseBlock(c32, a32, b32, m, n, k, ldc, lda, ldb, bT, mk)
		return
	}
	tb := getScratch(m * n)
	defer putScratch(tb)
	t := (*tb)[:m*n]
	for p0 := 0; p0 < k; p0 += kc {
		kb := min(kc, k-p0)
		var bs []float32
		if bT {
			bs = b32[p0:]
		} else {
			bs = b32[p0*ldb:]
		}
		ms := mk.from(p0) // this block's k starts at p0
		if p0 == 0 {
			rowwiseBlock(c32, a32, bs, m, n, kb, ldc, lda, ldb, bT, ms)
			continue
		}
		rowwiseBlock(t, a32[p0:], bs, m, n, kb, n, lda, ldb, bT, ms)
		for i := 0; i < m; i++ {
			cr, tr := c32[i*ldc:i*ldc+n], t[i*n:i*n+n]
			for j, x := range tr {
				cr[j] += x
			}
		}
	}
}

// RowwiseK is the k block of GemmRowwise: a product's k runs in blocks of RowwiseK from
// p = 0, each summed from zero, the blocks' sums added to C in order (a caller that splits
// a product's k at these boundaries and adds the parts in order gets its bits).
const RowwiseK = kc

// rowwiseBlock is one k block (k ≤ kc) of GemmRowwiseMasked, C overwritten.
func rowwiseBlock(c, a, b []float32, m, n, k, ldc, lda, ldb int, bT bool, mk Mask) {
	if smallRowwise(m, k, mk) {
		gemmSmall(c, a, b, m, n, k, ldc, lda, ldb, bT)
		return
	}
	gemmStridedMask(c, a, b, m, n, k, ldc, lda, ldb, false, bT, false, false, mk)
}
