package device

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tuft-go/tuft/engine/kern"
)

// This file is the CPU's blocked attention over contiguous keys (training passes and
// forward-only passes over packed sequences). Each job is one head of one block of
// query rows: its scores against every key it may see are one matrix product, then a
// row softmax, then one product with the values, so the work runs at GEMM speed rather
// than one dot product per (query, key) pair. With Attn.Stats the forward keeps one
// log-sum-exp per row and head instead of the probabilities, and the backward pass
// recomputes them block by block: nothing of size rows × keys outlives a job.

// attnMinUnits is the number of backward units (KV head × sequence) under which each is
// split further, by query head and by the parity of its query blocks, each part adding
// into a dK/dV buffer of its own (summed in a fixed order afterwards): one 512-token
// sequence of SmolLM2 has three KV heads, three units for two cores, so one core idled
// through a third of the attention backward. A constant, not the core count, so the
// gradients stay the same on every machine. (A variable so tests run the unsplit path.)
var attnMinUnits = 16

// attnParts pools the split units' dK/dV buffers (a few MB per layer) across layers and
// steps.
var attnParts sync.Pool

// attnKVT pools the backward's whole dKᵀ and dVᵀ (a pool of their own: one size).
var attnKVT sync.Pool

// attnPanels says whether the blocked attention packs each KV head's keys (and, going
// back, its values) once for every product that reads them (kern.PackNT: the products of
// each query head of the group and each block of rows), rather than once a product: 2 %
// of a 2048-token training step's CPU time was that packing. The same bits either way
// (TestBlockedAttentionMaskIsExact); a variable so that test can turn it off.
var attnPanels = true

// attnPanelBufs pools the packed keys and values (a few MB a layer).
var attnPanelBufs sync.Pool

// packHeads packs the rows of x (keys or values: KV head kh of row r at x[r·kvd+kh·hd:],
// a sequence's rows from its KRow) of every KV head of every sequence as panels,
// p[si·hkv+kh], in a pooled buffer; put returns the buffer. Without attnPanels the
// panels only name x, and each product packs its own.
func packHeads[T Float](l *Layout, x []T, hkv, hd int) (p []kern.Panels[T], put func()) {
	kvd := hkv * hd
	p = make([]kern.Panels[T], len(l.Seqs)*hkv)
	offs := make([]int, len(p)+1)
	for i := range p {
		s := l.Seqs[i/hkv]
		offs[i+1] = offs[i] + kern.PanelsLen(s.Pos+s.N, hd)
	}
	var buf []T
	put = func() {}
	if attnPanels {
		if b, ok := attnPanelBufs.Get().(*[]T); ok && cap(*b) >= offs[len(p)] {
			buf = (*b)[:offs[len(p)]]
		} else {
			buf = make([]T, offs[len(p)])
		}
		put = func() { attnPanelBufs.Put(&buf) }
	}
	workers(len(p), func(_, i int) {
		s, kh := l.Seqs[i/hkv], i%hkv
		if s.Pos+s.N == 0 {
			return // no keys: no job reads these panels
		}
		var b []T
		if buf != nil {
			b = buf[offs[i]:offs[i+1]]
		}
		p[i] = kern.PackNT(b, x[s.KRow*kvd+kh*hd:], s.Pos+s.N, hd, kvd)
	})
	return p, put
}

// attnBlock is the most query rows per job (see blockRows).
const attnBlock = 96

// blockRows is the query rows per job for a sequence of n rows: a multiple of the
// micro-kernel's six rows. Short sequences take 48 rows, long ones 96, whose products run
// faster (at 2048 tokens a layer's attention took a fifth less CPU time than with 48,
// when the masked half of each diagonal block was still computed: a fraction rows/n of
// the work, now skipped but for the 6×16 tiles the diagonal crosses, attnMasked). A
// block's scores (96 rows × 2048 keys, 0.8 MB) stay in the 1 MB L2 between the products
// that read them.
func blockRows(n int) int {
	if n > 1024 {
		return attnBlock
	}
	return 48
}

// blockIndex is the index among its sequence's jobs (attnJobs) of the block of a sequence
// of n rows that starts at row i0: the ragged block, when there is one, is block 0.
func blockIndex(i0, n int) int {
	bm := blockRows(n)
	return (i0 + (bm-n%bm)%bm) / bm
}

// KeepsAttnStats implements StatsKeeper.
func (*CPU[T]) KeepsAttnStats() bool { return true }

// attnJob is one head h of query rows [i0, i1) of sequence s.
type attnJob struct{ s, h, i0, i1 int }

// attnJobs lists a layout's jobs, the largest first so the last ones to start are short.
func attnJobs(l *Layout, heads int) []attnJob {
	n := 0
	for _, s := range l.Seqs {
		n += heads * (s.N/blockRows(s.N) + 1)
	}
	jobs := make([]attnJob, 0, n)
	for si, s := range l.Seqs {
		for h := 0; h < heads; h++ {
			// A ragged block comes first, where its rows see the fewest keys: last, its
			// 32 rows at 512 tokens took the longest products at their least efficient
			// (k = 32 in dVᵀ += dOᵀ·P), and a training step 3.5 % longer (2048 tokens:
			// 2.8 %).
			bm := blockRows(s.N)
			i1 := s.N % bm
			if i1 > 0 {
				jobs = append(jobs, attnJob{si, h, 0, i1})
			}
			for i0 := i1; i0 < s.N; i0 += bm {
				jobs = append(jobs, attnJob{si, h, i0, i0 + bm})
			}
		}
	}
	slices.SortStableFunc(jobs, func(a, b attnJob) int {
		return (l.Seqs[b.s].Pos + b.i1) - (l.Seqs[a.s].Pos + a.i1)
	})
	return jobs
}

// workers runs f(w, j) for every job j in [0, n), handed out in order to up to GOMAXPROCS
// workers numbered w; it returns how many ran.
func workers(n int, f func(w, j int)) int {
	nw := min(kern.Procs(), n)
	if nw <= 1 {
		return serial(n, f)
	}
	if kern.BurstShare(n, 1, func(w, j, _ int) { f(w, j) }) {
		return nw
	}
	var next atomic.Int64
	work := func(w int) {
		for {
			j := int(next.Add(1)) - 1
			if j >= n {
				return
			}
			f(w, j)
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < nw; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(w)
		}()
	}
	work(0) // the calling goroutine is worker 0 rather than only waiting
	wg.Wait()
	return nw
}

// blockedAttn reports whether Attention runs blocked: every sequence reads contiguous
// keys, and the probabilities are not asked for (nothing kept, or Stats).
func blockedAttn[T Float](a *Attn[T]) bool {
	if !a.P.Empty() && !a.Stats {
		return false
	}
	for _, s := range a.Layout.Seqs {
		if s.Blocks != 0 {
			return false
		}
	}
	return true
}

// attnForward is Attention, blocked (see blockedAttn).
func attnForward[T Float](a *Attn[T]) {
	l := a.Layout
	hq, hkv, hd := a.Heads, a.KVHeads, a.HeadDim
	qd, kvd := hq*hd, hkv*hd
	group := hq / hkv
	q, k, v, o := a.Q.h, a.K.h, a.V.h, a.Out.h
	var stats []T
	if a.Stats {
		stats = a.P.h
	}
	jobs := attnJobs(l, hq)
	kps, put := packHeads(l, k, hkv, hd)
	defer put()
	bufs := make([][]T, kern.Procs())
	workers(len(jobs), func(w, j int) {
		jb := jobs[j]
		s := l.Seqs[jb.s]
		rows, nk := jb.i1-jb.i0, s.Pos+jb.i1
		ld := attnLd(nk)
		if cap(bufs[w]) < rows*ld {
			bufs[w] = make([]T, attnBlock*attnLd(s.Pos+s.N))
		}
		S := bufs[w][:rows*ld]
		qoff := (s.Row+jb.i0)*qd + jb.h*hd
		koff := s.KRow*kvd + jb.h/group*hd
		f := s.Pos + jb.i0 // the keys every row of the job sees
		kern.GemmPanels(S, q[qoff:], &kps[jb.s*hkv+jb.h/group], rows, nk, ld, qd, false, causal(kern.MaskC, f))
		var inv [attnBlock]T
		for r := 0; r < rows; r++ {
			valid := f + r + 1
			row := S[r*ld : r*ld+nk]
			sum, lse := expRow(row[:valid], a.Scale)
			clear(row[valid:])
			inv[r] = T(1 / sum)
			if stats != nil {
				stats[(s.Row+jb.i0+r)*hq+jb.h] = T(lse)
			}
		}
		// The rows of P are left unnormalised: the output rows (HeadDim wide) are scaled
		// instead of the probability rows (up to all keys wide).
		kern.GemmMasked(o[qoff:], S, v[koff:], rows, hd, nk, qd, ld, kvd, false, false, false, causal(kern.MaskRowK, f))
		for r := 0; r < rows; r++ {
			or := o[qoff+r*qd : qoff+r*qd+hd]
			for x := range or {
				or[x] *= inv[r]
			}
		}
	})
}

// expRow replaces scores by exp(scale·score − m), m the largest scaled score, and
// returns their sum (in float64) and the log-sum-exp of the scaled scores.
func expRow[T Float](row []T, scale T) (sum, lse float64) {
	sum, m := expSum(row, scale)
	return sum, float64(m) + math.Log(sum)
}

// expSum is expRow without the log-sum-exp (inference keeps no statistics): it returns
// the sum and m. The logarithm was a tenth of a decode step's attention at short context.
func expSum[T Float](row []T, scale T) (sum float64, m T) {
	m = kern.Max(row) * scale // scale > 0
	kern.Exp(row, row, scale, -m)
	return sum64(row), m
}

// attnMasked makes the blocked attention's products skip the masked upper half of each
// diagonal block (kern.GemmMasked: a job's rows see the f keys before the block and the
// block's keys up to their own, so its diagonal block's upper half, rows²/2 of its
// rows·(f+rows) pairs, is masked: a tenth of the attention's products at 512 tokens with
// 48-row blocks, a twentieth at 2048 with 96). Every output is the same bits either way
// (TestBlockedAttentionMaskIsExact); a variable so that test can turn it off.
var attnMasked = true

// causal is the mask of a product of a job whose rows see f keys before its own.
func causal(kind kern.MaskKind, f int) kern.Mask {
	if !attnMasked {
		return kern.Mask{}
	}
	return kern.Mask{Kind: kind, Off: f}
}

// attnLd is the row stride of a buffer whose rows are n floats long (a job's scores over
// n keys, a KV head's dKᵀ and dVᵀ rows over n key rows): n rounded up to whole 64-byte
// lines, and to an odd number of them. The micro-kernel reads such a buffer in place,
// a few rows at a time (A) or one 16-float panel down many rows (B), and writes 6-row
// tiles of it (C); with a stride of a power-of-two multiple of lines those rows map to
// a few of L1's 64 sets and evict each other (one layer's attention at 2048 tokens has
// nk = 1024 and R = 2048: 8 KB strides, every row in the same set). An odd number of
// lines walks all the sets: the products with P (PV, dVᵀ += dOᵀ·P) ran 77–84 GFLOP/s at
// a stride of 1024 floats and 94–110 at 1040 on one core. The padding is never read.
func attnLd(n int) int {
	l := (n + 15) / 16
	if l%2 == 0 {
		l++
	}
	return l * 16
}

// attnBackward is AttentionBack for an Attention that kept Stats. Each job recomputes its
// probabilities from the kept log-sum-exps, then: dVᵀ += dOᵀ·P, dP = dO·Vᵀ,
// dS = P∘(dP − rowsum(P∘dP))·scale, dQ = dS·K, dKᵀ += Qᵀ·dS. dK and dV are accumulated
// transposed (HeadDim × keys per KV head), so the wide operand of those products is the
// row-major P or dS (packed fast) rather than its transpose. Jobs of one KV head and
// sequence add to the same keys, so they run as one unit, in a fixed order, on one
// goroutine: the sums are the same whichever worker runs a unit and however many there
// are, so a training step gives the same gradients on every run (a remote worker equals
// the local engine bit for bit).
func attnBackward[T Float](a *Attn[T], dq, dk, dv, dout Tensor[T]) {
	l := a.Layout
	hq, hkv, hd := a.Heads, a.KVHeads, a.HeadDim
	qd, kvd := hq*hd, hkv*hd
	group := hq / hkv
	q, k, v, stats := a.Q.h, a.K.h, a.V.h, a.P.h
	for _, s := range l.Seqs {
		if s.Blocks != 0 {
			panic("device: AttentionBack over paged keys")
		}
	}
	R := len(dk.h) / kvd // key rows
	ldR := attnLd(R)     // dKᵀ of KV head kh, dimension x, key row r is at (kh·hd+x)·ldR+r
	units := attnUnits(l, attnJobs(l, hq), group)
	// Split units write to buffers of their own: one KV head's dKᵀ and dVᵀ (hd × R each).
	var parts []T
	var partKH []int // the KV head of each split unit
	if len(units) < attnMinUnits {
		units = splitUnits(units, l)
		partKH = make([]int, len(units))
		for u, jobs := range units {
			partKH[u] = jobs[0].h / group
		}
		need := len(units) * 2 * hd * ldR
		if p, ok := attnParts.Get().(*[]T); ok && cap(*p) >= need {
			parts = (*p)[:need]
			clear(parts)
		} else {
			parts = make([]T, need)
		}
		defer attnParts.Put(&parts)
	}
	nw := min(kern.Procs(), len(units))
	type scratch struct{ s, dp []T }
	ws := make([]scratch, nw)
	// dKᵀ and dVᵀ from the pool too: fresh, their pages faulted in as the sums first
	// touched them (1.7 µs per 512-float Axpy against 0.08 warm).
	var kvt []T
	if p, ok := attnKVT.Get().(*[]T); ok && cap(*p) >= 2*kvd*ldR {
		kvt = (*p)[:2*kvd*ldR]
		clear(kvt)
	} else {
		kvt = make([]T, 2*kvd*ldR)
	}
	defer attnKVT.Put(&kvt)
	dkt, dvt := kvt[:kvd*ldR], kvt[kvd*ldR:]
	kps, putK := packHeads(l, k, hkv, hd)
	defer putK()
	vps, putV := packHeads(l, v, hkv, hd)
	defer putV()
	workers(len(units), func(w, u int) {
		sc := &ws[w]
		kdst, vdst, base := dkt, dvt, 0
		if parts != nil {
			kdst, vdst = parts[2*u*hd*ldR:][:hd*ldR], parts[(2*u+1)*hd*ldR:][:hd*ldR]
			base = partKH[u] * hd * ldR // this KV head's offset in dkt, absent from the part
		}
		for _, jb := range units[u] {
			s := l.Seqs[jb.s]
			rows, nk := jb.i1-jb.i0, s.Pos+jb.i1
			ld := attnLd(nk)
			if cap(sc.s) < rows*ld {
				n := attnBlock * attnLd(s.Pos+s.N)
				sc.s, sc.dp = make([]T, n), make([]T, n)
			}
			P, dP := sc.s[:rows*ld], sc.dp[:rows*ld]
			qoff := (s.Row+jb.i0)*qd + jb.h*hd
			kh := jb.h / group
			koff := s.KRow*kvd + kh*hd
			toff := kh*hd*ldR + s.KRow - base
			f := s.Pos + jb.i0 // the keys every row of the job sees
			kern.GemmPanels(P, q[qoff:], &kps[jb.s*hkv+kh], rows, nk, ld, qd, false, causal(kern.MaskC, f))
			for r := 0; r < rows; r++ {
				valid := f + r + 1
				row := P[r*ld : r*ld+nk]
				lse := float64(stats[(s.Row+jb.i0+r)*hq+jb.h])
				kern.Exp(row[:valid], row[:valid], a.Scale, T(-lse))
				clear(row[valid:])
			}
			kern.GemmMasked(vdst[toff:], dout.h[qoff:], P, hd, nk, rows, ldR, qd, ld, true, false, true, causal(kern.MaskColK, f))
			kern.GemmPanels(dP, dout.h[qoff:], &vps[jb.s*hkv+kh], rows, nk, ld, qd, false, causal(kern.MaskC, f))
			for r := 0; r < rows; r++ {
				valid := f + r + 1
				pr, dr := P[r*ld:r*ld+valid], dP[r*ld:r*ld+nk]
				d := kern.Dot(pr, dr[:valid])
				kern.SubMul(dr[:valid], pr, d, a.Scale)
				clear(dr[valid:])
			}
			kern.GemmMasked(dq.h[qoff:], dP, k[koff:], rows, hd, nk, qd, ld, kvd, false, false, false, causal(kern.MaskRowK, f))
			kern.GemmMasked(kdst[toff:], q[qoff:], dP, hd, nk, rows, ldR, qd, ld, true, false, true, causal(kern.MaskColK, f))
		}
	})
	if parts != nil {
		// Sum the parts of each KV head in unit order (fixed by the layout), one KV head's
		// dimension per job.
		workers(kvd, func(_, c int) { // c = kh·hd + x
			kh, x := c/hd, c%hd
			kt, vt := dkt[c*ldR:][:R], dvt[c*ldR:][:R]
			for u, pk := range partKH {
				if pk != kh {
					continue
				}
				// Axpy with α = 1 adds exactly (1·x rounds to x).
				kern.Axpy(1, parts[(2*u*hd+x)*ldR:][:R], kt)
				kern.Axpy(1, parts[((2*u+1)*hd+x)*ldR:][:R], vt)
			}
		})
	}
	// dKᵀ and dVᵀ back to rows, 16 key rows a job over the cores: their rows stay in L1
	// while the columns fill in (one element at a time down 768-byte strides on one core
	// was 7 % of a 512-token layer's backward).
	const tr = 16
	workers((R+tr-1)/tr, func(_, j int) {
		r0, r1 := j*tr, min(j*tr+tr, R)
		for c := 0; c < kvd; c++ { // c = kh·hd + x
			kt, vt := dkt[c*ldR:][r0:r1], dvt[c*ldR:][r0:r1]
			for i := range kt {
				dk.h[(r0+i)*kvd+c] = kt[i]
				dv.h[(r0+i)*kvd+c] = vt[i]
			}
		}
	})
}

// splitUnits splits every unit by query head and by the parity of the query block (the
// jobs of a head come in block order within a unit, so alternate blocks balance the causal
// triangle's growing rows), keeping the jobs' order within each part and the parts in
// unit order, then sorted largest first (a stable sort: the order, which the sums of
// the parts follow, depends on the layout alone).
func splitUnits(units [][]attnJob, l *Layout) [][]attnJob {
	var out [][]attnJob
	for _, jobs := range units {
		type key struct{ h, parity int }
		index := map[key]int{}
		for _, jb := range jobs {
			kk := key{jb.h, blockIndex(jb.i0, l.Seqs[jb.s].N) % 2}
			u, ok := index[kk]
			if !ok {
				u = len(out)
				index[kk] = u
				out = append(out, nil)
			}
			out[u] = append(out[u], jb)
		}
	}
	work := func(jobs []attnJob) int {
		w := 0
		for _, jb := range jobs {
			w += (jb.i1 - jb.i0) * (l.Seqs[jb.s].Pos + jb.i1)
		}
		return w
	}
	slices.SortStableFunc(out, func(a, b []attnJob) int { return work(b) - work(a) })
	return out
}

// attnUnits groups jobs (in their order) by the dK/dV rows they add to: one unit per KV
// head and sequence, or per KV head alone when sequences' key rows overlap. Units come
// largest first.
func attnUnits(l *Layout, jobs []attnJob, group int) [][]attnJob {
	perSeq := true
	type span struct{ lo, hi int }
	var spans []span
	for _, s := range l.Seqs {
		spans = append(spans, span{s.KRow, s.KRow + s.Pos + s.N})
	}
	slices.SortFunc(spans, func(a, b span) int { return a.lo - b.lo })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			perSeq = false
		}
	}
	type key struct{ s, kh int }
	index := map[key]int{}
	var units [][]attnJob
	var work []int
	for _, jb := range jobs {
		kk := key{jb.s, jb.h / group}
		if !perSeq {
			kk.s = 0
		}
		u, ok := index[kk]
		if !ok {
			u = len(units)
			index[kk] = u
			units = append(units, nil)
			work = append(work, 0)
		}
		units[u] = append(units[u], jb)
		work[u] += (jb.i1 - jb.i0) * (l.Seqs[jb.s].Pos + jb.i1)
	}
	order := make([]int, len(units))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return work[b] - work[a] })
	out := make([][]attnJob, len(units))
	for i, u := range order {
		out[i] = units[u]
	}
	return out
}
