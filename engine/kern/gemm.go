package kern

import (
	"runtime"
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
	if m > 0 && n > 0 && k > 0 {
		if bT {
			_ = b[(n-1)*ldb+k-1]
		} else {
			_ = b[(k-1)*ldb+n-1]
		}
	}
	gemmPanels(c, a, func(d []float32, j, cols, pc, kb int) { packB(d, b, j, cols, pc, kb, ldb, bT) }, m, n, k, ldc, lda, aT, acc, par)
}

// panelPacker writes columns [j, j+cols) × k-range [pc, pc+kb) of B into one panel as
// packB does (nr floats per k step, zero-padded past the last column).
type panelPacker func(d []float32, j, cols, pc, kb int)

// gemmPacked is gemm32 with B read through pack (a Frozen matrix widened as it is
// packed), A and C contiguous.
func gemmPacked(c, a []float32, pack panelPacker, m, n, k int, aT, acc bool) {
	lda := k
	if aT {
		lda = m
	}
	gemmPanels(c, a, pack, m, n, k, n, lda, aT, acc, true)
}

// gemmPanels is the packed GEMM driver: gemmStrided with B read through pack.
func gemmPanels(c, a []float32, pack panelPacker, m, n, k, ldc, lda int, aT, acc, par bool) {
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
	_ = c[(m-1)*ldc+n-1]
	if aT {
		_ = a[(k-1)*lda+m-1]
	} else {
		_ = a[(m-1)*lda+k-1]
	}
	kcb := kBlock(k)
	run := split
	if !par {
		run = serial
	}
	bbuf := getScratch(k * min(roundUp(n, nr), nc))
	defer putScratch(bbuf)
	bp := *bbuf
	for jc := 0; jc < n; jc += nc {
		nb := min(nc, n-jc)
		npan := (nb + nr - 1) / nr
		// Pack this block of B once, shared by every goroutine below.
		run(npan, nb*k*8, 1, func(lo, hi int) {
			for jp := lo; jp < hi; jp++ {
				for pc := 0; pc < k; pc += kcb {
					kb := min(kcb, k-pc)
					pack(bp[pc*npan*nr+jp*kb*nr:][:kb*nr], jc+jp*nr, min(nr, nb-jp*nr), pc, kb)
				}
			}
		})
		// Rows split when there are enough for every core; with few rows (decode, small
		// batches) the column panels split instead so each core streams part of B.
		if m >= 8*mr*runtime.GOMAXPROCS(0) {
			run(m, m*nb*k, mr, func(lo, hi int) {
				gemmBlock(c, a, bp, lo, hi, 0, npan, jc, nb, ldc, lda, k, aT, acc)
			})
		} else {
			run(npan, m*nb*k, 1, func(lo, hi int) {
				gemmBlock(c, a, bp, 0, m, lo, hi, jc, nb, ldc, lda, k, aT, acc)
			})
		}
	}
}

// kBlock is the k per packed block for a product of depth k: at most kc, and the blocks
// equal (to a multiple of 32), so k = 576 runs as 3×192 rather than 256+256+64, whose
// short last block pays the C tile's loads and stores for a quarter of the work. A
// multiple of 32 keeps a Frozen matrix's quantised blocks (QBlock) whole in each panel,
// so they widen through the assembly.
func kBlock(k int) int {
	nb := (k + kc - 1) / kc
	return min(kc, roundUp((k+nb-1)/nb, 32))
}

// serial is split on the calling goroutine.
func serial(n, _, _ int, f func(lo, hi int)) { f(0, n) }

// gemmBlock computes rows [i0, i1) × column panels [jp0, jp1) of the packed B block that
// starts at column jc and is nb wide.
func gemmBlock(c, a, bp []float32, i0, i1, jp0, jp1, jc, nb, ldc, lda, k int, aT, acc bool) {
	kcb := kBlock(k)
	abuf := getScratch(roundUp(min(mc, i1-i0), mr) * kcb)
	defer putScratch(abuf)
	ap := *abuf
	npan := (nb + nr - 1) / nr
	var tile [mr * nr]float32
	for pc := 0; pc < k; pc += kcb {
		kb := min(kcb, k-pc)
		load := acc || pc > 0
		for ic := i0; ic < i1; ic += mc {
			ib := min(mc, i1-ic)
			packA(ap, a, ic, ib, pc, kb, lda, aT)
			for jp := jp0; jp < jp1; jp++ {
				bpan := bp[pc*npan*nr+jp*kb*nr:][:kb*nr]
				j := jc + jp*nr
				cols := min(nr, nb-jp*nr)
				for ir := 0; ir < ib; ir += mr {
					apan := ap[ir*kb:][:kb*mr]
					i := ic + ir
					rows := min(mr, ib-ir)
					if rows == mr && cols == nr {
						_ = c[(i+mr-1)*ldc+j+nr-1] // the kernel writes the whole tile
						sgemm6x16(kb, &apan[0], &bpan[0], &c[i*ldc+j], ldc, load)
						continue
					}
					sgemm6x16(kb, &apan[0], &bpan[0], &tile[0], nr, false)
					for r := 0; r < rows; r++ {
						cr := c[(i+r)*ldc+j:][:cols]
						tr := tile[r*nr:][:cols]
						if load {
							for x, v := range tr {
								cr[x] += v
							}
						} else {
							copy(cr, tr)
						}
					}
				}
			}
		}
	}
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
		default:
			clear(d)
			for r := 0; r < rows; r++ {
				for p := 0; p < kb; p++ {
					if aT {
						d[p*mr+r] = a[(pc+p)*lda+i+r]
					} else {
						d[p*mr+r] = a[(i+r)*lda+pc+p]
					}
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
