package kern

import (
	"sync"
)

// Packed float32 GEMM, in the style of GotoBLAS/BLIS: B is copied into k×16 column
// panels and A into k×6 row panels, so the micro-kernel (sgemm6x16) reads both with unit
// stride whatever the caller's layout; transposes cost only a different packing loop.
// Panels are zero-padded to whole tiles, so ragged edges need no special kernel.
const (
	mr = 6    // rows of the register tile
	nr = 16   // columns of the register tile (two ymm registers)
	kc = 256  // k per packed block: a 16-column B panel (16 KiB) stays in L1
	mc = 144  // rows of A packed at a time: 144×256 floats (144 KiB) stay in L2
	nc = 4096 // columns of B packed at a time, bounding the scratch to ~4 MiB per 1k of k
	// kSlab is the deepest product packed in one piece; deeper ones run in slabs.
	kSlab = 4096
)

// gemm32 computes C[m×n] (+)= A·B for float32 through the packed micro-kernel.
// A[i,p] is a[i*k+p], or a[p*m+i] when aT; B[p,j] is b[p*n+j], or b[j*k+p] when bT.
func gemm32(c, a, b []float32, m, n, k int, aT, bT, acc bool) {
	lda, ldb := k, n
	if aT {
		lda = m
	}
	if bT {
		ldb = k
	}
	gemmStrided(c, a, b, m, n, k, n, lda, ldb, aT, bT, acc, true)
}

// gemmStrided is gemm32 over matrices with row strides: A[i,p] is a[i*lda+p] (a[p*lda+i]
// when aT), B[p,j] is b[p*ldb+j] (b[j*ldb+p] when bT), C[i,j] is c[i*ldc+j]. par spreads
// the product over GOMAXPROCS goroutines; without it the product runs on the caller's.
func gemmStrided(c, a, b []float32, m, n, k, ldc, lda, ldb int, aT, bT, acc, par bool) {
	gemmStridedMask(c, a, b, m, n, k, ldc, lda, ldb, aT, bT, acc, par, Mask{})
}

// MaskKind says which part of a product a causal mask makes zero or unwanted (Mask).
type MaskKind uint8

const (
	// NoMask: every term is computed.
	NoMask MaskKind = iota
	// MaskC: only C[i,j] with j ≤ Off+i is wanted (attention's scores Q·Kᵀ and their
	// gradient dO·Vᵀ); a 6×16 tile of C with none wanted is not computed and keeps what C
	// held there.
	MaskC
	// MaskRowK: A[i,p] is zero for p > Off+i (probabilities or score gradients times
	// values or keys): each 6-row tile's sums stop after its last row's last term.
	MaskRowK
	// MaskColK: B[p,j] is zero for j > Off+p (dVᵀ = dOᵀ·P, dKᵀ = Qᵀ·dS, keys as columns):
	// each 16-column panel's sums start at its first column's first term.
	MaskColK
)

// Mask is a causal mask on a product (GemmMasked): Kind, and Off, the keys every row sees
// beyond its own index.
type Mask struct {
	Kind MaskKind
	Off  int
}

// from is the mask of the product's part whose k starts at p0 (a slab or block of k).
func (mk Mask) from(p0 int) Mask {
	switch mk.Kind {
	case MaskRowK:
		mk.Off -= p0
	case MaskColK:
		mk.Off += p0
	}
	return mk
}

// GemmMasked is Gemm, on the calling goroutine, skipping what mk says is zero or unwanted:
// the masked part of attention's diagonal blocks, half of each. The terms it skips are
// exact zeros (MaskRowK, MaskColK: a sum with zero terms left off its end or its start is
// the same bits, as the micro-kernel adds k in order) or outputs nobody reads (MaskC), so
// every wanted element equals Gemm's bit for bit. Without the packed kernel (other
// shapes, float64, no assembly) it is Gemm.
func GemmMasked[T Float](c, a, b []T, m, n, k, ldc, lda, ldb int, aT, bT, acc bool, mk Mask) {
	if c32, ok := any(c).([]float32); ok && usePacked(m, n, k) {
		gemmStridedMask(c32, any(a).([]float32), any(b).([]float32), m, n, k, ldc, lda, ldb, aT, bT, acc, false, mk)
		return
	}
	refGemm(c, a, b, m, n, k, ldc, lda, ldb, aT, bT, acc)
}

// gemmStridedMask is gemmStrided under a mask (GemmMasked).
func gemmStridedMask(c, a, b []float32, m, n, k, ldc, lda, ldb int, aT, bT, acc, par bool, mk Mask) {
	if m > 0 && n > 0 && k > 0 {
		if bT {
			_ = b[(n-1)*ldb+k-1]
		} else {
			_ = b[(k-1)*ldb+n-1]
		}
	}
	var direct []float32
	if !bT && inPlaceB(m) {
		direct = b
	}
	gemmPanels(c, a, func(d []float32, j, cols, pc, kb int) { packB(d, b, j, cols, pc, kb, ldb, bT) }, direct, nil, m, n, k, ldc, lda, ldb, aT, acc, par, mk)
}

// inPlaceB says whether the micro-kernel reads a row-major B's full 16-column panels
// where they are (sgemm6x16s) instead of packed copies: when few rows of A reuse each
// panel (m ≤ 96), so packing would cost a sizeable part of the product (a LoRA weight
// gradient, attention's blocks: 16×576×512 ran at 93 GFLOP/s in place against 75 packed
// on one thread). With more rows the packed panel's unit stride wins, even for a small B
// (512×1536×16 at 95 GFLOP/s packed, 76 in place).
func inPlaceB(m int) bool {
	if inPlaceForce != 0 {
		return inPlaceForce > 0
	}
	return useAVX2 && m <= 16*mr
}

// inPlaceForce overrides inPlaceA and inPlaceB for tests and benchmarks: 1 reads every
// operand it can in place (also without the assembly, so its portable twin is tested),
// -1 packs everything, 0 leaves the choice to the shape.
var inPlaceForce = 0

// inPlaceA says whether the micro-kernel reads A's full 6-row panels where they are
// instead of packing them: when few column panels reuse each (n ≤ 64, a LoRA A product
// whose n is the rank: 512×16×576 ran at 107 GFLOP/s in place against 80 packed on one
// thread, the weight gradient 1536×16×512 at 98 against 53) or there are few rows to pack
// per product (m ≤ 96: attention's blocks). Packing pays for larger products: the panel
// is then read with unit stride from L2 by every column panel.
func inPlaceA(m, n int) bool {
	if inPlaceForce != 0 {
		return inPlaceForce > 0
	}
	return useAVX2 && (n <= 4*nr || m <= 16*mr)
}

// panelPacker writes columns [j, j+cols) × k-range [pc, pc+kb) of B into one panel as
// packB does (nr floats per k step, zero-padded past the last column).
type panelPacker func(d []float32, j, cols, pc, kb int)

// gemmPacked is gemm32 with B read through pack (a Frozen matrix widened as it is
// packed), or from pre, its panels packed already, when not nil; A and C contiguous.
func gemmPacked(c, a []float32, pack panelPacker, pre *prePanels, m, n, k int, aT, acc bool) {
	lda := k
	if aT {
		lda = m
	}
	gemmPanels(c, a, pack, nil, pre, m, n, k, n, lda, 0, aT, acc, true, Mask{})
}

// gemmPanels is the packed GEMM driver: gemmStrided with B read through pack, or, when
// direct is not nil, a row-major B (row stride ldb) read in place where its panels are 16
// columns wide (pack then only packs the ragged last panel). mk skips what a causal mask
// makes zero or unwanted (GemmMasked).
func gemmPanels(c, a []float32, pack panelPacker, direct []float32, pre *prePanels, m, n, k, ldc, lda, ldb int, aT, acc, par bool, mk Mask) {
	if m <= 0 || n <= 0 {
		return
	}
	if k <= 0 {
		if !acc {
			for i := 0; i < m; i++ {
				clear(c[i*ldc : i*ldc+n])
			}
		}
		return
	}
	if k > kSlab {
		// A deep product (the LM head's input gradient: k is the vocabulary) runs as
		// slabs of k accumulated into C, so the packed B is a few MB that stay in cache
		// rather than all of B (113 MB for SmolLM2's head) written out and read back.
		ns := (k + kSlab - 1) / kSlab
		ks := roundUp((k+ns-1)/ns, 32) // a multiple of 32: quantised blocks stay whole
		for p0 := 0; p0 < k; p0 += ks {
			kk := min(ks, k-p0)
			as := a[p0:]
			if aT {
				as = a[p0*lda:]
			}
			var ds []float32
			if direct != nil {
				ds = direct[p0*ldb:]
			}
			ps := func(d []float32, j, cols, pc, kb int) { pack(d, j, cols, p0+pc, kb) }
			gemmPanels(c, as, ps, ds, pre.from(p0), m, n, kk, ldc, lda, ldb, aT, acc || p0 > 0, par, mk.from(p0))
		}
		return
	}
	if par && mk.Kind == NoMask && thinDeep(m, n, k, aT) {
		gemmSplitK(c, a, pack, direct, m, n, k, ldc, lda, ldb, aT, acc)
		return
	}
	gemmBlocks(c, a, pack, direct, pre, m, n, k, ldc, lda, ldb, kBlock(k), aT, acc, par, mk, nil)
}

// gemmBlocks is gemmPanels for k ≤ kSlab, in k blocks of kcb.
func gemmBlocks(c, a []float32, pack panelPacker, direct []float32, pre *prePanels, m, n, k, ldc, lda, ldb, kcb int, aT, acc, par bool, mk Mask, lr *gemmLoRA) {
	_ = c[(m-1)*ldc+n-1]
	if aT {
		_ = a[(k-1)*lda+m-1]
	} else {
		_ = a[(m-1)*lda+k-1]
	}
	run := share
	if !par {
		run = serial
	}
	// With B in place only a ragged last panel is packed: k×16 floats.
	bn := k * min(roundUp(n, nr), nc)
	if direct != nil {
		bn = k * nr
	}
	if pre != nil {
		bn, direct = 0, nil
	}
	bbuf := getScratch(bn)
	defer putScratch(bbuf)
	bp := *bbuf
	ai := inPlaceA(m, n)
	for jc := 0; jc < n; jc += nc {
		nb := min(nc, n-jc)
		npan := (nb + nr - 1) / nr
		// Pack this block of B once, shared by every goroutine below (in place, only its
		// ragged last panel).
		plo := 0
		if direct != nil {
			plo = nb / nr
		}
		if pre != nil {
			plo = npan // every panel is packed already
		}
		run(npan-plo, (nb-plo*nr)*k*8, 1, 1, func(lo, hi int) {
			for jp := plo + lo; jp < plo+hi; jp++ {
				for pc := 0; pc < k; pc += kcb {
					kb := min(kcb, k-pc)
					pack(bp[panelOffset(direct != nil, pc, jp, kb, npan):][:kb*nr], jc+jp*nr, min(nr, nb-jp*nr), pc, kb)
				}
			}
		})
		op := gemmOp{kcb: kcb, c: c, a: a, bp: bp, direct: direct, pre: pre, jc: jc, nb: nb, ldc: ldc, lda: lda, ldb: ldb, k: k, aT: aT, acc: acc, aInPlace: ai, mask: mk, lora: lr}
		// Rows split when there are enough for every core; with few rows (decode, small
		// batches) the column panels split instead so each core streams part of B.
		if m >= rowSplitRows() {
			run(m, m*nb*k, rowTile(), 8*mr, func(lo, hi int) { op.block(lo, hi, 0, npan) })
		} else {
			if lr != nil {
				panic("kern: a low-rank term on a product split by columns")
			}
			run(npan, m*nb*k, 1, 1, func(lo, hi int) { op.block(0, m, lo, hi) })
		}
	}
}

// rowSplitRows is the fewest rows of A for which gemmBlocks splits a product by rows.
func rowSplitRows() int { return 8 * mr * Procs() }

// kBlock is the k per packed block for a product of depth k: at most kc, and the blocks
// equal (to a multiple of 32), so k = 576 runs as 3×192 rather than 256+256+64, whose
// short last block pays the C tile's loads and stores for a quarter of the work. A
// multiple of 32 keeps a Frozen matrix's quantised blocks (QBlock) whole in each panel,
// so they widen through the assembly.
func kBlock(k int) int {
	nb := (k + kc - 1) / kc
	return min(kc, roundUp((k+nb-1)/nb, 32))
}

// panelOffset is where the packed panel of column panel jp and the k block starting at pc
// (kb deep) lies in the B scratch: blocks of npan panels; with B in place (ragged) only
// the one packed panel, k×16 floats.
func panelOffset(ragged bool, pc, jp, kb, npan int) int {
	if ragged {
		return pc * nr
	}
	return pc*npan*nr + jp*kb*nr
}

// rowTile is the rows a chunk of a row-split product is a multiple of: two 6-row panels
// with the wide tile, so that every pair runs as one 12-row tile (sgemm12x16z).
func rowTile() int {
	if wideTile() {
		return 2 * mr
	}
	return mr
}

// serial is share on the calling goroutine.
func serial(n, _, _, _ int, f func(lo, hi int)) { f(0, n) }

// gemmOp is one block of columns [jc, jc+nb) of a product in gemmPanels: bp holds its
// packed B panels (only the ragged last one when B is read in place from direct).
type gemmOp struct {
	c, a, bp, direct      []float32
	jc, nb, ldc, lda, ldb int
	k, kcb                int
	aT, acc, aInPlace     bool
	mask                  Mask
	lora                  *gemmLoRA // a low-rank term the product carries (gemmlora.go)
	pre                   *prePanels
}

// aSrc is where the micro-kernel reads A: a with row stride lda (transposed when aT),
// its full panels in place when inPlace, else the packed copy.
type aSrc struct {
	a           []float32
	lda         int
	aT, inPlace bool
}

// block computes rows [i0, i1) × column panels [jp0, jp1) of the block.
func (o *gemmOp) block(i0, i1, jp0, jp1 int) {
	k, kcb := o.k, o.kcb
	abuf := getScratch(roundUp(min(mc, i1-i0), mr) * kcb)
	defer putScratch(abuf)
	ap := *abuf
	npan := (o.nb + nr - 1) / nr
	src := aSrc{a: o.a, lda: o.lda, aT: o.aT, inPlace: o.aInPlace}
	var tile [mr * nr]float32 // a ragged tile's scratch (tiles)
	for pc := 0; pc < k; pc += kcb {
		kb := min(kcb, k-pc)
		load := o.acc || pc > 0
		for ic := i0; ic < i1; ic += mc {
			ib := min(mc, i1-ic)
			if o.aInPlace {
				// Only a ragged last panel is packed (the kernel reads six rows).
				if full := ib / mr * mr; full < ib {
					packA(ap[full*kb:], o.a, ic+full, ib-full, pc, kb, o.lda, o.aT)
				}
			} else {
				packA(ap, o.a, ic, ib, pc, kb, o.lda, o.aT)
			}
			for jp := jp0; jp < jp1; jp++ {
				j := o.jc + jp*nr
				cols := min(nr, o.nb-jp*nr)
				if o.pre != nil {
					o.tiles(src, ap, &tile, ic, ib, pc, kb, o.c, o.ldc, j, cols, load, o.pre.panel(o.jc/nr+jp, pc, kb), 4*nr)
				} else if o.direct != nil && cols == nr {
					_ = o.direct[(pc+kb-1)*o.ldb+j+nr-1]
					o.tiles(src, ap, &tile, ic, ib, pc, kb, o.c, o.ldc, j, cols, load, o.direct[pc*o.ldb+j:], 4*o.ldb)
				} else {
					o.tiles(src, ap, &tile, ic, ib, pc, kb, o.c, o.ldc, j, cols, load, bp(o, pc, jp, kb, npan), 4*nr)
				}
			}
			if o.lora != nil {
				o.lora.down(o, src, ap, &tile, ic, ib, pc, kb)
			}
		}
	}
	if o.lora != nil {
		for ic := i0; ic < i1; ic += mc {
			o.lora.up(o, ap, &tile, ic, min(mc, i1-ic), jp0, jp1)
		}
	}
}

// bp is the packed panel jp of the k block at pc.
func bp(o *gemmOp, pc, jp, kb, npan int) []float32 {
	return o.bp[panelOffset(o.direct != nil, pc, jp, kb, npan):][:kb*nr]
}

// terms says which terms [p0, p1) of the k block at pc (kb deep) the tile of rows [i,
// i+rows) and the 16 columns from j takes under the product's mask, and whether the mask
// wants any of its outputs at all (MaskC: a tile nobody reads is left as C holds it).
func (o *gemmOp) terms(i, rows, j, pc, kb int) (p0, p1 int, wanted bool) {
	p0, p1 = 0, kb
	switch o.mask.Kind {
	case MaskC:
		if j > o.mask.Off+i+rows-1 {
			return 0, 0, false
		}
	case MaskRowK:
		p1 = min(kb, o.mask.Off+i+rows-pc)
	case MaskColK:
		p0 = max(0, j-o.mask.Off-pc)
	}
	return p0, p1, true
}

// packA copies rows [ic, ic+ib) × k-range [pc, pc+kb) of A into panels of mr rows, each
// stored step-major (mr floats per k step) and zero-padded past the last row.
func packA(dst, a []float32, ic, ib, pc, kb, lda int, aT bool) {
	for r0 := 0; r0 < ib; r0 += mr {
		d := dst[r0*kb:][:kb*mr]
		rows := min(mr, ib-r0)
		i := ic + r0
		switch {
		case aT && rows == mr:
			for p := 0; p < kb; p++ {
				src := a[(pc+p)*lda+i:][:mr]
				t := d[p*mr : p*mr+mr : p*mr+mr]
				t[0], t[1], t[2], t[3], t[4], t[5] = src[0], src[1], src[2], src[3], src[4], src[5]
			}
		case !aT && rows == mr:
			p0 := 0
			if useAVX2 {
				kb8 := kb / 8
				if kb8 > 0 {
					_ = a[(i+mr-1)*lda+pc+kb8*8-1]
					_ = d[kb8*8*mr-1]
					packA6(&d[0], &a[i*lda+pc], lda, kb8)
				}
				p0 = kb8 * 8
			}
			a0 := a[i*lda+pc:][:kb]
			a1 := a[(i+1)*lda+pc:][:kb]
			a2 := a[(i+2)*lda+pc:][:kb]
			a3 := a[(i+3)*lda+pc:][:kb]
			a4 := a[(i+4)*lda+pc:][:kb]
			a5 := a[(i+5)*lda+pc:][:kb]
			for p := p0; p < kb; p++ {
				t := d[p*mr : p*mr+mr : p*mr+mr]
				t[0], t[1], t[2], t[3], t[4], t[5] = a0[p], a1[p], a2[p], a3[p], a4[p], a5[p]
			}
		case !aT && useAVX2 && kb >= 8:
			// A ragged panel (decode attention's three stacked rows): the rows and zero
			// rows copied to a full panel's six, packed as one (the transposing assembly
			// instead of a store per element: a third of a short decode step's attention).
			buf := getScratch(mr * kb)
			t := *buf
			for r := 0; r < mr; r++ {
				if r < rows {
					copy(t[r*kb:(r+1)*kb], a[(i+r)*lda+pc:][:kb])
				} else {
					clear(t[r*kb : (r+1)*kb])
				}
			}
			packA(d, t, 0, mr, 0, kb, kb, false)
			putScratch(buf)
		case !aT:
			// A ragged panel: each row's k-range strided into its lane, the padding lanes
			// zero.
			for r := 0; r < mr; r++ {
				if r >= rows {
					for p := 0; p < kb; p++ {
						d[p*mr+r] = 0
					}
					continue
				}
				src := a[(i+r)*lda+pc:][:kb]
				_ = d[(kb-1)*mr+r]
				for p, x := range src {
					d[p*mr+r] = x
				}
			}
		default:
			clear(d)
			for r := 0; r < rows; r++ {
				for p := 0; p < kb; p++ {
					d[p*mr+r] = a[(pc+p)*lda+i+r]
				}
			}
		}
	}
}

// packB copies columns [j, j+cols) × k-range [pc, pc+kb) of B into one panel stored
// step-major (nr floats per k step), zero-padded past the last column.
func packB(d, b []float32, j, cols, pc, kb, ldb int, bT bool) {
	if cols < nr {
		clear(d)
	}
	if !bT {
		if cols == nr && useAVX2 {
			_ = b[(pc+kb-1)*ldb+j+nr-1]
			_ = d[kb*nr-1]
			packNN16(&d[0], &b[pc*ldb+j], ldb, kb)
			return
		}
		for p := 0; p < kb; p++ {
			copy(d[p*nr:p*nr+cols], b[(pc+p)*ldb+j:])
		}
		return
	}
	p0 := 0
	if cols == nr && useAVX2 {
		// Transposing gather, 8×8 blocks in registers.
		kb8 := kb / 8
		if kb8 > 0 {
			_ = b[(j+nr-1)*ldb+pc+kb8*8-1]
			_ = d[kb8*8*nr-1]
			packNT16(&d[0], &b[j*ldb+pc], ldb, kb8)
		}
		p0 = kb8 * 8
	}
	for x := 0; x < cols; x++ {
		col := b[(j+x)*ldb+pc:][:kb]
		for p := p0; p < kb; p++ {
			d[p*nr+x] = col[p]
		}
	}
}

func roundUp(x, to int) int { return (x + to - 1) / to * to }

// scratch recycles packing buffers across calls; products run many times per step.
var scratch sync.Pool

func getScratch(n int) *[]float32 {
	if p, ok := scratch.Get().(*[]float32); ok {
		if cap(*p) >= n {
			*p = (*p)[:n]
			return p
		}
	}
	s := make([]float32, n)
	return &s
}

func putScratch(p *[]float32) { scratch.Put(p) }
