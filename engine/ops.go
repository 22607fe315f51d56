package engine

import (
	"math"
	"runtime"
	"sync"

	"github.com/tuft-go/tuft/engine/kern"
)

// parallel runs f(i) for i in [0, n) on up to GOMAXPROCS goroutines.
func parallel(n int, f func(i int)) {
	w := runtime.GOMAXPROCS(0)
	if w > n {
		w = n
	}
	if w <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for g := 0; g < w; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// rmsNorm: y = x · rstd · w with rstd = 1/sqrt(mean(x²)+eps), row by row. It returns
// rstd per row for the backward pass.
func rmsNorm[T kern.Float](y, x, w []T, rows, d int, eps float64) []T {
	rstd := make([]T, rows)
	for r := 0; r < rows; r++ {
		xr := x[r*d : r*d+d]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		s := T(1 / math.Sqrt(ss/float64(d)+eps))
		rstd[r] = s
		yr := y[r*d : r*d+d]
		for i, v := range xr {
			yr[i] = v * s * w[i]
		}
	}
	return rstd
}

// rmsNormBack adds to dx the gradient through y = x·rstd·w (w frozen).
func rmsNormBack[T kern.Float](dx, dy, x, w, rstd []T, rows, d int) {
	for r := 0; r < rows; r++ {
		xr, dyr, dxr := x[r*d:r*d+d], dy[r*d:r*d+d], dx[r*d:r*d+d]
		s := rstd[r]
		var dot T
		for i := range xr {
			dot += dyr[i] * w[i] * xr[i]
		}
		c := s * s * s * dot / T(d)
		for i := range xr {
			dxr[i] += s*dyr[i]*w[i] - c*xr[i]
		}
	}
}

// ropeTables holds cos and sin per position and frequency (HF rotate_half layout).
type ropeTables struct {
	half     int
	cos, sin []float64 // [pos][half]
}

// invFreq computes RoPE's inverse frequencies with optional llama3 scaling.
func invFreq(c Config) []float64 {
	half := c.HeadDim / 2
	f := make([]float64, half)
	for i := range f {
		f[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.HeadDim))
	}
	if s := c.RopeScaling; s != nil && s.Type == "llama3" {
		old := float64(s.OriginalMaxPositions)
		lowWave, highWave := old/s.LowFreqFactor, old/s.HighFreqFactor
		for i, v := range f {
			wave := 2 * math.Pi / v
			switch {
			case wave < highWave:
			case wave > lowWave:
				f[i] = v / s.Factor
			default:
				smooth := (old/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				f[i] = (1-smooth)*v/s.Factor + smooth*v
			}
		}
	}
	return f
}

func newRope(c Config, positions int) *ropeTables {
	f := invFreq(c)
	half := len(f)
	rt := &ropeTables{half: half, cos: make([]float64, positions*half), sin: make([]float64, positions*half)}
	for p := 0; p < positions; p++ {
		for i, v := range f {
			a := float64(p) * v
			rt.cos[p*half+i], rt.sin[p*half+i] = math.Cos(a), math.Sin(a)
		}
	}
	return rt
}

// apply rotates heads of x (rows × heads·hd) in place; row r is at position pos0+r.
// inverse applies the transpose (the backward pass).
func ropeApply[T kern.Float](rt *ropeTables, x []T, rows, heads, pos0 int, inverse bool) {
	half := rt.half
	hd := 2 * half
	for r := 0; r < rows; r++ {
		cs := rt.cos[(pos0+r)*half : (pos0+r+1)*half]
		sn := rt.sin[(pos0+r)*half : (pos0+r+1)*half]
		for h := 0; h < heads; h++ {
			v := x[(r*heads+h)*hd : (r*heads+h+1)*hd]
			for i := 0; i < half; i++ {
				c, s := T(cs[i]), T(sn[i])
				if inverse {
					s = -s
				}
				a, b := v[i], v[i+half]
				v[i] = a*c - b*s
				v[i+half] = b*c + a*s
			}
		}
	}
}

func silu(x float64) float64 { return x / (1 + math.Exp(-x)) }

// logSoftmaxRow writes log-softmax of logits into out (may alias) using float64 sums.
func logSoftmaxRow[T kern.Float](out, logits []T) {
	m := math.Inf(-1)
	for _, v := range logits {
		if float64(v) > m {
			m = float64(v)
		}
	}
	var s float64
	for _, v := range logits {
		s += math.Exp(float64(v) - m)
	}
	lse := T(m + math.Log(s))
	for i, v := range logits {
		out[i] = v - lse
	}
}
