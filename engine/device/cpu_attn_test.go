package device

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestPagedAttention checks the blocked attention over gathered paged keys (a prompt in
// the KV cache's blocks, after a cached prefix, beside a second sequence whose blocks
// are interleaved with the first's) against the per-row path keeping the probabilities
// on the same cache, in float32 and float64, on one goroutine and on several, with
// grouped KV heads; that a layout with a decode row keeps the per-row path; and that
// path's decode step without probabilities against the one keeping them.
func TestPagedAttention(t *testing.T) {
	heads, kvh, hd, bl := 6, 2, 16, 16
	qd, kvd := heads*hd, kvh*hd
	// Sequence 0: 5 cached positions, 120 new rows (more than one block of query rows);
	// sequence 1: none cached, 9 new rows.
	seqs := []struct{ pos, n int }{{5, 120}, {0, 9}}
	var l Layout
	l.BlockLen = bl
	rng := rand.New(rand.NewPCG(5, 6))
	cacheBlocks := 0
	for _, s := range seqs {
		cacheBlocks += (s.pos + s.n + bl - 1) / bl
	}
	perm := rng.Perm(cacheBlocks + 3) // blocks scattered over a larger cache
	rows, next := 0, 0
	for _, s := range seqs {
		nb := (s.pos + s.n + bl - 1) / bl
		l.Seqs = append(l.Seqs, AttnSeq{Row: rows, N: s.n, Pos: s.pos, Table: len(l.Tables), Blocks: nb})
		for b := 0; b < nb; b++ {
			l.Tables = append(l.Tables, int32(perm[next]))
			next++
		}
		rows += s.n
	}
	cacheRows := (cacheBlocks + 3) * bl
	rnd := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(float32(rng.NormFloat64()))
		}
		return v
	}
	q, k, v := rnd(rows*qd), rnd(cacheRows*kvd), rnd(cacheRows*kvd)
	scale := 1 / math.Sqrt(float64(hd))
	if !pagedBlocked(&Attn[float64]{Layout: &l}) {
		t.Fatal("a prompt over paged keys does not take the blocked path")
	}
	// The reference: the per-row path keeping the probabilities (float64 exponentials).
	want := make([]float64, rows*qd)
	poff := 0
	for i, s := range l.Seqs {
		l.Seqs[i].POff = poff
		poff += heads * s.N * (s.Pos + s.N)
	}
	attnRows(&Attn[float64]{Q: Host(q), Out: Host(want), K: Host(k), V: Host(v), Heads: heads, KVHeads: kvh,
		HeadDim: hd, Scale: scale, Layout: &l, P: Host(make([]float64, l.ProbLen(heads)))})
	f32 := func(x []float64) []float32 {
		o := make([]float32, len(x))
		for i, v := range x {
			o[i] = float32(v)
		}
		return o
	}
	for _, procs := range []int{1, 2, 3} {
		old := runtime.GOMAXPROCS(procs)
		out := make([]float64, rows*qd)
		NewCPU[float64]().Attention(&Attn[float64]{Q: Host(q), Out: Host(out), K: Host(k), V: Host(v), Heads: heads, KVHeads: kvh,
			HeadDim: hd, Scale: scale, Layout: &l})
		out32 := make([]float32, rows*qd)
		NewCPU[float32]().Attention(&Attn[float32]{Q: Host(f32(q)), Out: Host(out32), K: Host(f32(k)), V: Host(f32(v)), Heads: heads,
			KVHeads: kvh, HeadDim: hd, Scale: float32(scale), Layout: &l})
		runtime.GOMAXPROCS(old)
		for i := range want {
			if d := math.Abs(out[i] - want[i]); d > 1e-12*(1+math.Abs(want[i])) {
				t.Fatalf("GOMAXPROCS %d float64: element %d = %v, want %v", procs, i, out[i], want[i])
			}
			if d := math.Abs(float64(out32[i]) - want[i]); d > 1e-5*(1+math.Abs(want[i])) {
				t.Fatalf("GOMAXPROCS %d float32: element %d = %v, want %v", procs, i, out32[i], want[i])
			}
		}
	}
	dec := l
	dec.Seqs = append([]AttnSeq(nil), l.Seqs...)
	dec.Seqs[1].N = 1
	if pagedBlocked(&Attn[float64]{Layout: &dec}) {
		t.Error(fmt.Sprint("a layout with a decode row takes the gathered path: ", dec.Seqs))
	}
	// A decode step (one row per sequence, the last positions of both sequences' blocks):
	// the per-row path without probabilities kept (float32 vectorised exponentials)
	// against the one keeping them.
	dec.Seqs = []AttnSeq{{Row: 0, N: 1, Pos: 124, Table: 0, Blocks: l.Seqs[0].Blocks},
		{Row: 1, N: 1, Pos: 8, Table: l.Seqs[1].Table, Blocks: l.Seqs[1].Blocks, POff: heads * 125}}
	wantDec := make([]float64, 2*qd)
	attnRows(&Attn[float64]{Q: Host(q[:2*qd]), Out: Host(wantDec), K: Host(k), V: Host(v), Heads: heads, KVHeads: kvh,
		HeadDim: hd, Scale: scale, Layout: &dec, P: Host(make([]float64, dec.ProbLen(heads)))})
	for _, procs := range []int{1, 2} {
		old := runtime.GOMAXPROCS(procs)
		out := make([]float64, 2*qd)
		NewCPU[float64]().Attention(&Attn[float64]{Q: Host(q[:2*qd]), Out: Host(out), K: Host(k), V: Host(v), Heads: heads,
			KVHeads: kvh, HeadDim: hd, Scale: scale, Layout: &dec})
		out32 := make([]float32, 2*qd)
		NewCPU[float32]().Attention(&Attn[float32]{Q: Host(f32(q[:2*qd])), Out: Host(out32), K: Host(f32(k)), V: Host(f32(v)),
			Heads: heads, KVHeads: kvh, HeadDim: hd, Scale: float32(scale), Layout: &dec})
		runtime.GOMAXPROCS(old)
		for i := range wantDec {
			if d := math.Abs(out[i] - wantDec[i]); d > 1e-12*(1+math.Abs(wantDec[i])) {
				t.Fatalf("decode GOMAXPROCS %d float64: element %d = %v, want %v", procs, i, out[i], wantDec[i])
			}
			if d := math.Abs(float64(out32[i]) - wantDec[i]); d > 1e-5*(1+math.Abs(wantDec[i])) {
				t.Fatalf("decode GOMAXPROCS %d float32: element %d = %v, want %v", procs, i, out32[i], wantDec[i])
			}
		}
	}
}
