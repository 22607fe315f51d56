package kern

// The packed GEMM's inner loop: one 16-column panel of B down a chunk's rows of A, in
// 12×16 and 6×16 register tiles (gemm.go drives it over blocks and panels).

// tiles runs the micro-kernel down rows [ic, ic+ib) of one 16-column panel of the k
// block at pc (kb deep): C's columns [j, j+cols) with row stride ldc, B's panel b read
// with a byte stride of bs per step of k. load adds to what C holds. A ragged tile goes
// through tile, the caller's (one per block: it escapes to the heap through the kernel
// call, so one per call of tiles cost an allocation per panel, 5 % of a training step).
func (o *gemmOp) tiles(src aSrc, ap []float32, tile *[mr * nr]float32, ic, ib, pc, kb int, c []float32, ldc, j, cols int, load bool, b []float32, bs int) {
	// Strides of A read in place (bytes): rows and steps of k.
	ars, aps := 4*src.lda, 4
	if src.aT {
		ars, aps = 4, 4*src.lda
	}
	for ir := 0; ir < ib; ir += mr {
		i := ic + ir
		rows := min(mr, ib-ir)
		p0, p1, wanted := o.terms(i, rows, j, pc, kb)
		if !wanted {
			continue
		}
		if p0 >= p1 {
			if !load {
				for r := 0; r < rows; r++ {
					clear(c[(i+r)*ldc+j:][:cols])
				}
			}
			continue
		}
		bpan := &b[p0*(bs/4)]
		apan, aR, aP := aPanel(src, ap, ir, i, rows, pc, kb, p0, ars, aps)
		if wideTile() && rows == mr && cols == nr && ir+2*mr <= ib {
			// Two full tiles with the same terms run as one 12×16 AVX-512 tile
			// where it is faster (wideTile): the same bits.
			q0, q1, w2 := o.terms(i+mr, mr, j, pc, kb)
			if w2 && q0 == p0 && q1 == p1 {
				a1, _, _ := aPanel(src, ap, ir+mr, i+mr, mr, pc, kb, p0, ars, aps)
				_ = c[(i+2*mr-1)*ldc+j+nr-1]
				sgemm12x16z(p1-p0, apan, a1, aR, aP, bpan, bs, &c[i*ldc+j], ldc, load)
				ir += mr
				continue
			}
		}
		kernel := sgemm6x16s
		if wideTile() {
			// One zmm a row: half the ymm kernels' FMAs, the same bits.
			kernel = sgemm6x16z
		} else if aR == 4 && aP == 4*mr && bs == 4*nr {
			// Both packed: the kernel with fixed strides.
			kernel = func(k int, a *float32, _, _ int, b *float32, _ int, c *float32, ldc int, load bool) {
				sgemm6x16(k, a, b, c, ldc, load)
			}
		}
		if rows == mr && cols == nr {
			_ = c[(i+mr-1)*ldc+j+nr-1] // the kernel writes the whole tile
			kernel(p1-p0, apan, aR, aP, bpan, bs, &c[i*ldc+j], ldc, load)
			continue
		}
		kernel(p1-p0, apan, aR, aP, bpan, bs, &tile[0], nr, false)
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

// aPanel is where the micro-kernel reads the tile's rows [i, i+rows) of A from term p0 of
// the k block at pc, with the byte strides of a row and a step: the packed panel at row ir
// of ap, or A itself (strides ars, aps) when it is read in place and the panel is full.
func aPanel(src aSrc, ap []float32, ir, i, rows, pc, kb, p0, ars, aps int) (*float32, int, int) {
	if src.inPlace && rows == mr {
		a, lda := src.a, src.lda
		if src.aT {
			_ = a[(pc+kb-1)*lda+i+mr-1]
			return &a[(pc+p0)*lda+i], ars, aps
		}
		_ = a[(i+mr-1)*lda+pc+kb-1]
		return &a[i*lda+pc+p0], ars, aps
	}
	return &ap[ir*kb:][:kb*mr][p0*mr], 4, 4 * mr
}
