package device

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"syscall"
	"testing"
)

// TestBlockedAttention checks the blocked attention (Stats kept, and nothing kept)
// against the per-pair path that keeps the probabilities, in float64 and float32, on
// sequences longer than a block, ragged, and packed side by side, one after keys of
// earlier positions (Pos: every block then sees keys off the diagonal sub-blocks'
// alignment), with grouped KV heads, on one goroutine and on several.
func TestBlockedAttention(t *testing.T) {
	heads, kvh, hd := 4, 2, 16
	qd, kvd := heads*hd, kvh*hd
	seqs := []struct{ pos, n int }{{0, 48*2 + 7}, {0, 5}, {0, 48}, {37, 150}, {0, 1031}} // 1031: blocks of 96
	var l Layout
	rows, krows, poff := 0, 0, 0
	for _, sq := range seqs {
		l.Seqs = append(l.Seqs, AttnSeq{Row: rows, N: sq.n, Pos: sq.pos, KRow: krows, POff: poff})
		rows += sq.n
		krows += sq.pos + sq.n
		poff += heads * sq.n * (sq.pos + sq.n)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(float32(rng.NormFloat64()))
		}
		return v
	}
	q, k, v, dout := rnd(rows*qd), rnd(krows*kvd), rnd(krows*kvd), rnd(rows*qd)
	scale := 1 / math.Sqrt(float64(hd))
	// The reference: float64, probabilities kept.
	ref := &Attn[float64]{Q: Host(q), Out: Host(make([]float64, rows*qd)), K: Host(k), V: Host(v), Heads: heads, KVHeads: kvh,
		HeadDim: hd, Scale: scale, Layout: &l, P: Host(make([]float64, l.ProbLen(heads)))}
	cpu64 := NewCPU[float64]()
	cpu64.Attention(ref)
	wdq, wdk, wdv := make([]float64, rows*qd), make([]float64, krows*kvd), make([]float64, krows*kvd)
	cpu64.AttentionBack(ref, Host(wdq), Host(wdk), Host(wdv), Host(dout))
	// The reference path overwrites its outputs too (training hands it uncleared buffers).
	nan := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = math.NaN()
		}
		return v
	}
	pdq, pdk, pdv := nan(rows*qd), nan(krows*kvd), nan(krows*kvd)
	cpu64.AttentionBack(ref, Host(pdq), Host(pdk), Host(pdv), Host(dout))
	if !slices.Equal(pdq, wdq) || !slices.Equal(pdk, wdk) || !slices.Equal(pdv, wdv) {
		t.Fatal("AttentionBack with the probabilities kept: outputs filled with NaN first give other values than zeroed ones")
	}
	near := func(what string, got []float64, want []float64, tol float64) {
		t.Helper()
		for i := range want {
			if d := math.Abs(got[i] - want[i]); d > tol*(1+math.Abs(want[i])) || math.IsNaN(got[i]) {
				t.Fatalf("%s: element %d = %v, want %v", what, i, got[i], want[i])
			}
		}
	}
	for _, run := range []struct{ procs, minUnits int }{{1, attnMinUnits}, {2, attnMinUnits}, {1, 0}, {2, 0}} {
		procs := run.procs
		old, oldMin := runtime.GOMAXPROCS(procs), attnMinUnits
		attnMinUnits = run.minUnits // 0: the backward's units are not split
		name := fmt.Sprintf("GOMAXPROCS %d, units split below %d", procs, run.minUnits)
		// float64, Stats.
		a := &Attn[float64]{Q: Host(q), Out: Host(make([]float64, rows*qd)), K: Host(k), V: Host(v), Heads: heads, KVHeads: kvh,
			HeadDim: hd, Scale: scale, Layout: &l, P: Host(make([]float64, l.StatsLen(heads))), Stats: true}
		cpu64.Attention(a)
		near(name+" float64 output", a.Out.h, ref.Out.h, 1e-12)
		dq, dk, dv := make([]float64, rows*qd), rnd(krows*kvd), rnd(krows*kvd) // dk, dv: overwritten
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
		attnMinUnits = oldMin
	}
}

// The blocked backward's float32 gradients are bit-identical whatever the number of
// workers, so a training step is reproducible and a remote worker equals the local
// engine: jobs that add to the same dK/dV rows run in a fixed order on one goroutine.
func TestBlockedAttentionBackIsDeterministic(t *testing.T) {
	heads, kvh, hd := 6, 2, 16
	qd, kvd := heads*hd, kvh*hd
	var l Layout
	rows := 0
	for _, n := range []int{300, 17} {
		l.Seqs = append(l.Seqs, AttnSeq{Row: rows, N: n, KRow: rows})
		rows += n
	}
	rng := rand.New(rand.NewPCG(3, 4))
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	q, k, v, dout := rnd(rows*qd), rnd(rows*kvd), rnd(rows*kvd), rnd(rows*qd)
	grads := func(procs int) []float32 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		cpu := NewCPU[float32]()
		a := &Attn[float32]{Q: Host(q), Out: Host(make([]float32, rows*qd)), K: Host(k), V: Host(v), Heads: heads, KVHeads: kvh,
			HeadDim: hd, Scale: 0.25, Layout: &l, P: Host(make([]float32, l.StatsLen(heads))), Stats: true}
		cpu.Attention(a)
		dq, dk, dv := make([]float32, rows*qd), make([]float32, rows*kvd), make([]float32, rows*kvd)
		cpu.AttentionBack(a, Host(dq), Host(dk), Host(dv), Host(dout))
		return append(append(dq, dk...), dv...)
	}
	for _, minUnits := range []int{attnMinUnits, 0} { // the units split into parts, and not
		old := attnMinUnits
		attnMinUnits = minUnits
		want := grads(1)
		for _, procs := range []int{2, 3, 5, 2, 3} {
			got := grads(procs)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("units split below %d, GOMAXPROCS %d: gradient element %d = %v, with one worker %v", minUnits, procs, i, got[i], want[i])
				}
			}
		}
		attnMinUnits = old
	}
}

// BenchmarkAttention is one layer of SmolLM2's attention (9 heads, 3 KV heads of 64) over
// one sequence, forward with statistics kept and backward.
func BenchmarkAttention(b *testing.B) {
	for _, n := range []int{512, 2048} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			heads, kvh, hd := 9, 3, 64
			qd, kvd := heads*hd, kvh*hd
			l := &Layout{Seqs: []AttnSeq{{N: n}}}
			rng := rand.New(rand.NewPCG(1, 2))
			rnd := func(m int) Tensor[float32] { return Host(randNorm(rng, m)) }
			a := &Attn[float32]{Q: rnd(n * qd), Out: rnd(n * qd), K: rnd(n * kvd), V: rnd(n * kvd), Heads: heads, KVHeads: kvh,
				HeadDim: hd, Scale: 0.125, Layout: l, P: rnd(l.StatsLen(heads)), Stats: true}
			dq, dk, dv, dout := rnd(n*qd), rnd(n*kvd), rnd(n*kvd), rnd(n*qd)
			cpu := NewCPU[float32]()
			b.ResetTimer()
			c0 := cpuTime()
			for i := 0; i < b.N; i++ {
				cpu.Attention(a)
				cpu.AttentionBack(a, dq, dk, dv, dout)
			}
			// CPU seconds too: on a shared machine they move less than wall time.
			b.ReportMetric((cpuTime()-c0)/float64(b.N), "cpu-s/op")
			// Causal: QKᵀ and PV forward, five products backward, each over n²/2 pairs.
			b.ReportMetric(7*float64(n)*float64(n)*float64(hd*heads)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// cpuTime is this process's user and system CPU time in seconds.
func cpuTime() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// TestBlockedAttentionMaskIsExact checks that skipping the masked half of the diagonal
// blocks (attnMasked) and packing each KV head's keys and values once (attnPanels)
// change no bit of the outputs, the kept statistics or the gradients, on sequences with
// and without earlier positions, in blocks of 48 and 96 rows, ragged, on one worker and
// two.
func TestBlockedAttentionMaskIsExact(t *testing.T) {
	heads, kvh, hd := 6, 2, 64
	qd, kvd := heads*hd, kvh*hd
	var l Layout
	rows, krows := 0, 0
	for _, sq := range []struct{ pos, n int }{{0, 300}, {23, 17}, {0, 1100}, {201, 96}} {
		l.Seqs = append(l.Seqs, AttnSeq{Row: rows, N: sq.n, Pos: sq.pos, KRow: krows})
		rows += sq.n
		krows += sq.pos + sq.n
	}
	rng := rand.New(rand.NewPCG(5, 6))
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	q, k, v, dout := rnd(rows*qd), rnd(krows*kvd), rnd(krows*kvd), rnd(rows*qd)
	run := func(masked bool, procs int) []float32 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		old, oldPanels := attnMasked, attnPanels
		// The reference packs nothing ahead and computes every masked term.
		attnMasked, attnPanels = masked, masked
		defer func() { attnMasked, attnPanels = old, oldPanels }()
		cpu := NewCPU[float32]()
		a := &Attn[float32]{Q: Host(q), Out: Host(make([]float32, rows*qd)), K: Host(k), V: Host(v), Heads: heads, KVHeads: kvh,
			HeadDim: hd, Scale: 0.125, Layout: &l, P: Host(make([]float32, l.StatsLen(heads))), Stats: true}
		cpu.Attention(a)
		dq, dk, dv := make([]float32, rows*qd), make([]float32, krows*kvd), make([]float32, krows*kvd)
		cpu.AttentionBack(a, Host(dq), Host(dk), Host(dv), Host(dout))
		return slices.Concat(a.Out.h, a.P.h, dq, dk, dv)
	}
	for _, procs := range []int{1, 2} {
		want, got := run(false, procs), run(true, procs)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("GOMAXPROCS %d: element %d = %v masked, %v unmasked", procs, i, got[i], want[i])
			}
		}
	}
}

// Jobs cover every row of every head once, in blocks of blockRows with the ragged one
// first (where its rows see the fewest keys), and blockIndex numbers them in row order.
func TestAttnJobsRaggedFirst(t *testing.T) {
	for _, n := range []int{1, 31, 48, 49, 512, 1025, 2048} {
		l := &Layout{Seqs: []AttnSeq{{N: n}}}
		jobs := attnJobs(l, 2)
		bm := blockRows(n)
		for h := 0; h < 2; h++ {
			var mine []attnJob
			for _, jb := range jobs {
				if jb.h == h {
					mine = append(mine, jb)
				}
			}
			slices.SortFunc(mine, func(a, b attnJob) int { return a.i0 - b.i0 })
			next := 0
			for b, jb := range mine {
				if jb.i0 != next || jb.i1 <= jb.i0 || jb.i1-jb.i0 > bm {
					t.Fatalf("n=%d head %d: job %d covers [%d, %d) after row %d", n, h, b, jb.i0, jb.i1, next)
				}
				if b > 0 && jb.i1-jb.i0 != bm {
					t.Fatalf("n=%d: block %d has %d rows, want %d (only the first may be ragged)", n, b, jb.i1-jb.i0, bm)
				}
				if got := blockIndex(jb.i0, n); got != b {
					t.Fatalf("n=%d: blockIndex(%d) = %d, want %d", n, jb.i0, got, b)
				}
				next = jb.i1
			}
			if next != n {
				t.Fatalf("n=%d head %d: jobs end at row %d", n, h, next)
			}
		}
	}
}
