package kern

// A B shared by many products, packed once. Attention multiplies every block of query
// rows of every query head in a KV head's group by the same keys (S = Q·Kᵀ) and, going
// back, by the same values (dP = dO·Vᵀ): through GemmMasked each of those products packs
// its prefix of Kᵀ or Vᵀ again (packNT16 was 2 % of a 2048-token training step's CPU
// time on the Xeon of docs/performance.md). PackNT packs them once; GemmPanels reads
// the panels in place, the same values in the same order, so the same bits.

// Panels is Xᵀ packed as the packed GEMM's column panels (PackNT), for products
// C (+)= A·Xᵀ over any first columns of it (GemmPanels). Without the packed kernel (no
// assembly, float64, k past a slab) it holds X alone and the products read that.
type Panels[T Float] struct {
	pre    prePanels
	packed bool
	x      []T // the rows packed: the products the packed kernel does not take read them
	n, ldx int
}

// PanelsLen is the floats PackNT needs for n rows of k.
func PanelsLen(n, k int) int { return roundUp(n, nr) * k }

// PackNT packs B = Xᵀ, X the n rows of k floats at row stride ldx from x, into buf (at
// least PanelsLen(n, k) long, or nil when the products will not take the packed kernel
// anyway: then nothing is packed).
func PackNT[T Float](buf, x []T, n, k, ldx int) Panels[T] {
	p := Panels[T]{x: x, n: n, ldx: ldx}
	p.pre.k = k
	b32, ok := any(buf).([]float32)
	if !ok || !useAVX2 || k > kSlab || n <= 0 || k <= 0 || len(b32) < PanelsLen(n, k) {
		return p
	}
	x32 := any(x).([]float32)
	_ = x32[(n-1)*ldx+k-1]
	npan := (n + nr - 1) / nr
	for jp := 0; jp < npan; jp++ {
		packB(b32[jp*k*nr:][:k*nr], x32, jp*nr, min(nr, n-jp*nr), 0, k, ldx, true)
	}
	p.pre.p, p.packed = b32[:npan*k*nr], true
	return p
}

// GemmPanels is GemmMasked(c, a, X, m, n, k, ldc, lda, ldx, false, true, acc, mk) for the
// X that b packed (n at most its rows): C (+)= A·Xᵀ over X's first n rows, on the calling
// goroutine, the same bits.
func GemmPanels[T Float](c, a []T, b *Panels[T], m, n, ldc, lda int, acc bool, mk Mask) {
	k := b.pre.k
	if n > b.n {
		panic("kern: GemmPanels past the rows packed")
	}
	if c32, ok := any(c).([]float32); ok && b.packed && usePacked(m, n, k) {
		gemmPanels(c32, any(a).([]float32), nil, nil, &b.pre, m, n, k, ldc, lda, 0, false, acc, false, mk)
		return
	}
	GemmMasked(c, a, b.x, m, n, k, ldc, lda, b.ldx, false, true, acc, mk)
}
