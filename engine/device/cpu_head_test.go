package device_test

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/device/devicetest"
	"github.com/tuft-go/tuft/engine/kern"
)

// runHead runs LossHead and LossHeadBack on the CPU with the unembedding w.
func runHead(d *device.CPU[float32], hc devicetest.HeadCase, w device.Tensor[float32]) (logp, dh []float32) {
	f := func(v []float64) []float32 {
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = float32(x)
		}
		return out
	}
	h := &device.Head[float32]{H: device.Host(f(hc.H)), W: w, Rows: hc.Rows, D: hc.D, V: hc.V,
		Off: device.Host(hc.Off), Tok: device.Host(hc.Tok), LogP: d.Alloc(len(hc.Tok)), E: d.Alloc(hc.Rows * hc.D)}
	d.LossHead(h)
	out := d.Alloc(hc.Rows * hc.D)
	d.LossHeadBack(h, out, device.Host(f(hc.G)))
	return h.LogP.Host(), out.Host()
}

func w32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// The CPU's loss head gives the same bits on one core as on four: every row's values
// depend on that row alone and the products sum in a fixed order.
func TestCPULossHeadDeterministicAcrossCores(t *testing.T) {
	hc := devicetest.NewHeadCase(rand.New(rand.NewPCG(3, 4)), 200, 64, 2000, false)
	d := device.NewCPU[float32]()
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	lp1, dh1 := runHead(d, hc, device.Host(w32(hc.W)))
	runtime.GOMAXPROCS(4)
	lp4, dh4 := runHead(d, hc, device.Host(w32(hc.W)))
	for i := range lp1 {
		if math.Float32bits(lp1[i]) != math.Float32bits(lp4[i]) {
			t.Fatalf("logprob %d: %v on one core, %v on four", i, lp1[i], lp4[i])
		}
	}
	for i := range dh1 {
		if math.Float32bits(dh1[i]) != math.Float32bits(dh4[i]) {
			t.Fatalf("dH %d: %v on one core, %v on four", i, dh1[i], dh4[i])
		}
	}
}

// With the unembedding stored narrowed (bfloat16, Q8_0: the CPU's weight formats), the
// head matches the float64 reference within the format's rounding.
func TestCPULossHeadFrozenFormats(t *testing.T) {
	t.Parallel()
	hc := devicetest.NewHeadCase(rand.New(rand.NewPCG(5, 6)), 70, 64, 300, false)
	want := devicetest.HeadReference(hc)
	wantLP, wantDH := want.LogP, want.DH
	for _, f := range []struct {
		format kern.WeightFormat
		tol    float64
	}{{kern.F32, 1e-5}, {kern.BF16, 2e-2}, {kern.Q8_0, 3e-2}} {
		d := device.NewCPUWeights[float32](f.format)
		lp, dh := runHead(d, hc, d.WeightMatrix(w32(hc.W), hc.V, hc.D))
		if e := relErr(lp, wantLP); e > f.tol {
			t.Errorf("%v: logprobs relative error %.3g above %.3g", f.format, e, f.tol)
		}
		if e := relErr(dh, wantDH); e > f.tol {
			t.Errorf("%v: dH relative error %.3g above %.3g", f.format, e, f.tol)
		}
	}
}

func relErr(got []float32, want []float64) float64 {
	var d, n float64
	for i, w := range want {
		d += (float64(got[i]) - w) * (float64(got[i]) - w)
		n += w * w
	}
	return math.Sqrt(d / n)
}
