package device

import (
	"sync"

	"github.com/tuft-go/tuft/engine/kern"
)

// The CPU's helpers for splitting elementwise and row-wise work over the cores.

// expChunk is the elements an elementwise operation exponentiates at a time, into a
// buffer on the stack.
const expChunk = 256

// elemGrain is the fewest elements worth a goroutine of an elementwise operation.
const elemGrain = 1 << 14

// rowGrain is the fewest rows of width d worth a goroutine.
func rowGrain(d int) int { return max(1, elemGrain/max(d, 1)) }

// spread runs f over [0, n) in one contiguous chunk per GOMAXPROCS goroutine, or on the
// caller's alone when n < 2·grain.
func spread(n, grain int, f func(lo, hi int)) {
	w := min(kern.Procs(), n/max(grain, 1))
	if w <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + w - 1) / w
	for lo := 0; lo < n; lo += chunk {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, min(lo+chunk, n))
		}()
	}
	wg.Wait()
}

// sum64 is Σx in float64, in four chains so the adds overlap.
func sum64[T Float](x []T) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float64(x[i])
		s1 += float64(x[i+1])
		s2 += float64(x[i+2])
		s3 += float64(x[i+3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// sumSq64 is Σx² in float64, in four chains so the adds overlap: the one sum of squares
// of RMSNorm and AddRMSNorm (their bits agree).
func sumSq64[T Float](x []T) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float64(x[i]) * float64(x[i])
		s1 += float64(x[i+1]) * float64(x[i+1])
		s2 += float64(x[i+2]) * float64(x[i+2])
		s3 += float64(x[i+3]) * float64(x[i+3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i]) * float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}
