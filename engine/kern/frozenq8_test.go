package kern

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

// q8RefNT is the integer product written plainly from the definition, with none of the
// kernels' layout: each block of a row of A quantised by quantActBlock, its int32 dot
// with the weights' block (q8_0's bytes, q5_0's q−16) summed directly (no offset, no
// correction), then the fixed float32 steps. Every integer path (the tiles, the one-row
// dots) must give exactly these bits.
func q8RefNT(a []float32, w *Frozen, m int) []float32 {
	n, k := w.Rows, w.Cols
	nb := k / QBlock
	out := make([]float32, m*n)
	for i := 0; i < m; i++ {
		qs := make([][QBlock]byte, nb)
		ds := make([]float32, nb)
		for b := range nb {
			ds[b] = quantActBlock(&qs[b], a[i*k+b*QBlock:][:QBlock])
		}
		for j := 0; j < n; j++ {
			wq, wd := refBlocks(w, j)
			var sum float32
			for b := range nb {
				var s int32
				for p := range QBlock {
					s += int32(int8(qs[b][p]^0x80)) * int32(wq[b*QBlock+p])
				}
				scale := ds[b] * wd[b]
				sum = float32(sum + float32(scale*float32(s)))
			}
			out[i*n+j] = sum
		}
	}
	return out
}

// refBlocks is row j of a q8_0 or q5_0 W as integers and a float32 scale a block: q8_0's
// bytes as stored, q5_0's q−16 from its one dequantiser (the block's scale set to 1).
func refBlocks(w *Frozen, j int) (q []int8, d []float32) {
	nb := w.Cols / QBlock
	q, d = make([]int8, nb*QBlock), make([]float32, nb)
	for b := range nb {
		var kb [144]byte
		blk := w.kBlock(kb[:], j, b)
		d[b] = FromF16(binary.LittleEndian.Uint16(blk))
		if w.Format == Q8_0 {
			for p := range QBlock {
				q[b*QBlock+p] = int8(blk[2+p])
			}
			continue
		}
		one := append([]byte{0x00, 0x3c}, blk[2:]...) // the block with its scale set to 1
		var y [QBlock]float32
		deqQ5(y[:], one)
		for p, v := range y {
			q[b*QBlock+p] = int8(v)
		}
	}
	return q, d
}

// q8Levels are the integer kernels a test runs: the assembly where the machine has
// VNNI (amd64) or the dot product (arm64: "sdot"), and the portable kernel (what purego
// and the other machines run).
func q8Levels() []string {
	switch {
	case useVNNI:
		return []string{"vnni", "portable"}
	case useSDOT:
		return []string{"sdot", "portable"}
	}
	return []string{"portable"}
}

// atQ8Level runs f with the integer tiles on at level.
func atQ8Level(level string, f func()) {
	oldV, oldS, oldF := useVNNI, useSDOT, forceQ8Int
	defer func() { useVNNI, useSDOT, forceQ8Int = oldV, oldS, oldF }()
	forceQ8Int = true
	if level == "portable" {
		useVNNI, useSDOT = false, false
	}
	f()
}

// TestQ8IntBitExact checks the integer product at every path bit for bit against
// q8RefNT: one to three rows of A (the one-row dots, frozenq8dot.go), rows of A not a multiple of the 16-row tile (and fewer than one), rows of W
// not a multiple of the 8-row group (and fewer than one), 1 to 48 blocks; activations
// with zero blocks, large and tiny magnitudes; C overwritten and accumulated.
func TestQ8IntBitExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 2))
	shapes := [][3]int{{1, 8, 32}, {1, 13, 576}, {2, 7, 96}, {3, 33, 160}, {1, 1, 1536}, {2, 50, 224}, {3, 17, 64},
		{4, 8, 32}, {8, 8, 32}, {16, 8, 64}, {17, 13, 96}, {9, 1, 32}, {33, 50, 576}, {128, 24, 1536}, {40, 7, 160}, {255, 9, 64}, {300, 10, 96}}
	for _, s := range shapes {
		m, n, k := s[0], s[1], s[2]
		w := NewFrozen(randSlice(rng, n*k), n, k, Q8_0)
		a := randSlice(rng, m*k)
		clear(a[:QBlock]) // an all-zero block: d = 0
		for p := QBlock; p < 2*QBlock && p < len(a); p++ {
			a[p] *= 1e-30
		}
		if len(a) > 4*QBlock {
			a[3*QBlock+5] = 3e4
		}
		want := q8RefNT(a, w, m)
		for _, level := range q8Levels() {
			for _, acc := range []bool{false, true} {
				init := randSlice(rng, m*n)
				c := append([]float32(nil), init...)
				atQ8Level(level, func() { FrozenMatMulNT(c, a, w, m, acc) })
				for x := range c {
					wx := want[x]
					if acc {
						wx = init[x] + want[x]
					}
					if math.Float32bits(c[x]) != math.Float32bits(wx) {
						t.Fatalf("%s %dx%dx%d acc=%v: C[%d,%d] = %g, want %g", level, m, n, k, acc, x/n, x%n, c[x], wx)
					}
				}
			}
		}
	}
}

// TestQ8TileMutations checks that the comparison above can fail: a change to any input
// the tile reads (a byte of A, an A scale, a weight, a weight scale, a correction) must
// change some output of the kernel at every path. The SDOT tile does not read the
// correction (its signed products need none), so that one is left out of its run.
func TestQ8TileMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const m, n, k = 16, 8, 96
	nb := k / QBlock
	w := NewFrozen(randSlice(rng, n*k), n, k, Q8_0)
	qa := quantActs(randSlice(rng, m*k), m, k)
	tab := append([]uint32(nil), w.q8Table()...)
	blk := append([]byte(nil), w.blk...)
	run := func(level string) [q8TileRows * q8TileCols]float32 {
		var out [q8TileRows * q8TileCols]float32
		atQ8Level(level, func() { q8Tile(&qa.q[0], &qa.d[0], &blk[0], nb*(2+QBlock), &tab[0], nb, &out[0]) })
		return out
	}
	mutations := []struct {
		name string
		do   func()
	}{
		{"A byte", func() { qa.q[2*q8TileBytes+77]++ }},
		{"A scale", func() { qa.d[q8TileRows+3] *= 2 }},
		{"weight", func() { blk[5*nb*(2+QBlock)+(2+QBlock)+2+31]++ }},
		{"weight scale", func() { tab[(2*q8TileCols+6)*2] = math.Float32bits(3) }},
		{"correction", func() { tab[(1*q8TileCols+7)*2+1]++ }},
	}
	for _, level := range q8Levels() {
		base := run(level)
		for _, mu := range mutations {
			if level == "sdot" && mu.name == "correction" {
				continue
			}
			saveQ, saveD := append([]byte(nil), qa.q...), append([]float32(nil), qa.d...)
			saveT, saveB := append([]uint32(nil), tab...), append([]byte(nil), blk...)
			mu.do()
			if run(level) == base {
				t.Errorf("%s: mutating the %s changed no output", level, mu.name)
			}
			copy(qa.q, saveQ)
			copy(qa.d, saveD)
			copy(tab, saveT)
			copy(blk, saveB)
		}
	}
}

// TestQ8IntAccuracy bounds the activation quantisation's error: the integer product is
// within 1.5/127 of Σ|a·w| of the float64 product with the widened weights (each
// activation moves by at most half a step, max|a|/254 of its block).
func TestQ8IntAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const m, n, k = 20, 30, 576
	w := NewFrozen(randSlice(rng, n*k), n, k, Q8_0)
	wf := widened(w)
	a := randSlice(rng, m*k)
	for _, level := range q8Levels() {
		c := make([]float32, m*n)
		atQ8Level(level, func() { FrozenMatMulNT(c, a, w, m, false) })
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s, abs float64
				for p := 0; p < k; p++ {
					s += float64(a[i*k+p]) * float64(wf[j*k+p])
					abs += math.Abs(float64(a[i*k+p]) * float64(wf[j*k+p]))
				}
				if d := math.Abs(float64(c[i*n+j]) - s); d > 1.5/127*abs {
					t.Fatalf("%s C[%d,%d] = %g, float64 %g: off by %g of Σ|a·w| %g", level, i, j, c[i*n+j], s, d, abs)
				}
			}
		}
	}
}

// BenchmarkFrozenQ8Int times the q8_0 product of the MLP's up projection (1536×576) on
// the integer tiles against the float paths, rows of A from a batch-2 decode step to a
// 2048-token training step: GFLOP per CPU second.
func BenchmarkFrozenQ8Int(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	n, k := 1536, 576
	w := NewFrozen(randSlice(rng, n*k), n, k, Q8_0)
	for _, m := range []int{2, 4, 8, 16, 32, 128, 255, 512, 2048} {
		benchIntVsFloat(b, fmt.Sprintf("m%d", m), w, m, w.q8Product) // int: whatever q8IntMinRows says
	}
}

// benchIntVsFloat runs b's sub-benchmarks name/int and name/float: the product of m random
// rows with w on the integer tiles (product) and on the float paths, in GFLOP/s and GFLOP
// per CPU second.
func benchIntVsFloat(b *testing.B, name string, w *Frozen, m int, product func(c, a []float32, m int, acc bool)) {
	rng := rand.New(rand.NewPCG(3, 4))
	n, k := w.Rows, w.Cols
	a, c := randSlice(rng, m*k), make([]float32, m*n)
	for _, path := range []string{"int", "float"} {
		b.Run(name+"/"+path, func(b *testing.B) {
			oldV, oldS, oldF := useVNNI, useSDOT, forceQ8Int
			defer func() { useVNNI, useSDOT, forceQ8Int = oldV, oldS, oldF }()
			run := func() { product(c, a, m, false) }
			if path == "float" {
				useVNNI, useSDOT, forceQ8Int = false, false, false
				run = func() { FrozenMatMulNT(c, a, w, m, false) }
			} else if !useVNNI && !useSDOT {
				b.Skip("no VNNI or SDOT")
			}
			run()
			t0 := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run()
			}
			flop := 2 * float64(m*n*k) * float64(b.N)
			b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			b.ReportMetric(flop/(cpuTime()-t0).Seconds()/1e9, "GFLOP/cpu-s")
		})
	}
}

// BenchmarkQuantActs times the activations' quantisation of a 128-row prompt product
// (k = 576), one goroutine: nanoseconds an activation.
func BenchmarkQuantActs(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	m, k := 128, 576
	a := randSlice(rng, m*k)
	t0 := cpuTime()
	for i := 0; i < b.N; i++ {
		q8ActsPool.Put(quantActs(a, m, k))
	}
	b.ReportMetric(float64((cpuTime()-t0).Nanoseconds())/float64(b.N*m*k), "cpu-ns/act")
}

// TestQuantActsBitExact checks the activations' quantisation at every path bit for bit
// against quantActBlock: ties both ways (a block whose maximum is 127, so q = x), zeros,
// subnormals, a block whose 127/max overflows, infinities and NaNs, rows not a multiple
// of the tile (padding rows).
func TestQuantActsBitExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const m, k = 21, 8 * QBlock
	a := randSlice(rng, m*k)
	blk := func(i, b int) []float32 { return a[i*k+b*QBlock:][:QBlock] }
	for j, v := range []float32{127, 0.5, 1.5, 2.5, -2.5, -0.5, 126.5, -126.5, 3} {
		blk(0, 1)[j] = v
	}
	clear(blk(1, 0))
	for j := range blk(2, 3) {
		blk(2, 3)[j] = math.Float32frombits(uint32(j + 1)) // subnormals: 127/max is +Inf
	}
	blk(3, 2)[7] = float32(math.Inf(-1))
	blk(4, 5)[30] = float32(math.NaN())
	blk(5, 7)[0] = math.MaxFloat32
	want := make([][QBlock]byte, m*k/QBlock)
	wantD := make([]float32, m*k/QBlock)
	for x := range want {
		wantD[x] = quantActBlock(&want[x], a[x*QBlock:][:QBlock])
	}
	for _, level := range q8Levels() {
		var qa *q8Acts
		atQ8Level(level, func() { qa = quantActs(a, m, k) })
		nb := k / QBlock
		for i := 0; i < 32; i++ { // two tiles: rows 21–31 are padding
			tile, li := i/q8TileRows, i%q8TileRows
			for b := 0; b < nb; b++ {
				d := qa.d[(tile*nb+b)*q8TileRows+li]
				var q [QBlock]byte
				for p := range QBlock {
					q[p] = qa.q[(tile*nb+b)*q8TileBytes+(p/4*q8TileRows+li)*4+p%4]
				}
				wq, wd := [QBlock]byte{}, float32(0)
				for p := range wq {
					wq[p] = 0x80
				}
				if i < m {
					wq, wd = want[i*nb+b], wantD[i*nb+b]
				}
				sameD := math.Float32bits(d) == math.Float32bits(wd) || (d != d && wd != wd)
				if q != wq || !sameD {
					t.Fatalf("%s row %d block %d: q %v d %g, want q %v d %g", level, i, b, q, d, wq, wd)
				}
			}
		}
	}
}

// TestQ4IntPaths checks the integer products of unpacked weights (q4_1, q5_0, q4_k):
// q4_1's unpacking in assembly (AVX or NEON) bit for bit against unpackQ4Go (nibbles,
// scales, corrections, minimums), and the whole product the same bits on the VNNI (or
// SDOT) and portable tiles (the minimums' float32 product is common to both) at ragged
// shapes. Its distance from a float64
// product is TestFrozenProducts'.
func TestQ4IntPaths(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, s := range [][4]int{{8, 8, 32, int(Q4_1)}, {17, 13, 96, int(Q4_1)}, {33, 50, 576, int(Q4_1)}, {128, 9, 1536, int(Q4_1)},
		{300, 10, 96, int(Q4_1)}, {8, 8, 32, int(Q4_K)}, {33, 50, 576, int(Q4_K)}, {17, 13, 256, int(Q4_K)}, {130, 9, 1536, int(Q4_K)}} {
		m, n, k := s[0], s[1], s[2]
		nb := k / QBlock
		w := NewFrozen(randSlice(rng, n*k), n, k, WeightFormat(s[3]))
		if w.Format == Q4_1 && (useVNNI || useSDOT) {
			for r := 0; r < n; r++ {
				src := w.blk[r*nb*20:][:nb*20]
				d1, d2 := make([]byte, nb*34), make([]byte, nb*34)
				t1, t2 := make([]uint32, nb*16), make([]uint32, nb*16)
				m1, m2 := make([]float32, nb), make([]float32, nb)
				unpackQ4AVX(&d1[0], &src[0], nb, &t1[0], &m1[0])
				unpackQ4Go(d2, src, nb, t2, m2)
				if string(d1) != string(d2) || fmt.Sprint(t1) != fmt.Sprint(t2) || fmt.Sprint(m1) != fmt.Sprint(m2) {
					t.Fatalf("%dx%d row %d: the assembly unpacks differently", n, k, r)
				}
			}
		}
		a := randSlice(rng, m*k)
		var got [2][]float32
		for x, level := range q8Levels() {
			got[x] = make([]float32, m*n)
			atQ8Level(level, func() { FrozenMatMulNT(got[x], a, w, m, false) })
		}
		if levels := q8Levels(); len(levels) == 2 {
			for x := range got[0] {
				if math.Float32bits(got[0][x]) != math.Float32bits(got[1][x]) {
					t.Fatalf("%s %dx%dx%d: C[%d] = %g on %s, %g portable", w.Format, m, n, k, x, got[0][x], levels[0], got[1][x])
				}
			}
		}
	}
}

// BenchmarkFrozenQ4Int is BenchmarkFrozenQ8Int for the formats the integer tiles take
// unpacked (q4_1; q4_k's rows of 1536 as q4_k, of 576 as q5_0).
func BenchmarkFrozenQ4Int(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range []struct {
		f    WeightFormat
		n, k int
	}{{Q4_1, 1536, 576}, {Q4_K, 1536, 576}, {Q4_K, 576, 1536}} {
		w := NewFrozen(randSlice(rng, s.n*s.k), s.n, s.k, s.f)
		for _, m := range []int{4, 8, 16, 32, 64, 128, 255} {
			benchIntVsFloat(b, fmt.Sprintf("%s/%dx%d/m%d", w.Format, s.n, s.k, m), w, m, w.unpackedProduct)
		}
	}
}

// TestUnpackedRowsAreTheWeights checks the unpacking of q5_0 and q4_k rows for the
// integer tiles against the formats' one dequantiser, bit for bit: every weight is
// float32(d_w·float32(q_w)) + m_w with the unpacked byte, scale and minimum (deqQ4K's
// float32 steps; q5_0's offset in its bytes), and each block's correction is −128·Σq_w.
// Weights span the formats' whole range (q5_0's 0 and 31, q4_k's six-bit scales and
// minimums at both ends), from rows of random values and of constants.
func TestUnpackedRowsAreTheWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, s := range []struct {
		f    WeightFormat
		n, k int
	}{{Q4_K, 7, 96}, {Q4_K, 9, 512}, {Q4_K, 5, 1536}} {
		src := randSlice(rng, s.n*s.k)
		for j := range s.k { // a constant row, a one-hot row, a ramp with an outlier
			src[j], src[s.k+j], src[2*s.k+j] = 0.25, 0, float32(j)*1e-3
		}
		src[s.k+s.k/2], src[2*s.k+3] = -3, 40
		w := NewFrozen(src, s.n, s.k, s.f)
		nb := s.k / QBlock
		wf := widened(w)
		for r := 0; r < s.n; r++ {
			dst := make([]byte, nb*(2+QBlock))
			tab := make([]uint32, nb*q8TileCols*2)
			var mw []float32
			if w.Format != Q5_0 {
				mw = make([]float32, nb)
			}
			w.unpackRow(dst, r, tab, mw)
			for b := range nb {
				scale := math.Float32frombits(tab[b*q8TileCols*2])
				var sum int32
				for p := range QBlock {
					q := int8(dst[b*(2+QBlock)+2+p])
					sum += int32(q)
					got := float32(scale * float32(q))
					if mw != nil {
						got += mw[b]
					}
					if want := wf[r*s.k+b*QBlock+p]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%s %dx%d row %d block %d weight %d: unpacked %v, dequantised %v", w.Format, s.n, s.k, r, b, p, got, want)
					}
				}
				if c := int32(tab[b*q8TileCols*2+1]); c != -128*sum {
					t.Fatalf("%s row %d block %d: correction %d, want %d", w.Format, r, b, c, -128*sum)
				}
			}
		}
	}
}

// TestSumInt8 checks the table's block sums against a plain loop, extremes included.
func TestSumInt8(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for n := 0; n < 1000; n++ {
		q := make([]byte, QBlock)
		for i := range q {
			switch n {
			case 0:
				q[i] = 0x80 // −128 each
			case 1:
				q[i] = 0x7f
			default:
				q[i] = byte(rng.Uint32())
			}
		}
		var want int32
		for _, v := range q {
			want += int32(int8(v))
		}
		if got := sumInt8(q); got != want {
			t.Fatalf("%v: sum %d, want %d", q, got, want)
		}
	}
}

// BenchmarkQ8Table times building a 1536×576 matrix's table (once per matrix, on its
// first product of several rows): nanoseconds a weight.
func BenchmarkQ8Table(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	n, k := 1536, 576
	src := randSlice(rng, n*k)
	w := NewFrozen(src, n, k, Q8_0)
	t0 := cpuTime()
	for i := 0; i < b.N; i++ {
		w.q8once = sync.Once{}
		w.q8Table()
	}
	b.ReportMetric(float64((cpuTime()-t0).Nanoseconds())/float64(b.N*n*k), "cpu-ns/weight")
}
