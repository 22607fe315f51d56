package device

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// loraCase is many adapters' runs over 16 rows each, big enough that eachRun spreads
// them over goroutines, with adapter 0's gradients shared by three runs.
func loraCase(in, out int) (x, y, dy []float32, runs []LoraRun[float32], ads [][4][]float32) {
	rng := rand.New(rand.NewPCG(7, 8))
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	ranks := []int{16, 1, 64, 8, 32, 4}
	for _, r := range ranks {
		ads = append(ads, [4][]float32{rnd(r * in), rnd(out * r), rnd(r * in), rnd(out * r)})
	}
	row := 0
	for i := 0; i < 12; i++ {
		k := i % len(ranks)
		if i%4 == 3 {
			k = 0 // adapter 0 again: its gradients are shared
		}
		n := 16 + i%5
		runs = append(runs, LoraRun[float32]{Row: row, N: n, Rank: ranks[k], A: Host(ads[k][0]), B: Host(ads[k][1]),
			Scale: 0.5, Z: Host(make([]float32, n*ranks[k])), GA: Host(ads[k][2]), GB: Host(ads[k][3])})
		row += n + 2 // two rows without adapter
	}
	return rnd(row * in), rnd(row * out), rnd(row * out), runs, ads
}

// The CPU's grouped product gives bit for bit what the per-run products (the engine's
// path before it) give, on one goroutine and on several.
func TestCPULoraEqualsPerRunBitForBit(t *testing.T) {
	in, out := 96, 80
	per := func() ([]float32, []float32, [][4][]float32) {
		x, y, dy, runs, ads := loraCase(in, out)
		dx := make([]float32, len(x))
		c := NewCPU[float32]()
		for _, r := range runs {
			xs, ys, dys := Host(x[r.Row*in:(r.Row+r.N)*in]), Host(y[r.Row*out:(r.Row+r.N)*out]), Host(dy[r.Row*out:(r.Row+r.N)*out])
			c.MatMulNT(r.Z, xs, r.A, r.N, r.Rank, in, false)
			c.Scale(r.Z, r.Scale)
			c.MatMulNT(ys, r.Z, r.B, r.N, out, r.Rank, true)
			c.MatMulTN(r.GB, dys, r.Z, out, r.Rank, r.N, true)
			dz := c.Alloc(r.N * r.Rank)
			c.MatMulNN(dz, dys, r.B, r.N, r.Rank, out, false)
			c.Scale(dz, r.Scale)
			c.MatMulTN(r.GA, dz, xs, r.Rank, in, r.N, true)
			c.MatMulNN(Host(dx[r.Row*in:(r.Row+r.N)*in]), dz, r.A, r.N, in, r.Rank, true)
		}
		return y, dx, ads
	}
	grouped := func(procs int) ([]float32, []float32, [][4][]float32) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		x, y, dy, runs, ads := loraCase(in, out)
		dx := make([]float32, len(x))
		c := NewCPU[float32]()
		c.LoraForward(Host(y), Host(x), runs, in, out)
		c.LoraBackward(Host(dx), Host(dy), Host(x), Host(make([]float32, LoraScratch(runs))), runs, in, out)
		return y, dx, ads
	}
	wy, wdx, wads := per()
	for _, procs := range []int{1, 2, 5} {
		y, dx, ads := grouped(procs)
		if !slices.Equal(y, wy) || !slices.Equal(dx, wdx) {
			t.Fatalf("GOMAXPROCS=%d: y or dx differs from the per-run path", procs)
		}
		for k := range ads {
			for j := 2; j < 4; j++ {
				if !slices.Equal(ads[k][j], wads[k][j]) {
					t.Fatalf("GOMAXPROCS=%d: adapter %d's gradient %d differs from the per-run path", procs, k, j)
				}
			}
		}
	}
}

// gradGroupsBufs are TestLoraGradGroups' gradient tensors, on the heap: GradGroups keys
// tensors by address, and slices the compiler kept on the test's stack moved when the
// stack grew between two keys (the test failed once a new file changed its inlining).
var gradGroupsBufs = [2][]float32{make([]float32, 4), make([]float32, 4)}

// GradGroups keeps runs that share gradient tensors together, in order, and leaves out
// runs without gradients.
func TestLoraGradGroups(t *testing.T) {
	g1, g2 := Host(gradGroupsBufs[0]), Host(gradGroupsBufs[1])
	runs := []LoraRun[float32]{{GA: g1}, {}, {GA: g2}, {GA: g1}, {GA: g2.Slice(0, 2)}}
	got := GradGroups(runs)
	want := [][]int{{0, 3}, {2, 4}}
	if len(got) != len(want) || !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
		t.Fatalf("GradGroups = %v, want %v", got, want)
	}
}

// benchLora times one projection's LoRA forward and backward (576 → 1536, SmolLM2-135M's
// gate_proj, rank 16) over runs × rows, grouped or run by run as the engine did before.
func benchLora(b *testing.B, runs, rows int, grouped bool) {
	in, out, rank := 576, 1536, 16
	rng := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	n := runs * rows
	x, y, dy, dx := Host(rnd(n*in)), Host(rnd(n*out)), Host(rnd(n*out)), Host(rnd(n*in))
	rs := make([]LoraRun[float32], runs)
	for i := range rs {
		rs[i] = LoraRun[float32]{Row: i * rows, N: rows, Rank: rank, A: Host(rnd(rank * in)), B: Host(rnd(out * rank)), Scale: 1,
			Z: Host(make([]float32, rows*rank)), GA: Host(make([]float32, rank*in)), GB: Host(make([]float32, out*rank))}
	}
	c := NewCPU[float32]()
	dz := Host(make([]float32, LoraScratch(rs)))
	b.ResetTimer()
	for range b.N {
		if grouped {
			c.LoraForward(y, x, rs, in, out)
			c.LoraBackward(dx, dy, x, dz, rs, in, out)
			continue
		}
		for _, r := range rs {
			xs, ys, dys := x.Slice(r.Row*in, (r.Row+r.N)*in), y.Slice(r.Row*out, (r.Row+r.N)*out), dy.Slice(r.Row*out, (r.Row+r.N)*out)
			c.MatMulNT(r.Z, xs, r.A, r.N, r.Rank, in, false)
			c.Scale(r.Z, r.Scale)
			c.MatMulNT(ys, r.Z, r.B, r.N, out, r.Rank, true)
			c.MatMulTN(r.GB, dys, r.Z, out, r.Rank, r.N, true)
			d := dz.Slice(0, r.N*r.Rank)
			c.MatMulNN(d, dys, r.B, r.N, r.Rank, out, false)
			c.Scale(d, r.Scale)
			c.MatMulTN(r.GA, d, xs, r.Rank, in, r.N, true)
			c.MatMulNN(dx.Slice(r.Row*in, (r.Row+r.N)*in), d, r.A, r.N, in, r.Rank, true)
		}
	}
}

func BenchmarkLoraTrain1x512Grouped(b *testing.B) { benchLora(b, 1, 512, true) }
func BenchmarkLoraTrain1x512PerRun(b *testing.B)  { benchLora(b, 1, 512, false) }
func BenchmarkLoraTrain16x32Grouped(b *testing.B) { benchLora(b, 16, 32, true) }
func BenchmarkLoraTrain16x32PerRun(b *testing.B)  { benchLora(b, 16, 32, false) }
func BenchmarkLoraDecode16x1Grouped(b *testing.B) { benchLora(b, 16, 1, true) }
func BenchmarkLoraDecode16x1PerRun(b *testing.B)  { benchLora(b, 16, 1, false) }
