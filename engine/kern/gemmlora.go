package kern

import "runtime"

// A low-rank (LoRA) term carried by the product it adds to: C (+)= A·B + (s·A·Bz)·Bt
// in the product's own pass over A. Each chunk of rows computes its rows of Z = s·A·Bz
// as extra panels beside C's (from the same packed A), scales them, and adds Z·Bt while
// its rows of C are still in cache: the separate products read A twice and C twice, and
// a 16-deep accumulating product runs at a quarter of the GEMM's speed on its own.

// LoRA is the low-rank term of FrozenMatMulNTLoRA and FrozenMatMulNNLoRA: Z (m×R,
// written) = Scale·A·Bz, then C += Z·Bt.
type LoRA struct {
	Z      []float32
	Bz, Bt []float32 // the adapter's matrices, as each function lays them out
	R      int
	Scale  float32
}

// gemmLoRA is a LoRA term packed for gemmOp: Bz's panels in its k blocks, Bt's one block
// of R steps per 16-column panel of C.
type gemmLoRA struct {
	z     []float32
	r     int
	scale float32
	zp    []float32 // Bz packed: zpan panels per k block (panelOffset)
	zpan  int
	tp    []float32 // Bt packed: panel jp at jp·R·16
}

// FrozenMatMulNTLoRA computes C = A·Wᵀ + (Scale·A·Bzᵀ)·Btᵀ with Bz the adapter's A (R×k)
// and Bt its B (n×R), writing Z, bit for bit what MatMulNT(Z, A, Bz), Z·Scale and
// MatMulNT(C, Z, Bt, acc) give after FrozenMatMulNT(C, A, W). It reports false, having
// written nothing, where those products would not all take the packed GEMM (weights not
// float32, rows a tile kernel takes, too few rows or too narrow a rank): the caller runs
// them separately.
func FrozenMatMulNTLoRA(c, a []float32, w *Frozen, m int, l LoRA) bool {
	n, k := w.Rows, w.Cols
	if !w.f32Packed(m) || !loraFused(m, n, k, l.R) {
		return false
	}
	pre := w.preNT()
	gemmWithLoRA(c, a, w.f32, pre, m, n, k, true, false, l)
	runtime.KeepAlive(pre) // its memory is unmapped when it is collected
	runtime.KeepAlive(w)   // and so is w's (weightmem.go)
	return true
}

// FrozenMatMulNNLoRA computes C (+)= A·W + (Scale·A·Bz)·Bt with Bz the adapter's B (k×R)
// and Bt its A (R×n), writing Z: FrozenMatMulNN(C, A, W, acc), MatMulNN(Z, A, Bz), Z·Scale
// and MatMulNN(C, Z, Bt, acc) bit for bit, or false as FrozenMatMulNTLoRA.
func FrozenMatMulNNLoRA(c, a []float32, w *Frozen, m int, acc bool, l LoRA) bool {
	n, k := w.Cols, w.Rows
	if w.Format != F32 || !loraFused(m, n, k, l.R) {
		return false
	}
	pre := w.preNN()
	gemmWithLoRA(c, a, w.f32, pre, m, n, k, false, acc, l)
	runtime.KeepAlive(pre)
	runtime.KeepAlive(w)
	return true
}

// f32Packed reports whether frozenMatMulNT multiplies m ≥ 2 rows by W through
// matMulNT32 (float32 weights no tile kernel takes at m rows).
func (w *Frozen) f32Packed(m int) bool {
	return w.Format == F32 && !(m < zTileMaxRows && w.zTileable(m)) && !w.f32Tiled(m)
}

// loraFused says whether a product of m×n×k with a rank-r term runs fused: the base, the
// down (m×r×k) and the up (m×n×r) products would each take the packed GEMM, whose tiles
// the fused pass computes the same way, and the base splits by rows in one column block
// (each chunk of rows then owns its rows of Z).
func loraFused(m, n, k, r int) bool {
	return r > 0 && usePacked(m, n, k) && usePacked(m, r, k) && usePacked(m, n, r) &&
		m >= rowSplitRows() && n <= nc && k <= kSlab && r <= kBlock(k)
}

// gemmWithLoRA is the fused product over row-major A (m×k), B (k×n, or n×k when bT) and
// the term's matrices in the same orientation as B.
func gemmWithLoRA(c, a, b []float32, pre *prePanels, m, n, k int, bT, acc bool, l LoRA) {
	r := l.R
	_ = c[m*n-1]
	_ = a[m*k-1]
	_ = l.Z[m*r-1]
	_ = b[n*k-1]
	_ = l.Bz[k*r-1]
	_ = l.Bt[r*n-1]
	ldb, ldz, ldt := n, r, n
	if bT {
		ldb, ldz, ldt = k, k, r
	}
	kcb := kBlock(k)
	zpan, npan := (r+nr-1)/nr, (n+nr-1)/nr
	zb, tb := getScratch(k*zpan*nr), getScratch(npan*r*nr)
	defer putScratch(zb)
	defer putScratch(tb)
	g := &gemmLoRA{z: l.Z, r: r, scale: l.Scale, zp: *zb, zpan: zpan, tp: *tb}
	for zp := 0; zp < zpan; zp++ {
		for pc := 0; pc < k; pc += kcb {
			kb := min(kcb, k-pc)
			packB(g.zp[panelOffset(false, pc, zp, kb, zpan):][:kb*nr], l.Bz, zp*nr, min(nr, r-zp*nr), pc, kb, ldz, bT)
		}
	}
	for jp := 0; jp < npan; jp++ {
		packB(g.tp[jp*r*nr:][:r*nr], l.Bt, jp*nr, min(nr, n-jp*nr), 0, r, ldt, bT)
	}
	var direct []float32
	if !bT && inPlaceB(m) {
		direct = b
	}
	pack := func(d []float32, j, cols, pc, kb int) { packB(d, b, j, cols, pc, kb, ldb, bT) }
	gemmBlocks(c, a, pack, direct, pre, m, n, k, n, k, ldb, kcb, false, acc, true, Mask{}, g)
}

// down computes the chunk's rows [ic, ic+ib) of Z's panels over the k block at pc from
// the A panels the base product just used.
func (g *gemmLoRA) down(o *gemmOp, src aSrc, ap []float32, tile *[mr * nr]float32, ic, ib, pc, kb int) {
	for zp := 0; zp < g.zpan; zp++ {
		o.tiles(src, ap, tile, ic, ib, pc, kb, g.z, g.r, zp*nr, min(nr, g.r-zp*nr), pc > 0,
			g.zp[panelOffset(false, pc, zp, kb, g.zpan):][:kb*nr], 4*nr)
	}
}

// up scales the chunk's finished rows of Z and adds Z·Bt to its rows of C over panels
// [jp0, jp1), packing Z's rows into ap.
func (g *gemmLoRA) up(o *gemmOp, ap []float32, tile *[mr * nr]float32, ic, ib, jp0, jp1 int) {
	for i := ic; i < ic+ib; i++ {
		zr := g.z[i*g.r:][:g.r]
		for x := range zr {
			zr[x] *= g.scale
		}
	}
	packA(ap, g.z, ic, ib, 0, g.r, g.r, false)
	zs := aSrc{a: g.z, lda: g.r}
	for jp := jp0; jp < jp1; jp++ {
		o.tiles(zs, ap, tile, ic, ib, 0, g.r, o.c, o.ldc, o.jc+jp*nr, min(nr, o.nb-jp*nr), true, g.tp[jp*g.r*nr:][:g.r*nr], 4*nr)
	}
}
