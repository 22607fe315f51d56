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
// are interleaved with the first's) against the per-row path on the same cache, in
// float32 and float64, on one goroutine and on several, with grouped KV heads; and that
// a layout with a decode row keeps the per-row path.
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
	want := make([]float64, rows*qd)
	attnRows(&Attn[float64]{Q: Host(q), Out: Host(want), K: Host(k), V: Host(v), Heads: heads, KVHeads: kvh,
		HeadDim: hd, Scale: scale, Layout: &l})
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
}
