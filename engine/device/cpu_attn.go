package device

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tuft-go/tuft/engine/kern"
)

// Attention over the paged KV cache (inference: prompt processing and decode).

// pagedBlocked reports whether Attention runs attnPaged: paged keys and no
// probabilities kept. A decode step's rows take it as a prompt's do, so that a row's
// output is the same bit for bit whether it is one of a prompt's rows or a decode step's
// single row after a cached prefix (what the prompt's last token becomes on a prefix
// cache hit): the two once ran different summation orders (one dot product and one axpy
// per key against blocked GEMMs), so a request's log-probabilities depended on whether
// its prompt was cached.
func pagedBlocked[T Float](a *Attn[T]) bool {
	if !a.P.Empty() {
		return false
	}
	for _, s := range a.Layout.Seqs {
		if s.Blocks != 0 {
			return true
		}
	}
	return false
}

// attnPaged is Attention for paged keys, blocked as attnForward: each job (a head of a
// block of query rows) first copies its keys and values, a block of the cache at a time,
// into contiguous per-worker buffers, then computes S = Q·Kᵀ, the exponentials and P·V
// with the GEMM kernels instead of one dot product and one axpy per key. The products are
// kern.GemmRowwise, whose rows do not depend on how many rows (or keys past a row's last
// one) share the product, and the exponentials, their sum and the scaling by its inverse
// are per row: a row's output is the same in a block of 96 rows as alone.
func attnPaged[T Float](a *Attn[T]) {
	l := a.Layout
	hq, hkv, hd := a.Heads, a.KVHeads, a.HeadDim
	qd, kvd := hq*hd, hkv*hd
	group := hq / hkv
	q, k, v, o := a.Q.h, a.K.h, a.V.h, a.Out.h
	// A decode row (a sequence of one row) reads keys and values gathered beforehand for
	// every KV head at once (gatherDecode: in place when the sequence's blocks are in
	// order, else copied in runs of whole rows) and runs as one job per query head,
	// reading its KV head's columns of them: the cores share a step's heads evenly (nine
	// jobs for SmolLM2's nine heads, not three per KV head). GemmRowwise makes each row
	// the same whichever rows share a product and whatever B's stride, so the row is the
	// one a prompt's block computes. With decode rows enough for every core (a batch), a
	// KV head's query heads stay one job instead, their rows stacked (HeadDim apart),
	// reading their keys in place when the blocks are in order, else copying their own as
	// a prompt's jobs do (nothing gathered for the whole batch at once): the keys are
	// packed once for the group and fill more of the kernel's six-row tile, and the jobs
	// already keep the cores busy. A step too small to share (attnSerialWork) runs
	// stacked too, over gathered keys, on the calling core or on a burst's partners
	// (kern.Burst), which take a job without a hand-off's wait (SmolLM2, bf16, 129–256
	// positions: 3.5 ms a token serial with each job copying its keys, 1.6 on the
	// partners reading them in place; nine unstacked jobs there took 2.5). In a burst, a
	// step of decode rows only, small, with too few KV heads for the cores or with keys
	// that fit attnTouchBytes, takes attnDecodePhased instead: the stacked products cut
	// finer, the keys and values read first.
	decodes := 0
	for _, s := range l.Seqs {
		if s.N == 1 {
			decodes++
		}
	}
	small := attnWork(l, hq, hd) < attnSerialWork
	few := decodes*hkv < 2*runtime.GOMAXPROCS(0) // too few KV heads to share the cores
	if attnPhased && decodes == len(l.Seqs) && group <= attnBlock && kern.Bursting() {
		if ahead := cached(a); small || few || ahead {
			dec := gatherDecode(a)
			defer dec.release()
			attnDecodePhased(a, dec, ahead)
			return
		}
	}
	stackable := group <= attnBlock && (small || !few)
	var dec *decodeKV[T]
	if decodes > 0 && (!stackable || small) { // a large batch's jobs copy their own keys
		dec = gatherDecode(a)
		defer dec.release()
	}
	var jobs []attnJob
	for _, jb := range attnJobs(l, hq) {
		if !stackable || l.Seqs[jb.s].N != 1 || jb.h%group == 0 {
			jobs = append(jobs, jb)
		}
	}
	type buf struct{ s, k, v []T }
	bufs := make([]buf, min(runtime.GOMAXPROCS(0), len(jobs)))
	run := workers
	if small && !kern.Bursting() { // a burst's partners take a job without a hand-off
		run = serial
	}
	run(len(jobs), func(w, j int) {
		jb := jobs[j]
		s := l.Seqs[jb.s]
		stack := stackable && s.N == 1
		rows, nk, ld := jb.i1-jb.i0, s.Pos+jb.i1, qd
		if stack {
			rows, ld = group, hd
		}
		b := &bufs[w]
		if cap(b.s) < rows*nk {
			recycle(b.s)
			b.s = scratch[T](max(rows, blockRows(s.N)) * (s.Pos + s.N))
		}
		ko := jb.h / group * hd
		var kb, vb []T
		ldb := hd
		r0, inPlace := 0, false
		if s.N == 1 && dec == nil {
			r0, inPlace = contiguous(l, s, nk)
		}
		switch {
		case s.N == 1 && dec != nil:
			g := dec.seq[jb.s]
			kb, vb, ldb = g.k[ko:], g.v[ko:], kvd
		case inPlace:
			kb, vb, ldb = k[r0*kvd+ko:], v[r0*kvd+ko:], kvd
		default:
			if cap(b.k) < nk*hd {
				recycle(b.k)
				recycle(b.v)
				b.k, b.v = scratch[T]((s.Pos+s.N)*hd), scratch[T]((s.Pos+s.N)*hd)
			}
			kb, vb = b.k[:nk*hd], b.v[:nk*hd]
			kr := seqKeys(l, s)
			for p := 0; p < nk; p++ {
				r := kr.row(p)*kvd + ko
				copy(kb[p*hd:p*hd+hd], k[r:r+hd])
				copy(vb[p*hd:p*hd+hd], v[r:r+hd])
			}
		}
		S := b.s[:rows*nk]
		qoff := (s.Row+jb.i0)*qd + jb.h*hd
		// A prompt's rows skip the masked half of their diagonal block (the wanted scores
		// and every output are the same bits: kern.GemmRowwiseMasked); stacked decode rows
		// all see every key.
		var sMask, pMask kern.Mask
		if !stack {
			sMask, pMask = causal(kern.MaskC, s.Pos+jb.i0), causal(kern.MaskRowK, s.Pos+jb.i0)
		}
		kern.GemmRowwiseMasked(S, q[qoff:], kb, rows, nk, hd, nk, ld, ldb, true, sMask)
		var inv [attnBlock]T
		for r := 0; r < rows; r++ {
			valid := s.Pos + jb.i0 + r + 1
			if stack {
				valid = nk
			}
			row := S[r*nk : r*nk+nk]
			sum, _ := expRow(row[:valid], a.Scale)
			clear(row[valid:])
			inv[r] = T(1 / sum)
		}
		kern.GemmRowwiseMasked(o[qoff:], S, vb, rows, hd, nk, ld, nk, ldb, false, pMask)
		for r := 0; r < rows; r++ {
			or := o[qoff+r*ld : qoff+r*ld+hd]
			for x := range or {
				or[x] *= inv[r]
			}
		}
	})
	for _, b := range bufs {
		recycle(b.s)
		recycle(b.k)
		recycle(b.v)
	}
}

// attnPhased lets a decode step in a burst take attnDecodePhased (a variable so tests
// can compare it with the stacked jobs).
var attnPhased = true

// attnDecodePhased is attnPaged for a step of decode rows in a burst whose KV heads are
// too few to share the cores as jobs (one sequence of SmolLM2: three KV heads on two
// cores left one core idle a third of the time), or whose keys and values fit
// attnTouchBytes. First the cores read those keys and values once (touch) when they fit
// (ahead): the products then find them in cache, where the transposing pack of the keys
// and the strided reads of a head's columns of the values otherwise waited on memory line
// by line. Then every KV head's stacked scores, a block of keys a job; each row's
// exponentials on the caller; and the weighted sums of values, a block of columns a job.
// GemmRowwise's elements do not depend on how many rows or columns share a product, so
// every output is the bits the stacked jobs and a prompt's blocks compute
// (TestPagedAttentionDecodePhased). BenchmarkPagedAttentionBurst (30 layers of SmolLM2,
// stacked → phased, ms): one sequence at 192 positions 1.24–1.26 → 0.89–0.90, at 1024
// 10.0–10.7 → 4.9–5.7; two at 1024 10.5 → 8.9–9.1; sixteen at 192 17.3–18.1 →
// 15.5–17.0, at 72 8.1 → 7.3–7.6.
func attnDecodePhased[T Float](a *Attn[T], dec *decodeKV[T], ahead bool) {
	l := a.Layout
	hq, hkv, hd := a.Heads, a.KVHeads, a.HeadDim
	qd, kvd := hq*hd, hkv*hd
	group := hq / hkv
	q, o := a.Q.h, a.Out.h
	// A unit is a sequence's KV head: its group stacked query rows, their scores at off.
	type unit struct{ s, g, nk, off int }
	units := make([]unit, 0, len(l.Seqs)*hkv)
	total := 0
	var spans [][]T
	for si, s := range l.Seqs {
		nk := s.Pos + 1
		for g := 0; g < hkv; g++ {
			units = append(units, unit{si, g, nk, total})
			total += group * nk
		}
		kv := dec.seq[si]
		for lo := 0; ahead && lo < nk*kvd; lo += touchRun {
			hi := min(lo+touchRun, nk*kvd)
			spans = append(spans, kv.k[lo:hi], kv.v[lo:hi])
		}
	}
	workers(len(spans), func(_, j int) { touch(spans[j]) })
	S := scratch[T](total)
	defer recycle(S)
	inv := scratch[T](len(units) * group)
	defer recycle(inv)
	// A phase's jobs: pieces [lo, hi) of a unit's keys or columns, each unit in as many
	// as give every core two: fewer, larger products than pieces of a few tiles each,
	// whose packing and set-up cost more than the imbalance.
	per := (2*runtime.GOMAXPROCS(0) + len(units) - 1) / len(units)
	type piece struct{ u, lo, hi int }
	var pieces []piece
	cut := func(n func(u unit) int) {
		pieces = pieces[:0]
		for ui, u := range units {
			step := max(16, (n(u)+16*per-1)/(16*per)*16) // whole tiles of 16
			for lo := 0; lo < n(u); lo += step {
				pieces = append(pieces, piece{ui, lo, min(lo+step, n(u))})
			}
		}
	}
	qoff := func(u unit) int { return l.Seqs[u.s].Row*qd + u.g*group*hd }
	cut(func(u unit) int { return u.nk })
	workers(len(pieces), func(_, j int) {
		pc := pieces[j]
		u := units[pc.u]
		kb := dec.seq[u.s].k[pc.lo*kvd+u.g*hd:]
		kern.GemmRowwiseMasked(S[u.off+pc.lo:], q[qoff(u):], kb, group, pc.hi-pc.lo, hd, u.nk, hd, kvd, true, kern.Mask{})
	})
	for ui, u := range units {
		for r := 0; r < group; r++ {
			sum, _ := expRow(S[u.off+r*u.nk:u.off+(r+1)*u.nk], a.Scale)
			inv[ui*group+r] = T(1 / sum)
		}
	}
	cut(func(unit) int { return hd })
	workers(len(pieces), func(_, j int) {
		pc := pieces[j]
		u := units[pc.u]
		vb := dec.seq[u.s].v[u.g*hd+pc.lo:]
		oo := qoff(u) + pc.lo
		kern.GemmRowwiseMasked(o[oo:], S[u.off:], vb, group, pc.hi-pc.lo, u.nk, hd, u.nk, kvd, false, kern.Mask{})
		for r := 0; r < group; r++ {
			or := o[oo+r*hd : oo+r*hd+pc.hi-pc.lo]
			for x := range or {
				or[x] *= inv[pc.u*group+r]
			}
		}
	})
}

// attnTouchBytes is the most keys and values (bytes) attnDecodePhased reads ahead of its
// products: what stays in the cores' caches and a share of a last-level cache until the
// products get to it. A larger step's would be evicted before use and read twice.
const attnTouchBytes = 8 << 20

// cached reports whether a decode step's keys and values fit attnTouchBytes.
func cached[T Float](a *Attn[T]) bool {
	var e T
	n := 0
	for _, s := range a.Layout.Seqs {
		n += (s.Pos + s.N) * a.KVHeads * a.HeadDim * 2
	}
	return n*int(unsafe.Sizeof(e)) <= attnTouchBytes
}

// touchRun is the elements one job of attnDecodePhased's read of the cache takes.
const touchRun = 16384

// touchSink keeps touch's loads from being compiled away.
var touchSink atomic.Int64

// touch loads every 64-byte line of x (four lines in flight a step) so that what reads x
// next finds it in cache.
func touch[T Float](x []T) {
	var s0, s1, s2, s3 T
	line := 64 / int(unsafe.Sizeof(s0)) // elements
	i := 0
	for ; i+4*line <= len(x); i += 4 * line {
		s0 += x[i]
		s1 += x[i+line]
		s2 += x[i+2*line]
		s3 += x[i+3*line]
	}
	for ; i < len(x); i += line {
		s0 += x[i]
	}
	if s0+s1+s2+s3 == 0.5 { // never in practice; cheap either way
		touchSink.Add(1)
	}
}

// scratch is n elements from decodePool (not zeroed), or new ones.
func scratch[T Float](n int) []T {
	if p, ok := decodePool.Get().(*[]T); ok {
		if cap(*p) >= n {
			return (*p)[:n]
		}
		decodePool.Put(p)
	}
	return make([]T, n)
}

// recycle gives a scratch buffer back to decodePool (nil: nothing).
func recycle[T Float](s []T) {
	if cap(s) > 0 {
		decodePool.Put(&s)
	}
}

// decodeKV is the keys and values of an Attention call's decode rows, gathered: per
// sequence (nil for one of several rows), its Pos+1 keys as rows of KVHeads·HeadDim.
type decodeKV[T Float] struct {
	seq  []gathered[T]
	bufs []*[]T
}

type gathered[T Float] struct{ k, v []T }

// decodePool recycles decodeKV's buffers between calls (a step makes one per layer).
var decodePool sync.Pool

// gatherRun is the positions one worker gathers at a time: runs of whole cache rows.
const gatherRun = 64

// gatherParallel is the keys and values (elements) from which a step's gather is spread
// over the cores: below it (one sequence's few hundred keys) one core copies them in
// less time than a hand-off to the other takes.
const gatherParallel = 1 << 18

// gatherDecode copies the keys and values of every decode row's sequence out of the
// paged cache, a run of consecutive slots (within a block) per copy, the runs spread over
// the cores.
func gatherDecode[T Float](a *Attn[T]) *decodeKV[T] {
	l := a.Layout
	kvd := a.KVHeads * a.HeadDim
	d := &decodeKV[T]{seq: make([]gathered[T], len(l.Seqs))}
	type run struct{ s, p0, p1 int }
	var runs []run
	total := 0 // positions
	for si, s := range l.Seqs {
		if s.N != 1 {
			continue
		}
		nk := s.Pos + 1
		if r0, ok := contiguous(l, s, nk); ok { // read in place: nothing to copy
			d.seq[si] = gathered[T]{k: a.K.h[r0*kvd : (r0+nk)*kvd], v: a.V.h[r0*kvd : (r0+nk)*kvd]}
			continue
		}
		bk, bv := d.get(nk*kvd), d.get(nk*kvd)
		d.seq[si] = gathered[T]{k: bk, v: bv}
		total += nk
		for p := 0; p < nk; p += gatherRun {
			runs = append(runs, run{si, p, min(p+gatherRun, nk)})
		}
	}
	if len(runs) == 0 {
		return d
	}
	k, v := a.K.h, a.V.h
	copyRun := func(j int) {
		r := runs[j]
		s := l.Seqs[r.s]
		g := d.seq[r.s]
		kr := seqKeys(l, s)
		for p := r.p0; p < r.p1; {
			slot := kr.row(p)
			n := 1
			for p+n < r.p1 && kr.row(p+n) == slot+n {
				n++
			}
			copy(g.k[p*kvd:(p+n)*kvd], k[slot*kvd:(slot+n)*kvd])
			copy(g.v[p*kvd:(p+n)*kvd], v[slot*kvd:(slot+n)*kvd])
			p += n
		}
	}
	if len(runs) == 1 || total*kvd*2 < gatherParallel {
		for j := range runs {
			copyRun(j)
		}
		return d
	}
	workers(len(runs), func(_, j int) { copyRun(j) })
	return d
}

// contiguous reports whether the first nk keys of s lie in consecutive cache rows, and
// the first's row: a sequence whose blocks the pool handed out in order (the usual case
// for one sequence on a fresh pool) is then read where it is.
func contiguous(l *Layout, s AttnSeq, nk int) (int, bool) {
	if s.Blocks == 0 {
		return s.KRow, true
	}
	kr := seqKeys(l, s)
	r0 := kr.row(0)
	for p := l.BlockLen; p < nk; p += l.BlockLen {
		if kr.row(p) != r0+p {
			return 0, false
		}
	}
	return r0, true
}

func (d *decodeKV[T]) get(n int) []T {
	if p, ok := decodePool.Get().(*[]T); ok && cap(*p) >= n {
		d.bufs = append(d.bufs, p)
		return (*p)[:n]
	}
	s := make([]T, n)
	d.bufs = append(d.bufs, &s)
	return s
}

// release gives the buffers back.
func (d *decodeKV[T]) release() {
	for _, p := range d.bufs {
		decodePool.Put(p)
	}
	d.bufs = nil
}

// attnSerialWork is the multiply-adds (scores and weighted values) below which a step's
// attention runs on the calling core with the query heads of a KV head stacked: a decode
// step of a small model at a short context (SmolLM2-135M at 192 positions: 221K) takes
// less time there than handing jobs to the other core, and stacking packs each KV head's
// keys once instead of once per query head (TestDecodeProfile, q4_k, Xeon: the step's
// attention 4.5–5.4 → 3.0–3.2 ms a token; stacked on two cores 3.3–3.6).
var attnSerialWork = 1 << 20 // a variable so tests can take the parallel path

// attnWork is a step's attention multiply-adds: each row's scores and weighted sum of
// values over the positions it sees (its prefix and the step's rows up to it, bounded
// by all of them).
func attnWork(l *Layout, hq, hd int) int {
	n := 0
	for _, s := range l.Seqs {
		n += s.N * (s.Pos + s.N)
	}
	return 2 * n * hq * hd
}

// serial is workers on the calling goroutine alone.
func serial(n int, f func(w, j int)) int {
	for j := 0; j < n; j++ {
		f(0, j)
	}
	return 1
}
