//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/device/devicetest"
)

// openOrSkip opens GPU 0, or checks that the failure says what is missing and skips
// (fails with TUFT_REQUIRE_GPU set).
func openOrSkip(t *testing.T, o Options) *Device {
	t.Helper()
	o.LibDirs = testLibDirs()
	d, err := Open(o)
	if err == nil {
		t.Logf("device: %s", d.Name())
		return d
	}
	msg := err.Error()
	if !strings.Contains(msg, "no NVIDIA driver: libcuda.so.1 not found") && !errors.Is(err, errNoDevice) &&
		!strings.Contains(msg, "cuInit") && !strings.Contains(msg, "cuBLAS") {
		t.Fatalf("Open failed without naming what is missing: %v", err)
	}
	if os.Getenv("TUFT_REQUIRE_GPU") != "" {
		t.Fatalf("TUFT_REQUIRE_GPU is set and no GPU opened: %v", err)
	}
	t.Skipf("no GPU: %v", err)
	return nil
}

// Without a driver (CI), Open says so; with one, a GPU that does not exist is named.
func TestOpenErrors(t *testing.T) {
	_, err := Open(Options{LibDirs: []string{t.TempDir()}})
	if err != nil {
		t.Logf("Open: %v", err)
		if !strings.Contains(err.Error(), "libcuda.so.1") && !strings.Contains(err.Error(), "cu") {
			t.Fatalf("Open's error does not name the driver: %v", err)
		}
		return
	}
	if _, err := Open(Options{Ordinal: 4096, LibDirs: testLibDirs()}); err == nil || !strings.Contains(err.Error(), "cuda:4096") {
		t.Fatalf("opening GPU 4096: %v", err)
	}
}

func TestConformance(t *testing.T) {
	t.Run("fp32-weights", func(t *testing.T) {
		devicetest.Run(t, openOrSkip(t, Options{FP32Weights: true}), devicetest.Float32)
	})
	t.Run("bf16-weights", func(t *testing.T) {
		d := openOrSkip(t, Options{})
		tol := devicetest.BF16Weights
		if !d.bf16 {
			tol = devicetest.Float32
		}
		devicetest.Run(t, d, tol)
	})
}

// testLibDirs are the directories in TUFT_CUDA_LIB_DIRS (for example the CPU emulation
// that emu/build.sh makes).
func testLibDirs() []string { return filepath.SplitList(os.Getenv("TUFT_CUDA_LIB_DIRS")) }

// The tiled attention's gradients are the same bits on every run: each element is
// written by one thread from sums in a fixed order (no atomics across blocks). On the
// emulation this holds by construction; on a GPU it checks the kernels.
func TestFlashAttentionIsDeterministic(t *testing.T) {
	d := openOrSkip(t, Options{})
	if !d.KeepsAttnStats() {
		t.Skip("the device keeps probabilities (no bfloat16): the tiled kernels do not run")
	}
	heads, kvh, hd := 4, 2, 64
	qd, kvd := heads*hd, kvh*hd
	l := &device.Layout{Seqs: []device.AttnSeq{{Row: 0, N: 70, KRow: 0}, {Row: 70, N: 40, KRow: 70}}}
	rows := 110
	l.Desc = d.Ints(l.Pack())
	rng := rand.New(rand.NewPCG(3, 4))
	up := func(n int) device.Tensor[float32] {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		x := d.Alloc(n)
		d.Upload(x, v)
		return x
	}
	q, k, v, dout := up(rows*qd), up(rows*kvd), up(rows*kvd), up(rows*qd)
	down := func(x device.Tensor[float32]) []float32 {
		out := make([]float32, x.Len())
		d.Download(out, x)
		return out
	}
	run := func() [][]float32 {
		a := &device.Attn[float32]{Q: q, Out: d.Alloc(rows * qd), K: k, V: v, Heads: heads, KVHeads: kvh, HeadDim: hd,
			Scale: 0.125, Layout: l, P: d.Alloc(l.StatsLen(heads)), Stats: true}
		d.Attention(a)
		dq, dk, dv := d.Alloc(rows*qd), d.Alloc(rows*kvd), d.Alloc(rows*kvd)
		d.AttentionBack(a, dq, dk, dv, dout)
		return [][]float32{down(a.Out), down(a.P), down(dq), down(dk), down(dv)}
	}
	first, second := run(), run()
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"output", "log-sum-exps", "dq", "dk", "dv"} {
		for j := range first[i] {
			if math.Float32bits(first[i][j]) != math.Float32bits(second[i][j]) {
				t.Fatalf("%s element %d: %v, then %v", name, j, first[i][j], second[i][j])
			}
		}
	}
}

// One row of activations by a bfloat16 weight runs gemv_bf16 (unless Options.NoGEMV):
// the products agree with cuBLAS's within float32 rounding of the sums, accumulating or
// not, for output counts that do not fill a block and depths with a tail after the
// unrolled loads; a depth that is not a multiple of 8 stays on cuBLAS.
func TestGEMVMatchesCuBLAS(t *testing.T) {
	gv, cb := openOrSkip(t, Options{}), openOrSkip(t, Options{NoGEMV: true})
	if !gv.bf16 {
		t.Skip("no bfloat16 weights on this device")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	for _, c := range []struct{ n, k int }{{37, 64}, {8, 1032}, {3, 1824}, {300, 4096}, {5, 4104}, {9, 100}} {
		w, x, c0 := vals(c.n*c.k), vals(c.k), vals(c.n)
		for _, acc := range []bool{false, true} {
			var got [2][]float32
			for i, d := range []*Device{gv, cb} {
				dw, dx, dc := d.Weight(w), d.Alloc(c.k), d.Alloc(c.n)
				d.Upload(dx, x)
				d.Upload(dc, c0)
				d.MatMulNT(dc, dx, dw, 1, c.n, c.k, acc)
				got[i] = make([]float32, c.n)
				d.Download(got[i], dc)
				if err := d.Err(); err != nil {
					t.Fatal(err)
				}
			}
			var diff, norm float64
			for j := range got[0] {
				e := float64(got[0][j]) - float64(got[1][j])
				diff, norm = diff+e*e, norm+float64(got[1][j])*float64(got[1][j])
			}
			if r := math.Sqrt(diff / norm); !(r <= 1e-5) {
				t.Errorf("n %d, k %d, acc %v: gemv_bf16 against cuBLAS: relative error %.3g", c.n, c.k, acc, r)
			}
		}
	}
}
