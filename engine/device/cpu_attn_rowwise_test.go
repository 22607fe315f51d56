package device

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tuft-go/tuft/engine/kern"
)

// TestPagedAttentionRowAlone checks that a row's attention over the paged cache is the
// same bit for bit whether it is computed within a chunk of N rows (a prompt) or alone
// (a decode step after a cached prefix, as on a prefix cache hit): several N, head
// dimensions, GQA groups, and key counts crossing the cache's blocks and the GEMM's
// 256-deep k blocks. Before pagedBlocked took decode rows, a single row ran one dot
// product and one axpy per key while a prompt's ran blocked GEMMs, and the two differed
// in the last bits (a seeded sample differed with and without the prefix cache).
func TestPagedAttentionRowAlone(t *testing.T) {
	cases := []struct{ heads, kvh, hd, pos, n int }{
		{3, 1, 64, 0, 9},
		{6, 2, 16, 5, 48},
		{9, 3, 64, 250, 20},
		{4, 4, 32, 300, 100},
		{6, 3, 80, 530, 7},
		{2, 1, 64, 17, 1},
	}
	for _, c := range cases {
		bl := 16
		qd, kvd := c.heads*c.hd, c.kvh*c.hd
		span := c.pos + c.n
		nb := (span + bl - 1) / bl
		rng := rand.New(rand.NewPCG(uint64(c.hd), uint64(c.pos)))
		perm := rng.Perm(nb + 2) // the blocks scattered over a larger cache
		tab := make([]int32, nb)
		for i := range tab {
			tab[i] = int32(perm[i])
		}
		cacheRows := (nb + 2) * bl
		rnd := func(n int) []float32 {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			return v
		}
		q, k, v := rnd(c.n*qd), rnd(cacheRows*kvd), rnd(cacheRows*kvd)
		scale := float32(1 / math.Sqrt(float64(c.hd)))
		chunk := Layout{BlockLen: bl, Tables: tab, Seqs: []AttnSeq{{N: c.n, Pos: c.pos, Blocks: nb}}}
		out := make([]float32, c.n*qd)
		NewCPU[float32]().Attention(&Attn[float32]{Q: Host(q), Out: Host(out), K: Host(k), V: Host(v), Heads: c.heads,
			KVHeads: c.kvh, HeadDim: c.hd, Scale: scale, Layout: &chunk})
		for i := 0; i < c.n; i++ {
			alone := Layout{BlockLen: bl, Tables: tab, Seqs: []AttnSeq{{N: 1, Pos: c.pos + i, Blocks: nb}}}
			one := make([]float32, qd)
			NewCPU[float32]().Attention(&Attn[float32]{Q: Host(q[i*qd : i*qd+qd]), Out: Host(one), K: Host(k), V: Host(v),
				Heads: c.heads, KVHeads: c.kvh, HeadDim: c.hd, Scale: scale, Layout: &alone})
			for x, w := range out[i*qd : i*qd+qd] {
				if math.Float32bits(one[x]) != math.Float32bits(w) {
					t.Fatalf("heads %d/%d, dim %d, %d cached, %d rows: row %d element %d alone = %v, in the chunk %v",
						c.heads, c.kvh, c.hd, c.pos, c.n, i, x, one[x], w)
				}
			}
		}
	}
}

// TestPagedAttentionDecodeBatchRowAlone: a decode step of many sequences (one row each,
// each with its own scattered blocks of one cache; a batch runs stacked jobs, a row alone
// one job per query head, spread over the cores for the longest, or below attnSerialWork
// stacked on the calling core, all over the gathered keys) gives every row bit for bit
// what the row gives alone, on either path, and what it gives over blocks in order, read
// in place, with or without a burst's partners.
func TestPagedAttentionDecodeBatchRowAlone(t *testing.T) {
	const heads, kvh, hd, bl, seqs = 9, 3, 64, 16, 20
	qd, kvd := heads*hd, kvh*hd
	rng := rand.New(rand.NewPCG(9, 10))
	var tables []int32
	var ss []AttnSeq
	next := 0
	for i := 0; i < seqs; i++ {
		pos := 290 + 7*i
		if i == seqs-1 {
			pos = 900 // alone, its gather is spread over the cores
		}
		nb := (pos + 1 + bl - 1) / bl
		ss = append(ss, AttnSeq{Row: i, N: 1, Pos: pos, Table: len(tables), Blocks: nb})
		for b := 0; b < nb; b++ {
			tables = append(tables, int32(next))
			next++
		}
	}
	perm := rng.Perm(next) // scatter every sequence's blocks over the cache
	for i := range tables {
		tables[i] = int32(perm[tables[i]])
	}
	if last := ss[seqs-1].Pos + 1; last*kvd*2 < gatherParallel {
		t.Fatalf("%d keys do not reach the parallel gather", last)
	}
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	q, k, v := rnd(seqs*qd), rnd(next*bl*kvd), rnd(next*bl*kvd)
	out := make([]float32, seqs*qd)
	l := Layout{BlockLen: bl, Tables: tables, Seqs: ss}
	NewCPU[float32]().Attention(&Attn[float32]{Q: Host(q), Out: Host(out), K: Host(k), V: Host(v), Heads: heads,
		KVHeads: kvh, HeadDim: hd, Scale: 0.125, Layout: &l})
	// The batch over the same keys with every sequence's blocks in order: its stacked
	// jobs read them in place instead of copying, with the same bits.
	{
		kc, vc := make([]float32, len(k)), make([]float32, len(v))
		var inOrder []int32
		var cs []AttnSeq
		for i, s := range ss {
			kr := seqKeys(&l, s)
			base := len(inOrder) * bl
			for p := 0; p <= s.Pos; p++ {
				r := kr.row(p)
				copy(kc[(base+p)*kvd:(base+p+1)*kvd], k[r*kvd:(r+1)*kvd])
				copy(vc[(base+p)*kvd:(base+p+1)*kvd], v[r*kvd:(r+1)*kvd])
			}
			cs = append(cs, AttnSeq{Row: i, N: 1, Pos: s.Pos, Table: len(inOrder), Blocks: s.Blocks})
			for b := 0; b < s.Blocks; b++ {
				inOrder = append(inOrder, int32(len(inOrder)))
			}
		}
		cl := Layout{BlockLen: bl, Tables: inOrder, Seqs: cs}
		in := make([]float32, seqs*qd)
		NewCPU[float32]().Attention(&Attn[float32]{Q: Host(q), Out: Host(in), K: Host(kc), V: Host(vc), Heads: heads,
			KVHeads: kvh, HeadDim: hd, Scale: 0.125, Layout: &cl})
		for x := range out {
			if math.Float32bits(in[x]) != math.Float32bits(out[x]) {
				t.Fatalf("the batch over blocks in order: element %d = %v, scattered %v", x, in[x], out[x])
			}
		}
	}
	serialWork := attnSerialWork
	defer func() { attnSerialWork = serialWork }()
	if small := 2 * (ss[0].Pos + 1) * heads * hd; small >= serialWork {
		t.Fatalf("the shortest sequence (%d multiply-adds) does not take the serial path", small)
	}
	for _, sw := range []int{serialWork, 0} {
		attnSerialWork = sw
		for i, s := range ss {
			alone := Layout{BlockLen: bl, Tables: tables[s.Table : s.Table+s.Blocks], Seqs: []AttnSeq{{N: 1, Pos: s.Pos, Blocks: s.Blocks}}}
			one := make([]float32, qd)
			NewCPU[float32]().Attention(&Attn[float32]{Q: Host(q[i*qd : i*qd+qd]), Out: Host(one), K: Host(k), V: Host(v),
				Heads: heads, KVHeads: kvh, HeadDim: hd, Scale: 0.125, Layout: &alone})
			for x, w := range out[i*qd : i*qd+qd] {
				if math.Float32bits(one[x]) != math.Float32bits(w) {
					t.Fatalf("serial below %d: sequence %d (%d cached): element %d alone = %v, in the batch %v", sw, i, s.Pos, x, one[x], w)
				}
			}
			// The same keys in consecutive blocks are read in place (contiguous), not
			// gathered, and in a burst the jobs go to its partners: the same bits.
			nk := s.Pos + 1
			kc, vc := make([]float32, s.Blocks*bl*kvd), make([]float32, s.Blocks*bl*kvd)
			kr := seqKeys(&alone, alone.Seqs[0])
			for p := 0; p < nk; p++ {
				r := kr.row(p)
				copy(kc[p*kvd:p*kvd+kvd], k[r*kvd:r*kvd+kvd])
				copy(vc[p*kvd:p*kvd+kvd], v[r*kvd:r*kvd+kvd])
			}
			inOrder := make([]int32, s.Blocks)
			for b := range inOrder {
				inOrder[b] = int32(b)
			}
			cl := Layout{BlockLen: bl, Tables: inOrder, Seqs: []AttnSeq{{N: 1, Pos: s.Pos, Blocks: s.Blocks}}}
			if _, ok := contiguous(&cl, cl.Seqs[0], nk); !ok {
				t.Fatal("blocks in order are not read in place")
			}
			for _, burst := range []bool{false, true} {
				in := make([]float32, qd)
				run := func() {
					NewCPU[float32]().Attention(&Attn[float32]{Q: Host(q[i*qd : i*qd+qd]), Out: Host(in), K: Host(kc), V: Host(vc),
						Heads: heads, KVHeads: kvh, HeadDim: hd, Scale: 0.125, Layout: &cl})
				}
				if burst {
					kern.Burst(run)
				} else {
					run()
				}
				for x, w := range out[i*qd : i*qd+qd] {
					if math.Float32bits(in[x]) != math.Float32bits(w) {
						t.Fatalf("serial below %d: sequence %d (%d cached) in place (burst %v): element %d = %v, in the batch %v", sw, i, s.Pos, burst, x, in[x], w)
					}
				}
			}
		}
	}
}

// TestPagedAttentionDecodePhased: attnDecodePhased (every sequence's keys read first,
// the scores a block of keys a job, the weighted sums a block of columns a job) gives
// every output bit for bit what the stacked jobs give, for one sequence or several, keys
// in order (read in place) or scattered (gathered), short and past the kernel's k block
// of 256 positions (the weighted sums then a block of keys a job, added in order), with
// groups of 3 and 4 query heads a KV head.
func TestPagedAttentionDecodePhased(t *testing.T) {
	const hd, bl = 64, 16
	for _, c := range []struct {
		heads, kvh int
		pos        []int
		scatter    bool
	}{
		{9, 3, []int{0}, false},
		{9, 3, []int{40}, true},
		{9, 3, []int{255}, false},
		{9, 3, []int{300}, true},
		{9, 3, []int{1100}, false},
		{4, 1, []int{17, 256, 700}, true},
		{4, 1, []int{63, 64, 65}, false},
		{9, 3, []int{6000}, false},              // many blocks of keys, more than one job's bytes
		{9, 3, []int{3, 200, 90}, true},         // a batch of short sequences
		{9, 3, []int{300, 17, 1030, 256}, true}, // of short and long ones
	} {
		name := fmt.Sprintf("%dx%d/%v/scatter=%v", c.heads, c.kvh, c.pos, c.scatter)
		qd, kvd := c.heads*hd, c.kvh*hd
		rng := rand.New(rand.NewPCG(uint64(len(name)), 3))
		var tables []int32
		var ss []AttnSeq
		for i, pos := range c.pos {
			nb := (pos + 1 + bl - 1) / bl
			ss = append(ss, AttnSeq{Row: i, N: 1, Pos: pos, Table: len(tables), Blocks: nb})
			for range nb {
				tables = append(tables, int32(len(tables)))
			}
		}
		if c.scatter {
			perm := rng.Perm(len(tables))
			for i := range tables {
				tables[i] = int32(perm[i])
			}
		}
		q, k, v := randNorm(rng, len(c.pos)*qd), randNorm(rng, len(tables)*bl*kvd), randNorm(rng, len(tables)*bl*kvd)
		l := Layout{BlockLen: bl, Tables: tables, Seqs: ss}
		attn := func(out []float32) *Attn[float32] {
			return &Attn[float32]{Q: Host(q), Out: Host(out), K: Host(k), V: Host(v), Heads: c.heads,
				KVHeads: c.kvh, HeadDim: hd, Scale: 0.125, Layout: &l}
		}
		want := make([]float32, len(q))
		attnPhased = false
		serialWork := attnSerialWork
		attnSerialWork = 1 << 40 // the stacked jobs, whatever the length
		kern.Burst(func() { NewCPU[float32]().Attention(attn(want)) })
		attnPhased, attnSerialWork = true, serialWork
		got := make([]float32, len(q))
		a := attn(got)
		dec := gatherDecode(a)
		attnDecodePhased(a, dec)
		dec.release()
		for x := range want {
			if math.Float32bits(got[x]) != math.Float32bits(want[x]) {
				t.Fatalf("%s: element %d (row %d) = %v, the stacked jobs %v", name, x, x/qd, got[x], want[x])
			}
		}
	}
}

// BenchmarkPagedAttention is one layer of SmolLM2's attention (9 heads, 3 KV heads of 64)
// over the paged cache: a 128-token prompt, and a decode row after 128 and 1024 cached
// positions.
func BenchmarkPagedAttention(b *testing.B) {
	for _, c := range []struct {
		name   string
		pos, n int
	}{{"prompt128", 0, 128}, {"decode128", 128, 1}, {"decode1024", 1024, 1}} {
		b.Run(c.name, func(b *testing.B) {
			heads, kvh, hd, bl := 9, 3, 64, 16
			qd, kvd := heads*hd, kvh*hd
			nb := (c.pos + c.n + bl - 1) / bl
			rng := rand.New(rand.NewPCG(1, 2))
			perm := rng.Perm(nb)
			tab := make([]int32, nb)
			for i := range tab {
				tab[i] = int32(perm[i])
			}
			rnd := func(m int) Tensor[float32] { return Host(randNorm(rng, m)) }
			l := &Layout{BlockLen: bl, Tables: tab, Seqs: []AttnSeq{{N: c.n, Pos: c.pos, Blocks: nb}}}
			a := &Attn[float32]{Q: rnd(c.n * qd), Out: rnd(c.n * qd), K: rnd(nb * bl * kvd), V: rnd(nb * bl * kvd),
				Heads: heads, KVHeads: kvh, HeadDim: hd, Scale: 0.125, Layout: l}
			cpu := NewCPU[float32]()
			b.ResetTimer()
			c0 := cpuTime()
			for i := 0; i < b.N; i++ {
				cpu.Attention(a)
			}
			b.ReportMetric((cpuTime()-c0)/float64(b.N)*1e6, "cpu-µs/op")
		})
	}
}

// BenchmarkPagedAttentionBurst is a decode step's attention over SmolLM2's 30 layers (9
// heads, 3 KV heads of 64; each sequence's blocks in order, read in place) in a burst, as
// Model.DecodeStep runs it: one sequence after 191 and 1023 cached positions, two after
// 1023, sixteen after 191 and 71; the caches evicted first (a step streams the weights through
// the cache between two visits of a layer). attnDecodePhased against the stacked jobs
// (attnPhased off).
func BenchmarkPagedAttentionBurst(b *testing.B) {
	for _, phased := range []bool{false, true} {
		for _, c := range []struct{ seqs, pos int }{{1, 15}, {1, 71}, {1, 191}, {1, 1023}, {2, 1023}, {16, 191}, {16, 71}, {16, 1023}, {8, 2047}} {
			name := fmt.Sprintf("stacked/%dx%d", c.seqs, c.pos+1)
			if phased {
				name = fmt.Sprintf("phased/%dx%d", c.seqs, c.pos+1)
			}
			b.Run(name, func(b *testing.B) {
				defer func(v bool) { attnPhased = v }(attnPhased)
				attnPhased = phased
				heads, kvh, hd, bl := 9, 3, 64, 16
				qd, kvd := heads*hd, kvh*hd
				nb := (c.pos + 1 + bl - 1) / bl
				tab := make([]int32, c.seqs*nb)
				for i := range tab {
					tab[i] = int32(i)
				}
				var ss []AttnSeq
				for i := 0; i < c.seqs; i++ {
					ss = append(ss, AttnSeq{Row: i, N: 1, Pos: c.pos, Table: i * nb, Blocks: nb})
				}
				rng := rand.New(rand.NewPCG(1, 2))
				rnd := func(m int) Tensor[float32] { return Host(randNorm(rng, m)) }
				l := &Layout{BlockLen: bl, Tables: tab, Seqs: ss}
				var layers []*Attn[float32]
				for range 30 {
					layers = append(layers, &Attn[float32]{Q: rnd(c.seqs * qd), Out: rnd(c.seqs * qd), K: rnd(len(tab) * bl * kvd),
						V: rnd(len(tab) * bl * kvd), Heads: heads, KVHeads: kvh, HeadDim: hd, Scale: 0.125, Layout: l})
				}
				// 64 MiB, twice the L3 of the Zen 4 of docs/performance.md, read as a step
				// reads its weights (clean lines: nothing to write back).
				evict := rnd(16 << 20).h
				cpu := NewCPU[float32]()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					touch(evict)
					b.StartTimer()
					kern.Burst(func() {
						for _, a := range layers {
							cpu.Attention(a)
						}
					})
				}
			})
		}
	}
}

// randNorm is n standard normal float32 values from rng.
func randNorm(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}
