package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func randSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

func close32(t *testing.T, name string, got, want []float32, k int) {
	t.Helper()
	tol := 1e-5 * math.Sqrt(float64(k)+1) * 4
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*math.Max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("%s: element %d = %v, want %v", name, i, got[i], want[i])
		}
	}
}

func TestFastKernelsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := [][3]int{{1, 1, 1}, {1, 7, 3}, {3, 5, 17}, {4, 4, 4}, {5, 9, 63}, {7, 65, 129}, {16, 33, 64}, {1, 300, 96}, {130, 70, 40}, {2, 1000, 50}}
	for _, s := range shapes {
		m, n, k := s[0], s[1], s[2]
		for _, acc := range []bool{false, true} {
			name := fmt.Sprintf("%dx%dx%d acc=%v", m, n, k, acc)
			a, bt, bn := randSlice(rng, m*k), randSlice(rng, n*k), randSlice(rng, k*n)
			at := randSlice(rng, k*m)
			init := randSlice(rng, m*n)
			for _, tc := range []struct {
				op   string
				fast func(c []float32)
				ref  func(c []float32)
			}{
				{"NT", func(c []float32) { MatMulNT(c, a, bt, m, n, k, acc) }, func(c []float32) { refNT(c, a, bt, m, n, k, acc) }},
				{"NN", func(c []float32) { MatMulNN(c, a, bn, m, n, k, acc) }, func(c []float32) { refNN(c, a, bn, m, n, k, acc) }},
				{"TN", func(c []float32) { MatMulTN(c, at, bn, m, n, k, acc) }, func(c []float32) { refTN(c, at, bn, m, n, k, acc) }},
			} {
				got, want := append([]float32(nil), init...), append([]float32(nil), init...)
				tc.fast(got)
				tc.ref(want)
				close32(t, tc.op+" "+name, got, want, k)
			}
		}
	}
	x, y := randSlice(rng, 37), randSlice(rng, 37)
	var want float64
	for i := range x {
		want += float64(x[i]) * float64(y[i])
	}
	if d := math.Abs(float64(Dot(x, y)) - want); d > 1e-4 {
		t.Fatalf("dot %v vs %v", Dot(x, y), want)
	}
}

func benchNT(b *testing.B, m, n, k int) {
	rng := rand.New(rand.NewPCG(1, 2))
	a, w, c := randSlice(rng, m*k), randSlice(rng, n*k), make([]float32, m*n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		MatMulNT(c, a, w, m, n, k, false)
	}
	b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkNT512x576x1536(b *testing.B) { benchNT(b, 512, 1536, 576) }
func BenchmarkNTDecode16(b *testing.B)     { benchNT(b, 16, 1536, 576) }
func BenchmarkNTGEMV(b *testing.B)         { benchNT(b, 1, 1536, 576) }

// TestExp checks Exp against math.Exp over the range softmax and SiLU feed it, with the
// assembly and without, including ragged lengths (the scalar tail), aliasing and the
// clamps at both ends.
func TestExp(t *testing.T) {
	src := []float32{0, 1, -1, 88, -87, -88.5, -1000, 100, float32(math.Inf(-1)), 1e-8, -1e-8, 0.5, 3.25}
	for i := 0; i < 1000; i++ {
		src = append(src, float32(i-500)/7.3)
	}
	for _, generic := range []bool{false, true} {
		for _, n := range []int{len(src), 7, 9, 16} {
			in := src[:n]
			got := make([]float32, n)
			run := func() { Exp(got, in, 0.5, -0.25) }
			if generic {
				withGeneric(run)
			} else {
				run()
			}
			for i, x := range in {
				arg := float64(x*0.5 - 0.25)
				want := math.Exp(math.Min(math.Max(arg, -88.3762626647949), 88.3762626647949))
				if arg < -87.3 {
					if got[i] > 1e-37 || got[i] < 0 {
						t.Fatalf("generic=%v exp(%v) = %v, want about 0", generic, arg, got[i])
					}
					continue
				}
				if math.Abs(float64(got[i])-want) > 3e-7*want {
					t.Fatalf("generic=%v exp(%v) = %v, want %v", generic, arg, got[i], want)
				}
			}
		}
	}
	// In place.
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	Exp(x, x, 1, 0)
	if math.Abs(float64(x[8])-math.Exp(9)) > 3e-7*math.Exp(9) {
		t.Fatalf("in place: exp(9) = %v", x[8])
	}
}

// TestExpWideIsBitIdentical checks that Exp's 16-lane AVX-512 path gives exp32AVX's bits
// on every element (lengths with 8- and 1-element tails, NaN, infinities, both clamps).
func TestExpWideIsBitIdentical(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 on this machine: Exp takes exp32AVX alone")
	}
	rng := rand.New(rand.NewPCG(15, 16))
	src := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 88.4, -88.4, 1e-30}
	for len(src) < 1013 {
		src = append(src, float32(rng.NormFloat64()*40))
	}
	for _, n := range []int{16, 24, 33, 1013} {
		wide, narrow := make([]float32, n), make([]float32, n)
		Exp(wide, src[:n], 0.7, -0.3)
		useAVX512 = false
		Exp(narrow, src[:n], 0.7, -0.3)
		useAVX512 = true
		for i := range wide {
			if math.Float32bits(wide[i]) != math.Float32bits(narrow[i]) {
				t.Fatalf("n=%d: exp(%v·0.7−0.3) = %v with 16 lanes, %v with 8", n, src[i], wide[i], narrow[i])
			}
		}
	}
}
