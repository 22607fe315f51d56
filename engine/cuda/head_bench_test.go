//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"math/rand/v2"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
)

// BenchmarkLossHead times a training loss head at Llama-2-7B's width and vocabulary (T =
// 2048 rows, D = 4096, V = 32,000, the unembedding a frozen weight; tiny-T300 is for the
// CPU emulation): the fused head (LossHead + LossHeadBack) and the full logits it
// replaced (the product into T×V logits, LogSoftmax, the targets' gather, XentBack into a
// second T×V buffer, the input gradient's product). Each runs on a device of its own and
// reports the device memory it took above its inputs (peak-MiB). The 7B figures mean
// something on a GPU only; scripts/gpu-check.sh runs them.
func BenchmarkLossHead(b *testing.B) {
	for _, s := range []struct {
		name    string
		T, D, V int
	}{{"tiny-T300", 300, 64, 500}, {"llama7b-T2048", 2048, 4096, 32000}} {
		for _, fused := range []bool{true, false} {
			name := s.name + "/full-logits"
			if fused {
				name = s.name + "/fused"
			}
			b.Run(name, func(b *testing.B) { benchHead(b, s.T, s.D, s.V, fused) })
		}
	}
}

// benchHead is one of BenchmarkLossHead's runs.
func benchHead(b *testing.B, T, D, V int, fused bool) {
	d, err := Open(Options{LibDirs: testLibDirs()})
	if err != nil {
		b.Skipf("no GPU: %v", err)
	}
	defer d.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	vals := func(n int, s float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * s)
		}
		return v
	}
	up := func(v []float32) device.Tensor[float32] {
		t := d.Alloc(len(v))
		d.Upload(t, v)
		return t
	}
	h, w, g := up(vals(T*D, 1)), d.Weight(vals(V*D, 0.02)), up(vals(T, 1))
	off, tok := make([]int32, T+1), make([]int32, T)
	for r := range tok {
		tok[r], off[r+1] = int32(rng.IntN(V)), int32(r+1)
	}
	hd := &device.Head[float32]{H: h, W: w, Rows: T, D: D, V: V, Off: d.Ints(off), Tok: d.Ints(tok), LogP: d.Alloc(T)}
	dh := d.Alloc(T * D)
	idx := make([]int64, T)
	xg := &device.XentGrad{Idx: idx, Vals: make([]float64, T)}
	for r := range idx {
		idx[r] = int64(r*V) + int64(tok[r])
		xg.Rows, xg.Sums = append(xg.Rows, int32(r)), append(xg.Sums, 1)
	}
	lp := make([]float32, T)
	base := d.Stats().Peak
	if fused {
		hd.E = d.Alloc(T * D)
	}
	for b.Loop() {
		if fused {
			d.LossHead(hd)
			d.LossHeadBack(hd, dh, g)
			d.Download(lp[:1], dh.Slice(0, 1)) // launches are queued: wait for them
			continue
		}
		lg, dl := d.Alloc(T*V), d.Alloc(T*V)
		d.MatMulNT(lg, h, w, T, V, D, false)
		d.LogSoftmax(lg, T, V)
		d.Gather(lp, lg, idx)
		d.XentBack(dl, lg, V, xg)
		d.MatMulNN(dh, dl, w, T, D, V, false)
		d.Download(lp[:1], dh.Slice(0, 1))
		d.Free(lg)
		d.Free(dl)
	}
	if err := d.Err(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(d.Stats().Peak-base)/(1<<20), "peak-MiB")
}
