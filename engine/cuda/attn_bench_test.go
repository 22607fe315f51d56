//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
)

// attnShapes are the attention layers BenchmarkAttention times, one sequence of T tokens
// each: SmolLM2-135M's (9 heads, 3 KV heads of 64) and Llama-2-7B's (32 heads of 128).
// tools/torchref/bench_attention.py times torch's scaled_dot_product_attention on the
// same shapes (scripts/gpu-check.sh runs both).
var attnShapes = []struct {
	name              string
	t, heads, kvh, hd int
}{
	{"smollm2-T2048", 2048, 9, 3, 64},
	{"llama7b-T2048", 2048, 32, 32, 128},
}

// BenchmarkAttention times one layer's attention forward (Stats kept, as in training) and
// forward + backward on the device, and reports TFLOP/s counting the causal half of
// 4·T²·heads·hd per forward and 2.5× that per backward (FlashAttention's convention).
// The figures mean something on a GPU only (on the CPU emulation one iteration of these
// shapes takes many minutes).
func BenchmarkAttention(b *testing.B) {
	d, err := Open(Options{LibDirs: testLibDirs()})
	if err != nil {
		b.Skipf("no GPU: %v", err)
	}
	defer d.Close()
	for _, s := range attnShapes {
		qd, kvd := s.heads*s.hd, s.kvh*s.hd
		rng := rand.New(rand.NewPCG(1, 2))
		up := func(n int) device.Tensor[float32] {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			t := d.Alloc(n)
			d.Upload(t, v)
			return t
		}
		l := &device.Layout{Seqs: []device.AttnSeq{{Row: 0, N: s.t, KRow: 0}}}
		l.Desc = d.Ints(l.Pack())
		stats := d.KeepsAttnStats()
		p := d.Alloc(l.StatsLen(s.heads))
		if !stats {
			p = d.Alloc(l.ProbLen(s.heads))
		}
		a := &device.Attn[float32]{Q: up(s.t * qd), Out: d.Alloc(s.t * qd), K: up(s.t * kvd), V: up(s.t * kvd), Heads: s.heads,
			KVHeads: s.kvh, HeadDim: s.hd, Scale: float32(1 / math.Sqrt(float64(s.hd))), Layout: l, P: p, Stats: stats}
		dout, dq, dk, dv := up(s.t*qd), d.Alloc(s.t*qd), d.Alloc(s.t*kvd), d.Alloc(s.t*kvd)
		flops := 2 * float64(s.t) * float64(s.t) * float64(s.heads*s.hd) // the causal half of 4·T²·heads·hd
		sync := make([]float32, 1)
		for _, bwd := range []bool{false, true} {
			name := s.name + "/fwd"
			f := flops
			if bwd {
				name, f = s.name+"/fwd+bwd", flops*3.5
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					d.Attention(a)
					if bwd {
						d.AttentionBack(a, dq, dk, dv, dout)
					}
					// Launches are queued: the copy back waits for them, inside the timed loop.
					d.Download(sync, a.Out.Slice(0, 1))
				}
				if err := d.Err(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(f*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
			})
		}
	}
}
