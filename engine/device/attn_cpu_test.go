package device

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestBlockedAttention checks the blocked attention (Stats kept, and nothing kept)
// against the per-pair path that keeps the probabilities, in float64 and float32, on
// sequences longer than a block, ragged, and packed side by side, with grouped KV heads,
// on one goroutine and on several.
func TestBlockedAttention(t *testing.T) {
	heads, kvh, hd := 4, 2, 16
	qd, kvd := heads*hd, kvh*hd
	lens := []int{attnBlock*2 + 7, 5, attnBlock}
	var l Layout
	rows, poff := 0, 0
	for _, n := range lens {
		l.Seqs = append(l.Seqs, AttnSeq{Row: rows, N: n, KRow: rows, POff: poff})
		rows += n
		poff += heads * n * n
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(float32(rng.NormFloat64()))
		}
		return v
	}
	q, k, v, dout := rnd(rows*qd), rnd(rows*kvd), rnd(rows*kvd), rnd(rows*qd)
	scale := 1 / math.Sqrt(float64(hd))
	// The reference: float64, probabilities kept.
	ref := &Attn[float64]{Q: Host(q), Out: Host(make([]float64, rows*qd)), K: Host(k), V: Host(v), Heads: heads, KVHeads: kvh,
		HeadDim: hd, Scale: scale, Layout: &l, P: Host(make([]float64, l.ProbLen(heads)))}
	cpu64 := NewCPU[float64]()
	cpu64.Attention(ref)
	wdq, wdk, wdv := make([]float64, rows*qd), make([]float64, rows*kvd), make([]float64, rows*kvd)
	cpu64.AttentionBack(ref, Host(wdq), Host(wdk), Host(wdv), Host(dout))
	near := func(what string, got []float64, want []float64, tol float64) {
		t.Helper()
		for i := range want {
			if d := math.Abs(got[i] - want[i]); d > tol*(1+math.Abs(want[i])) || math.IsNaN(got[i]) {
				t.Fatalf("%s: element %d = %v, want %v", what, i, got[i], want[i])
			}
		}
	}
	for _, procs := range []int{1, 2} {
		old := runtime.GOMAXPROCS(procs)
		name := fmt.Sprintf("GOMAXPROCS %d", procs)
		// float64, Stats.
		a := &Attn[float64]{Q: Host(q), Out: Host(make([]float64, rows*qd)), K: Host(k), V: Host(v), Heads: heads, KVHeads: kvh,
			HeadDim: hd, Scale: scale, Layout: &l, P: Host(make([]float64, l.StatsLen(heads))), Stats: true}
		cpu64.Attention(a)
		near(name+" float64 output", a.Out.h, ref.Out.h, 1e-12)
		dq, dk, dv := make([]float64, rows*qd), rnd(rows*kvd), rnd(rows*kvd) // dk, dv: overwritten
		cpu64.AttentionBack(a, Host(dq), Host(dk), Host(dv), Host(dout))
		near(name+" float64 dq", dq, wdq, 1e-12)
		near(name+" float64 dk", dk, wdk, 1e-12)
		near(name+" float64 dv", dv, wdv, 1e-12)
		// float32, Stats, then nothing kept.
		f := func(x []float64) Tensor[float32] {
			o := make([]float32, len(x))
			for i, v := range x {
				o[i] = float32(v)
			}
			return Host(o)
		}
		g := func(x Tensor[float32]) []float64 {
			o := make([]float64, x.n)
			for i, v := range x.h {
				o[i] = float64(v)
			}
			return o
		}
		cpu32 := NewCPU[float32]()
		a32 := &Attn[float32]{Q: f(q), Out: f(make([]float64, rows*qd)), K: f(k), V: f(v), Heads: heads, KVHeads: kvh,
			HeadDim: hd, Scale: float32(scale), Layout: &l, P: f(make([]float64, l.StatsLen(heads))), Stats: true}
		cpu32.Attention(a32)
		near(name+" float32 output", g(a32.Out), ref.Out.h, 1e-5)
		dq32, dk32, dv32 := f(dq), f(dk), f(dv)
		cpu32.AttentionBack(a32, dq32, dk32, dv32, f(dout))
		near(name+" float32 dq", g(dq32), wdq, 1e-4)
		near(name+" float32 dk", g(dk32), wdk, 1e-4)
		near(name+" float32 dv", g(dv32), wdv, 1e-4)
		a32.P, a32.Stats, a32.Out = Tensor[float32]{}, false, f(make([]float64, rows*qd))
		cpu32.Attention(a32)
		near(name+" float32 output, nothing kept", g(a32.Out), ref.Out.h, 1e-5)
		runtime.GOMAXPROCS(old)
	}
}
