package kern

import (
	"sync"
	"time"
)

// The packed GEMM's 12×16 AVX-512 tile (sgemm12x16z) doubles the FLOPs a cycle where a core
// has two 512-bit FMA pipes: on the Xeon of docs/performance.md, 161 against 70 GFLOP/s for
// the 6×16 AVX2 tile. Where a core has one such pipe, splits a zmm FMA into two 256-bit
// halves (Zen 4) or lowers its clock for zmm code, it gains nothing or loses. Both tiles
// give the same bits, so the choice is about speed alone: it is measured once, on the first
// product that could take the wide tile.

// wideForce overrides the measurement (tests): 1 takes the wide tile wherever AVX-512
// allows, -1 never, 0 measures.
var wideForce = 0

var wideMeasure struct {
	once sync.Once
	fast bool
}

// wideTile reports whether the packed GEMM runs pairs of 6-row panels as 12×16 tiles.
func wideTile() bool {
	switch {
	case !useAVX512 || !useAVX2:
		return false
	case wideForce != 0:
		return wideForce > 0
	}
	wideMeasure.once.Do(func() { wideMeasure.fast = wideTileFaster() })
	return wideMeasure.fast
}

// wideTileFaster times both tiles on one packed block that stays in L2 (144 rows of A, 4
// panels of B, k = 192: a few ms in all), alternately, best of 5 each, and says whether the
// wide tile is at least 10 % faster.
func wideTileFaster() bool {
	const k, rows, pans, passes = 192, 144, 4, 8
	const ldc = pans * nr
	a, b, c := make([]float32, rows*k), make([]float32, pans*nr*k), make([]float32, rows*ldc)
	for i := range a {
		a[i] = float32(i%7) * 0.25
	}
	for i := range b {
		b[i] = float32(i%5) * 0.5
	}
	narrow := func() {
		for j := 0; j < pans; j++ {
			for i := 0; i < rows; i += mr {
				sgemm6x16(k, &a[i*k], &b[j*nr*k], &c[i*ldc+j*nr], ldc, false)
			}
		}
	}
	wide := func() {
		for j := 0; j < pans; j++ {
			for i := 0; i < rows; i += 2 * mr {
				sgemm12x16z(k, &a[i*k], &a[(i+mr)*k], 4, 4*mr, &b[j*nr*k], 4*nr, &c[i*ldc+j*nr], ldc, false)
			}
		}
	}
	return tenPercentFaster(passes, wide, narrow)
}

// tenPercentFaster times passes runs of a and of b, alternately, best of 5 each, and
// says whether a is at least 10 % faster than b (the bar a kernel choice measured on the
// machine at hand must clear: below it, noise could decide).
func tenPercentFaster(passes int, a, b func()) bool {
	timed := func(f func()) time.Duration {
		t0 := time.Now()
		for range passes {
			f()
		}
		return time.Since(t0)
	}
	ta, tb := time.Duration(1<<62), time.Duration(1<<62)
	for range 5 {
		ta = min(ta, timed(a))
		tb = min(tb, timed(b))
	}
	return ta*11 < tb*10
}
