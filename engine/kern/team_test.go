package kern

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBurstShare checks the burst's partners on four Ps: every index of every share runs
// once, each worker number below GOMAXPROCS runs one chunk at a time, splits nested in a
// chunk, splits from other goroutines and a second Burst meanwhile all complete, and the
// partners stop after the burst.
func TestBurstShare(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	if BurstShare(10, 1, func(_, _, _ int) {}) || Bursting() && team.active.Load() == 0 {
		t.Fatal("BurstShare ran outside a burst")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var inUse [4]atomic.Bool
	var byPartners atomic.Int64 // chunks the partners ran
	check := func(n, grain int, nest bool) {
		hits := make([]atomic.Int32, n)
		f := func(w, lo, hi int) {
			if w < 0 || w >= 4 || !inUse[w].CompareAndSwap(false, true) {
				t.Errorf("worker %d: out of range or running two chunks at once", w)
				return
			}
			defer inUse[w].Store(false)
			if w > 0 {
				byPartners.Add(1)
			}
			for i := lo; i < hi; i++ {
				hits[i].Add(1)
			}
			if nest { // a split inside a chunk: the partners are busy, so goroutines take it
				var inner atomic.Int64
				split(64, minParallelWork, 4, func(lo, hi int) { inner.Add(int64(hi - lo)) })
				if inner.Load() != 64 {
					t.Errorf("nested split covered %d of 64", inner.Load())
				}
			}
		}
		if !BurstShare(n, grain, f) {
			// Another goroutine's split holds the partners: run it as split would.
			f(0, 0, n)
		}
		for i := range hits {
			if h := hits[i].Load(); h != 1 {
				t.Fatalf("n %d grain %d: index %d ran %d times", n, grain, i, h)
			}
		}
	}
	Burst(func() {
		if !Bursting() {
			t.Fatal("no partners in a burst on 4 Ps")
		}
		var wg sync.WaitGroup
		for g := range 3 { // other goroutines share the partners meanwhile
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 7))
				for range 200 {
					var sum atomic.Int64
					n := 1 + r.IntN(5000)
					split(n, minParallelWork, 16, func(lo, hi int) { sum.Add(int64(hi - lo)) })
					if sum.Load() != int64(n) {
						t.Errorf("split of %d covered %d", n, sum.Load())
					}
				}
			}()
		}
		wg.Add(1)
		go func() { // a second burst runs its function as a plain call
			defer wg.Done()
			ran := false
			Burst(func() { ran = true })
			if !ran {
				t.Error("an overlapping Burst did not run its function")
			}
		}()
		deadline := time.Now().Add(5 * time.Second)
		for i := 0; i < 300 || byPartners.Load() == 0; i++ {
			if time.Now().After(deadline) {
				t.Fatal("the partners ran no chunk in 5 s")
			}
			check(1+rng.IntN(3000), 1+rng.IntN(200), i%10 == 0)
		}
		wg.Wait()
	})
	deadline := time.Now().Add(5 * time.Second)
	for team.partners.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d partners still spinning 5 s after the burst", team.partners.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if Bursting() {
		t.Fatal("Bursting after the burst ended")
	}
}

// TestBurstProductBits: a one-row product, a batch's tiled product and a prompt's packed
// GEMM (split's and share's chunks) give the same bits in a burst, their chunks on the
// partners, as without one.
func TestBurstProductBits(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 1000, 576
	src := make([]float32, rows*cols)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	for _, f := range []WeightFormat{F32, BF16, Q8_0, Q4_K} {
		w := NewFrozen(src, rows, cols, f)
		for _, m := range []int{1, 5, 128} {
			a := make([]float32, m*cols)
			for i := range a {
				a[i] = float32(rng.NormFloat64())
			}
			want, got := make([]float32, m*rows), make([]float32, m*rows)
			FrozenMatMulNT(want, a, w, m, false)
			Burst(func() { FrozenMatMulNT(got, a, w, m, false) })
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%v, %d rows: element %d = %v in a burst, %v without", f, m, i, got[i], want[i])
				}
			}
		}
	}
}
