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

// headChunk keeps a chunk's logits within the budget, in equal chunks, and covers every
// row.
func TestHeadChunk(t *testing.T) {
	for _, c := range []struct{ rows, v, want int }{
		{512, 49152, 256},  // 48 MiB: 256 rows
		{300, 49152, 150},  // two equal chunks, not 256 + 44
		{256, 49152, 256},  // one
		{2048, 49152, 256}, // eight
		{1, 49152, 1},
		{0, 49152, 0},
		{1000, 152064, 77}, // Qwen's vocabulary: 80 rows at most, 13 chunks of 77 (the last 76)
		{100, 1 << 30, 15}, // a budget below 16 rows still takes 16 (7 chunks of 15)
		{4000, 2000, 4000}, // a small vocabulary: one chunk
	} {
		got := device.HeadChunk(c.rows, c.v)
		if got != c.want {
			t.Errorf("headChunk(%d, %d) = %d, want %d", c.rows, c.v, got, c.want)
		}
	}
}

// Computed a chunk at a time (12 chunks of 16 rows and one of 8; 4 of 50) or all at once, the
// head gives the reference's log-probabilities and input gradient.
func TestCPULossHeadChunks(t *testing.T) {
	hc := devicetest.NewHeadCase(rand.New(rand.NewPCG(9, 10)), 200, 64, 2000, false)
	want := devicetest.HeadReference(hc)
	for _, budget := range []int{16 * 4 * 2000, 70 * 4 * 2000, 1 << 30} {
		restore := device.SetHeadChunkBytes(budget)
		d := device.NewCPU[float32]()
		lp, dh := runHead(d, hc, device.Host(w32(hc.W)))
		restore()
		if e := relErr(lp, want.LogP); e > 1e-5 {
			t.Errorf("budget %d B: logprobs relative error %.3g", budget, e)
		}
		if e := relErr(dh, want.DH); e > 1e-5 {
			t.Errorf("budget %d B: dH relative error %.3g", budget, e)
		}
	}
}
