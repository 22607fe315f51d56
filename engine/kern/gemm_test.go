package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// closeRel checks got against want element-wise, within tol relative to mag, the sum of
// |a|·|b| (plus |C| when accumulating) that bounds each element's rounding error.
func closeRel(t testing.TB, name string, got, want, mag []float32, tol float64) {
	t.Helper()
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if d > tol*(float64(mag[i])+1e-30) || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: element %d = %v, want %v (|a||b| %v)", name, i, got[i], want[i], mag[i])
		}
	}
}

func abs32(s []float32) []float32 {
	o := make([]float32, len(s))
	for i, v := range s {
		o[i] = float32(math.Abs(float64(v)))
	}
	return o
}

type mmCase struct {
	op        string
	m, n, k   int
	acc       bool
	a, b, c0  []float32
	fast, ref func(c, a, b []float32)
	want, mag []float32 // filled by check
}

// mmCases builds the three layouts for one shape with random operands.
func mmCases(rng *rand.Rand, m, n, k int, acc bool) []*mmCase {
	var out []*mmCase
	for _, op := range []string{"NT", "NN", "TN"} {
		tc := &mmCase{op: op, m: m, n: n, k: k, acc: acc, a: randSlice(rng, m*k), b: randSlice(rng, n*k), c0: randSlice(rng, m*n)}
		switch op {
		case "NT":
			tc.fast = func(c, a, b []float32) { MatMulNT(c, a, b, m, n, k, acc) }
			tc.ref = func(c, a, b []float32) { refNT(c, a, b, m, n, k, acc) }
		case "NN":
			tc.fast = func(c, a, b []float32) { MatMulNN(c, a, b, m, n, k, acc) }
			tc.ref = func(c, a, b []float32) { refNN(c, a, b, m, n, k, acc) }
		case "TN":
			tc.fast = func(c, a, b []float32) { MatMulTN(c, a, b, m, n, k, acc) }
			tc.ref = func(c, a, b []float32) { refTN(c, a, b, m, n, k, acc) }
		}
		out = append(out, tc)
	}
	return out
}

// check runs fast and compares it with the reference; the reference result and its
// magnitude bound (the same product on |A| and |B|) are computed once per case.
func (tc *mmCase) check(t testing.TB, fast func(c, a, b []float32), path string) {
	t.Helper()
	if tc.want == nil {
		tc.want = append([]float32(nil), tc.c0...)
		tc.ref(tc.want, tc.a, tc.b)
		tc.mag = abs32(tc.c0)
		if !tc.acc {
			clear(tc.mag)
		}
		tc.refAbs(tc.mag)
	}
	got := append([]float32(nil), tc.c0...)
	fast(got, tc.a, tc.b)
	closeRel(t, fmt.Sprintf("%s %s %dx%dx%d acc=%v", path, tc.op, tc.m, tc.n, tc.k, tc.acc), got, tc.want, tc.mag, 1e-4)
}

func (tc *mmCase) refAbs(mag []float32) {
	aa, ba := abs32(tc.a), abs32(tc.b)
	switch tc.op {
	case "NT":
		refNT(mag, aa, ba, tc.m, tc.n, tc.k, true)
	case "NN":
		refNN(mag, aa, ba, tc.m, tc.n, tc.k, true)
	case "TN":
		refTN(mag, aa, ba, tc.m, tc.n, tc.k, true)
	}
}

// packed calls the packed driver directly, whatever shape thresholds the dispatch uses.
func (tc *mmCase) packed(c, a, b []float32) {
	switch tc.op {
	case "NT":
		gemm32(c, a, b, tc.m, tc.n, tc.k, false, true, tc.acc)
	case "NN":
		gemm32(c, a, b, tc.m, tc.n, tc.k, false, false, tc.acc)
	case "TN":
		gemm32(c, a, b, tc.m, tc.n, tc.k, true, false, tc.acc)
	}
}

// withInPlace runs f with the packed GEMM reading its operands in place wherever it can
// (force 1) or packing them all (force -1), whatever the shape would choose.
func withInPlace(force int, f func()) {
	old := inPlaceForce
	inPlaceForce = force
	defer func() { inPlaceForce = old }()
	f()
}

// withGeneric runs f with the assembly disabled, so the pure-Go fallback is exercised.
func withGeneric(f func()) {
	old, old512 := useAVX2, useAVX512
	useAVX2, useAVX512 = false, false
	defer func() { useAVX2, useAVX512 = old, old512 }()
	f()
}

var testShapes = [][3]int{
	{1, 1, 1}, {1, 7, 3}, {3, 5, 17}, {4, 4, 4}, {5, 9, 63}, {6, 16, 1}, {6, 16, 8},
	{7, 13, 33}, {7, 65, 129}, {12, 32, 256}, {13, 17, 257}, {16, 33, 64}, {1, 300, 96},
	{300, 1, 96}, {300, 2, 5}, {130, 70, 40}, {2, 1000, 50}, {16, 1536, 576},
	{97, 150, 600}, {120, 4100, 3}, {512, 576, 576},
	// LoRA's thin products and attention's blocks (operands read in place).
	{512, 16, 576}, {512, 576, 16}, {16, 576, 512}, {48, 480, 64}, {100, 33, 70},
}

func TestMatMulShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, s := range testShapes {
		for _, acc := range []bool{false, true} {
			if acc && s[0]*s[1]*s[2] > 1<<24 {
				continue // accumulation is covered by the smaller shapes; keeps -race quick
			}
			for _, tc := range mmCases(rng, s[0], s[1], s[2], acc) {
				tc.check(t, tc.fast, "dispatch")
				tc.check(t, tc.packed, "packed")
				withInPlace(1, func() { tc.check(t, tc.packed, "packed-in-place") })
				withInPlace(-1, func() { tc.check(t, tc.packed, "packed-copies") })
				withGeneric(func() { tc.check(t, tc.fast, "generic") })
			}
		}
	}
}

func TestMatMulZeroK(t *testing.T) {
	c := []float32{1, 2, 3, 4}
	MatMulNT(c, nil, nil, 2, 2, 0, true)
	if c[3] != 4 {
		t.Fatalf("acc with k=0 changed C: %v", c)
	}
	gemm32(c, nil, nil, 2, 2, 0, false, true, false)
	if c[0] != 0 || c[3] != 0 {
		t.Fatalf("k=0 did not clear C: %v", c)
	}
}

func TestDotAxpy(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 64, 100, 1000} {
		x, y := randSlice(rng, n), randSlice(rng, n)
		var want, mag float64
		for i := range x {
			want += float64(x[i]) * float64(y[i])
			mag += math.Abs(float64(x[i]) * float64(y[i]))
		}
		for _, path := range []string{"dispatch", "generic"} {
			var got float32
			var ya []float32
			run := func() {
				got = Dot(x, y)
				ya = append([]float32(nil), y...)
				Axpy(0.5, x, ya)
			}
			if path == "generic" {
				withGeneric(run)
			} else {
				run()
			}
			if d := math.Abs(float64(got) - want); d > 1e-5*(mag+1) {
				t.Fatalf("%s dot n=%d: %v want %v", path, n, got, want)
			}
			for i := range ya {
				w := float64(y[i]) + 0.5*float64(x[i])
				if math.Abs(float64(ya[i])-w) > 1e-6*(math.Abs(w)+1) {
					t.Fatalf("%s axpy n=%d [%d]: %v want %v", path, n, i, ya[i], w)
				}
			}
		}
	}
}

func FuzzGemm(f *testing.F) {
	f.Add(uint8(1), uint8(1), uint8(1), false, uint64(1))
	f.Add(uint8(7), uint8(13), uint8(33), true, uint64(2))
	f.Add(uint8(6), uint8(16), uint8(255), false, uint64(3))
	f.Fuzz(func(t *testing.T, m, n, k uint8, acc bool, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 7))
		// Keep shapes small so each input runs fast; k up to 300 crosses the kc block.
		mm, nn, kk := int(m%40)+1, int(n%70)+1, int(k)+int(seed%50)
		for _, tc := range mmCases(rng, mm, nn, kk, acc) {
			tc.check(t, tc.packed, "packed")
			tc.check(t, tc.fast, "dispatch")
			withInPlace(1, func() { tc.check(t, tc.packed, "packed-in-place") })
		}
	})
}

func benchMM(b *testing.B, op string, m, n, k int, generic bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	a, w, c := randSlice(rng, m*k), randSlice(rng, n*k), make([]float32, m*n)
	f := map[string]func(){
		"NT": func() { MatMulNT(c, a, w, m, n, k, false) },
		"NN": func() { MatMulNN(c, a, w, m, n, k, false) },
		"TN": func() { MatMulTN(c, a, w, m, n, k, false) },
	}[op]
	if generic {
		old := useAVX2
		useAVX2 = false
		defer func() { useAVX2 = old }()
	}
	b.ResetTimer()
	for b.Loop() {
		f()
	}
	b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// Shapes of a 135M-parameter model (hidden 576, MLP 1536) at 512 tokens.
func BenchmarkMatMul(b *testing.B) {
	for _, s := range []struct {
		op      string
		m, n, k int
	}{
		{"NT", 512, 576, 576}, {"NT", 512, 1536, 576}, {"NN", 512, 576, 1536}, {"TN", 576, 576, 512},
		{"NT", 16, 1536, 576}, {"NT", 1, 1536, 576},
	} {
		for _, path := range []string{"asm", "purego"} {
			b.Run(fmt.Sprintf("%s_%dx%dx%d/%s", s.op, s.m, s.n, s.k, path), func(b *testing.B) {
				benchMM(b, s.op, s.m, s.n, s.k, path == "purego")
			})
		}
	}
}

func BenchmarkDot64(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	x, y := randSlice(rng, 64), randSlice(rng, 64)
	var s float32
	for b.Loop() {
		s += Dot(x, y)
	}
	_ = s
}

func BenchmarkAxpy64(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	x, y := randSlice(rng, 64), randSlice(rng, 64)
	for b.Loop() {
		Axpy(1e-3, x, y)
	}
}

// TestGemmStrided checks Gemm on sub-matrices of wider buffers (row strides past the
// width, as attention reads one head of a multi-head row) in all four transpose layouts,
// against the contiguous reference, with the assembly and without.
func TestGemmStrided(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, s := range [][3]int{{1, 1, 1}, {5, 9, 63}, {6, 16, 64}, {48, 96, 64}, {48, 64, 200}, {130, 64, 48}, {7, 33, 17}, {32, 512, 64}, {64, 512, 32}, {200, 40, 300}} {
		m, n, k := s[0], s[1], s[2]
		for _, aT := range []bool{false, true} {
			for _, bT := range []bool{false, true} {
				for _, acc := range []bool{false, true} {
					// Contiguous operands in the layout asked for, and strided copies.
					a := randSlice(rng, m*k)
					b := randSlice(rng, k*n)
					c0 := randSlice(rng, m*n)
					lda, ldb, ldc := 3+max(k, m), 5+max(k, n), n+7
					as, bs, cs := make([]float32, lda*max(m, k)), make([]float32, ldb*max(k, n)), make([]float32, ldc*m)
					// Logical A is m×k: A[i,p] = a[i*k+p].
					for i := 0; i < m; i++ {
						for p := 0; p < k; p++ {
							if aT {
								as[p*lda+i] = a[i*k+p]
							} else {
								as[i*lda+p] = a[i*k+p]
							}
						}
					}
					// Logical B is k×n: B[p,j] = b[p*n+j].
					for p := 0; p < k; p++ {
						for j := 0; j < n; j++ {
							if bT {
								bs[j*ldb+p] = b[p*n+j]
							} else {
								bs[p*ldb+j] = b[p*n+j]
							}
						}
					}
					want := append([]float32(nil), c0...)
					refNN(want, a, b, m, n, k, acc)
					mag := abs32(c0)
					if !acc {
						clear(mag)
					}
					refNN(mag, abs32(a), abs32(b), m, n, k, true)
					for _, path := range []string{"asm", "in-place", "copies", "generic"} {
						for i := 0; i < m; i++ {
							copy(cs[i*ldc:i*ldc+n], c0[i*n:i*n+n])
						}
						run := func() { Gemm(cs, as, bs, m, n, k, ldc, lda, ldb, aT, bT, acc) }
						switch path {
						case "generic":
							withGeneric(run)
						case "in-place":
							withInPlace(1, run)
						case "copies":
							withInPlace(-1, run)
						default:
							run()
						}
						got := make([]float32, m*n)
						for i := 0; i < m; i++ {
							copy(got[i*n:i*n+n], cs[i*ldc:i*ldc+n])
						}
						closeRel(t, fmt.Sprintf("Gemm %dx%dx%d aT=%v bT=%v acc=%v %s", m, n, k, aT, bT, acc, path), got, want, mag, 1e-4)
					}
				}
			}
		}
	}
}

// TestGemmDeepK checks products deeper than kSlab, which run as slabs of k accumulated
// into C (the LM head's input gradient), in every layout, with operands packed and read
// in place, and through a Frozen B in every weight format (its packers are handed the
// slab's offset in k; q8_0 and q4_1 blocks of 32 must stay whole).
func TestGemmDeepK(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, s := range [][3]int{{7, 20, kSlab + 1}, {50, 33, 2*kSlab + 40}, {100, 17, 3*kSlab - 32}} {
		for _, acc := range []bool{false, true} {
			for _, tc := range mmCases(rng, s[0], s[1], s[2], acc) {
				tc.check(t, tc.fast, "dispatch")
				tc.check(t, tc.packed, "packed")
				withInPlace(1, func() { tc.check(t, tc.packed, "packed-in-place") })
				withInPlace(-1, func() { tc.check(t, tc.packed, "packed-copies") })
			}
		}
	}
	// Frozen B: C = A·Wᵀ (W n×k) and C = A·W (W k×n), k deep, against the widened W.
	m, n, k := 40, 40, 2*kSlab+64 // 40 rows: the packed path (tileMaxRows), q8_0 and q4_1 the integer tiles on VNNI
	for _, f := range []WeightFormat{F32, BF16, Q8_0, Q4_1} {
		src := randSlice(rng, n*k)
		w := NewFrozen(src, n, k, f)
		wide := make([]float32, n*k)
		for r := 0; r < n; r++ {
			w.Row(wide[r*k:(r+1)*k], r)
		}
		a := randSlice(rng, m*k)
		got, want := make([]float32, m*n), make([]float32, m*n)
		FrozenMatMulNT(got, a, w, m, false)
		// A bf16 forward product multiplies activations rounded to bf16, a q8_0 one on the
		// integer tiles activations quantised to 8 bits (as llama.cpp).
		aRef := forwardActs(w, a, m)
		refNT(want, aRef, wide, m, n, k, false)
		mag := make([]float32, m*n)
		refNT(mag, abs32(a), abs32(wide), m, n, k, true)
		closeRel(t, fmt.Sprintf("frozen %v NT %dx%dx%d", f, m, n, k), got, want, mag, 1e-4)

		wt := NewFrozen(src, k, n, f) // k×n: the input gradient's layout
		wideT := make([]float32, k*n)
		for r := 0; r < k; r++ {
			wt.Row(wideT[r*n:(r+1)*n], r)
		}
		got, want = make([]float32, m*n), make([]float32, m*n)
		FrozenMatMulNN(got, a, wt, m, false)
		refNN(want, a, wideT, m, n, k, false)
		clear(mag)
		refNN(mag, abs32(a), abs32(wideT), m, n, k, true)
		closeRel(t, fmt.Sprintf("frozen %v NN %dx%dx%d", f, m, n, k), got, want, mag, 1e-4)
	}
}

// TestGemmShareIsBitIdentical checks that the packed GEMM's result does not depend on how
// share chunks it: the same bits on 1, 2, 3 and 5 goroutines, for a product split by rows
// (many rows) and one split by column panels (few rows), in place and packed.
func TestGemmShareIsBitIdentical(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	defer func(old int) { shareMinForce = old }(shareMinForce)
	shareMinForce = minParallelWork // every product here splits, whatever the hand-off costs
	for _, s := range [][3]int{{301, 200, 96}, {40, 530, 70}} {
		m, n, k := s[0], s[1], s[2]
		a, b := randSlice(rng, m*k), randSlice(rng, k*n)
		for _, force := range []int{1, -1} {
			var want []float32
			for _, procs := range []int{1, 2, 3, 5} {
				runtime.GOMAXPROCS(procs)
				c := make([]float32, m*n)
				withInPlace(force, func() { gemm32(c, a, b, m, n, k, false, false, false) })
				if want == nil {
					want = c
					continue
				}
				if i := firstDiff(c, want); i >= 0 {
					t.Fatalf("%dx%dx%d in place %d, %d goroutines: element %d = %v, %v on one", m, n, k, force, procs, i, c[i], want[i])
				}
			}
		}
	}
}

// TestGemmWideTileIsBitIdentical checks that the AVX-512 tiles (sgemm12x16z, and
// sgemm6x16z for the 6-row tiles it cannot pair) give the bits of the ymm 6-row tiles: every product with it against the same product without,
// packed and in place, transposed operands, accumulating, and under each causal mask.
// Where the assembly cannot run it tests the portable twin.
func TestGemmWideTileIsBitIdentical(t *testing.T) {
	if wideTileAsm && !useAVX512 {
		t.Skip("no AVX-512: sgemm12x16z's assembly cannot run here")
	}
	defer func(v int) { wideForce = v }(wideForce)
	rng := rand.New(rand.NewPCG(9, 10))
	type shape struct{ m, n, k int }
	for _, s := range []shape{{150, 80, 300}, {301, 200, 96}, {40, 530, 70}, {25, 48, 300}, {30, 40, 4200}} {
		a, b := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n)
		c0 := randSlice(rng, s.m*s.n)
		for _, force := range []int{1, -1, 0} {
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				for _, mk := range []Mask{{}, {Kind: MaskC, Off: 3}, {Kind: MaskRowK, Off: 40}, {Kind: MaskColK, Off: 7}} {
					aT, bT := tr[0], tr[1]
					lda, ldb := s.k, s.n
					if aT {
						lda = s.m
					}
					if bT {
						ldb = s.k
					}
					run := func(wide bool) []float32 {
						wideForce = -1
						if wide {
							wideForce = 1
						}
						c := append([]float32(nil), c0...)
						withInPlace(force, func() {
							gemmStridedMask(c, a, b, s.m, s.n, s.k, s.n, lda, ldb, aT, bT, true, true, mk)
						})
						return c
					}
					want, got := run(false), run(true)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%+v in place %d aT %v bT %v mask %+v: element %d = %v, %v with 6-row tiles", s, force, aT, bT, mk, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestShareMinWork: the measured threshold lies within its bounds, and share runs a
// product below it on the caller in one piece and splits one above it where there are
// cores to split over.
func TestShareMinWork(t *testing.T) {
	w := shareMinWork()
	if w < minParallelWork || w > shareMinWorkMax {
		t.Fatalf("shareMinWork = %d, want within [%d, %d]", w, minParallelWork, shareMinWorkMax)
	}
	t.Logf("hand-off threshold on this machine: %d multiply-adds", w)
	pieces := func(work int) int {
		var mu sync.Mutex
		n := 0
		share(96, work, mr, mr, func(lo, hi int) {
			mu.Lock()
			n++
			mu.Unlock()
		})
		return n
	}
	if n := pieces(w - 1); n != 1 {
		t.Errorf("work %d below the threshold ran in %d pieces, want 1", w-1, n)
	}
	if runtime.GOMAXPROCS(0) >= 2 {
		if n := pieces(max(w, minParallelWork)); n < 2 {
			t.Errorf("work %d at the threshold ran in %d piece, want several", w, n)
		}
	}
}

func TestThinDeep(t *testing.T) {
	for _, tc := range []struct {
		m, n, k  int
		aT, want bool
	}{
		{16, 576, 512, true, true},   // a LoRA A's gradient, rank 16
		{1536, 16, 512, true, true},  // a LoRA B's gradient
		{16, 2048, 256, true, true},  // the widest C, the shallowest k
		{16, 2049, 512, true, false}, // C too large
		{17, 576, 512, true, false},  // neither side thin
		{16, 576, 255, true, false},  // too shallow for two parts
		{16, 576, 512, false, false}, // A not transposed: decode's products
		{8, 8, 100000, true, true},   // deeper than a slab of kSlab still splits in parts
	} {
		if got := thinDeep(tc.m, tc.n, tc.k, tc.aT); got != tc.want {
			t.Errorf("thinDeep(%d, %d, %d, %v) = %v, want %v", tc.m, tc.n, tc.k, tc.aT, got, tc.want)
		}
	}
}

// TestGemmThinDeep checks gemmSplitK's thin deep products (a LoRA weight's gradient)
// against the reference, in place and packed, with C contiguous and strided, and that
// their bits do not depend on the number of goroutines.
func TestGemmThinDeep(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	defer func(old int) { shareMinForce = old }(shareMinForce)
	shareMinForce = minParallelWork
	for _, s := range [][3]int{{16, 576, 512}, {576, 16, 512}, {16, 100, 300}, {5, 7, 1000}, {16, 48, 2 * thinSlab}} {
		m, n, k := s[0], s[1], s[2]
		if !thinDeep(m, n, k, true) {
			t.Fatalf("%dx%dx%d is not thin and deep", m, n, k)
		}
		for _, acc := range []bool{false, true} {
			tc := mmCases(rng, m, n, k, acc)[2] // TN: C = Aᵀ·B
			if tc.op != "TN" {
				t.Fatal(tc.op)
			}
			tc.check(t, tc.fast, "dispatch")
			withInPlace(1, func() { tc.check(t, tc.packed, "packed-in-place") })
			withInPlace(-1, func() { tc.check(t, tc.packed, "packed-copies") })
			withGeneric(func() { tc.check(t, tc.packed, "packed-generic") })
			// C inside a wider matrix (ldc = n + 5): the parts are added row by row.
			ldc := n + 5
			strided := func(c, a, b []float32) {
				wide := make([]float32, m*ldc)
				for i := 0; i < m; i++ {
					copy(wide[i*ldc:][:n], c[i*n:][:n])
				}
				gemmStrided(wide, a, b, m, n, k, ldc, m, n, true, false, acc, true)
				for i := 0; i < m; i++ {
					copy(c[i*n:][:n], wide[i*ldc:][:n])
				}
			}
			tc.check(t, strided, "strided C")
			var want []float32
			for _, procs := range []int{1, 2, 3, 5} {
				runtime.GOMAXPROCS(procs)
				c := append([]float32(nil), tc.c0...)
				tc.packed(c, tc.a, tc.b)
				if want == nil {
					want = c
					continue
				}
				if i := firstDiff(c, want); i >= 0 {
					t.Fatalf("%dx%dx%d acc=%v, %d goroutines: element %d = %v, %v on one", m, n, k, acc, procs, i, c[i], want[i])
				}
			}
		}
	}
}

// firstDiff is the index of the first element whose bits differ between got and want, or
// -1 when they are the same bits.
func firstDiff(got, want []float32) int {
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i
		}
	}
	return -1
}
