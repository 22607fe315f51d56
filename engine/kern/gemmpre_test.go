package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// withBudget sets the process's packing budget to bytes for the rest of the test.
func withBudget(t *testing.T, bytes int64) {
	t.Helper()
	old := packLimit.Load()
	SetPackBudget(bytes)
	t.Cleanup(func() { SetPackBudget(old) })
}

// Products with a weight's kept panels are the bits of the same products packing it per
// call: every format the packed GEMM widens, NT and NN, across column blocks (n > nc) and
// slabs (k > kSlab), with and without accumulation, and the fused LoRA products.
func TestPrePanelsAreTheSameBits(t *testing.T) {
	if !useAVX2 {
		t.Skip("the packed GEMM runs with the assembly only")
	}
	withBudget(t, 1<<30)
	rng := rand.New(rand.NewPCG(31, 32))
	rnd := func(n int) []float32 { return randSlice(rng, n) }
	type shape struct{ m, rows, cols int }
	// At least zTileMaxRows rows: fewer take the AVX-512 tiles, which read W in place.
	shapes := []shape{{300, 192, 576}, {260, 1536, 576}, {256, 576, 1536}, {300, nc + 40, 64}, {256, 96, kSlab + 96}}
	for _, f := range []WeightFormat{F32, BF16, Q8_0} {
		for _, s := range shapes {
			m, rows, cols := s.m, s.rows, s.cols
			src := rnd(rows * cols)
			plain, kept := NewFrozen(src, rows, cols, f), NewFrozen(src, rows, cols, f)
			noPanels(plain)
			for _, acc := range []bool{false, true} {
				name := fmt.Sprintf("%v %dx%dx%d acc=%v", f, m, rows, cols, acc)
				a, c0 := rnd(m*cols), rnd(m*rows)
				want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
				FrozenMatMulNTWide(want, a, plain, m, acc)
				FrozenMatMulNTWide(got, a, kept, m, acc)
				sameBits(t, name+" NT", got, want)
				a, c0 = rnd(m*rows), rnd(m*cols)
				want, got = append([]float32(nil), c0...), append([]float32(nil), c0...)
				FrozenMatMulNN(want, a, plain, m, acc)
				FrozenMatMulNN(got, a, kept, m, acc)
				sameBits(t, name+" NN", got, want)
			}
			if plain.ntPre != nil || plain.nnPre != nil || kept.ntPre == nil || kept.nnPre == nil {
				t.Fatalf("%v %v: panels kept without a budget or missing with one", f, s)
			}
			// The products read the kept panels: W[0,0] changed there only changes them.
			a := rnd(m * cols)
			before, after := make([]float32, m*rows), make([]float32, m*rows)
			FrozenMatMulNTWide(before, a, kept, m, false)
			kept.ntPre.p[0] += 1
			FrozenMatMulNTWide(after, a, kept, m, false)
			kept.ntPre.p[0] -= 1
			if after[0] == before[0] {
				t.Fatalf("%v %v: the NT product did not read the kept panels", f, s)
			}
			a = rnd(m * rows)
			before, after = make([]float32, m*cols), make([]float32, m*cols)
			FrozenMatMulNN(before, a, kept, m, false)
			kept.nnPre.p[0] += 1
			FrozenMatMulNN(after, a, kept, m, false)
			if after[0] == before[0] {
				t.Fatalf("%v %v: the NN product did not read the kept panels", f, s)
			}
		}
	}
	// The fused LoRA products read the same panels.
	m, n, k, r := 512, 576, 576, 16
	src, bz, bt := rnd(n*k), rnd(r*k), rnd(n*r)
	plain, kept := NewFrozen(src, n, k, F32), NewFrozen(src, n, k, F32)
	noPanels(plain)
	a := rnd(m * k)
	want, got := make([]float32, m*n), make([]float32, m*n)
	zw, zg := make([]float32, m*r), make([]float32, m*r)
	if !FrozenMatMulNTLoRA(want, a, plain, m, LoRA{Z: zw, Bz: bz, Bt: bt, R: r, Scale: 0.5}) ||
		!FrozenMatMulNTLoRA(got, a, kept, m, LoRA{Z: zg, Bz: bz, Bt: bt, R: r, Scale: 0.5}) {
		t.Skip("the fused product does not take this shape here")
	}
	sameBits(t, "fused NT", got, want)
	sameBits(t, "fused NT's Z", zg, zw)
	if kept.ntPre == nil {
		t.Fatal("the fused product did not keep the weight's panels")
	}
}

// noPanels makes w pack per product, as a matrix that found no budget left does.
func noPanels(w *Frozen) {
	w.ntOnce.Do(func() {})
	w.nnOnce.Do(func() {})
}

func sameBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %v, want %v", name, i, got[i], want[i])
		}
	}
}

// The budget: a matrix whose panels do not fit packs per product (and is still right),
// the bytes kept are counted, and they return to the budget when the matrix is collected.
func TestPackBudget(t *testing.T) {
	if !useAVX2 {
		t.Skip("the packed GEMM runs with the assembly only")
	}
	rng := rand.New(rand.NewPCG(33, 34))
	m, rows, cols := zTileMaxRows+8, 96, 256
	one := int64(rows * cols * 4) // one packing of the matrix (rows and cols are whole panels)
	collected(t)                  // other tests' matrices
	withBudget(t, one+one/2)      // room for one packing, not two
	base := PackedBytes()
	w := NewFrozen(randSlice(rng, rows*cols), rows, cols, F32)
	a := randSlice(rng, m*cols)
	c := make([]float32, m*rows)
	FrozenMatMulNTWide(c, a, w, m, false)
	if w.ntPre == nil || PackedBytes()-base != one {
		t.Fatalf("first packing: kept %v, %d bytes counted, want %d", w.ntPre != nil, PackedBytes()-base, one)
	}
	g := randSlice(rng, m*rows)
	dx := make([]float32, m*cols)
	FrozenMatMulNN(dx, g, w, m, false)
	if w.nnPre != nil || PackedBytes()-base != one {
		t.Fatalf("second packing past the budget: kept %v, %d bytes counted", w.nnPre != nil, PackedBytes()-base)
	}
	want := make([]float32, m*cols)
	refGemm(want, g, w.f32, m, cols, rows, cols, rows, cols, false, false, false)
	for i := range want {
		if d := math.Abs(float64(dx[i] - want[i])); d > 1e-3*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("NN without panels: element %d is %v, want %v", i, dx[i], want[i])
		}
	}
	runtime.KeepAlive(w)
	w = nil
	collected(t)
}

// collected waits until every matrix's panels have been collected and their bytes have
// returned to the budget.
func collected(t *testing.T) {
	t.Helper()
	for try := 0; PackedBytes() != 0; try++ {
		if try == 100 {
			t.Fatalf("%d bytes of panels still counted after collection", PackedBytes())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
