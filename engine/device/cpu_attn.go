package device

import (
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
	// step of decode rows only takes attnDecodePhased instead: the stacked products cut
	// by keys and columns, each job's keys and values read first.
	decodes := 0
	for _, s := range l.Seqs {
		if s.N == 1 {
			decodes++
		}
	}
	if attnPhased && decodes == len(l.Seqs) && group <= attnBlock && kern.Bursting() {
		dec := gatherDecode(a)
		defer dec.release()
		attnDecodePhased(a, dec)
		return
	}
	small := attnWork(l, hq, hd) < attnSerialWork
	few := decodes*hkv < 2*kern.Procs() // too few KV heads to share the cores
	stackable := group <= attnBlock && (small || !few)
	var dec *decodeKV[T]
	if decodes > 0 && (!stackable || small) { // a large batch's jobs copy their own keys
		dec = gatherDecode(a)
		defer dec.release()
	}
	all := attnJobs(l, hq)
	jobs := all[:0] // filtered in place
	for _, jb := range all {
		if !stackable || l.Seqs[jb.s].N != 1 || jb.h%group == 0 {
			jobs = append(jobs, jb)
		}
	}
	type buf struct{ s, k, v *[]T }
	bufs := make([]buf, min(kern.Procs(), len(jobs)))
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
		if b.s == nil || cap(*b.s) < rows*nk {
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
			if b.k == nil || cap(*b.k) < nk*hd {
				recycle(b.k)
				recycle(b.v)
				b.k, b.v = scratch[T]((s.Pos+s.N)*hd), scratch[T]((s.Pos+s.N)*hd)
			}
			kb, vb = (*b.k)[:nk*hd], (*b.v)[:nk*hd]
			kr := seqKeys(l, s)
			for p := 0; p < nk; p++ {
				r := kr.row(p)*kvd + ko
				copy(kb[p*hd:p*hd+hd], k[r:r+hd])
				copy(vb[p*hd:p*hd+hd], v[r:r+hd])
			}
		}
		S := (*b.s)[:rows*nk]
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
			sum, _ := expSum(row[:valid], a.Scale)
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

// attnDecodePhased is attnPaged for a step of decode rows in a burst, in two phases of
// jobs the cores claim, each job reading its keys or values first and whole (touch), so
// that its products find them in its own core's cache: a step's keys and values come
// from memory (the weights streamed since evicted them), and the transposing pack of the
// keys and the strided reads of a head's columns of the values otherwise waited on it
// line by line. First the scores: a sequence's keys [lo, hi) a job, every KV head's
// stacked query rows against those keys' rows (contiguous, one stream). Then each row's
// exponentials on the caller. Then the weighted sums: for a sequence of one k block
// (kern.RowwiseK keys) a block of a unit's columns a job; past it a block of keys a job,
// every KV head, into partial sums the caller adds in order, which is how GemmRowwise
// sums its k blocks. GemmRowwise's elements do not depend on how many rows or columns
// share a product, so every output is the bits the stacked jobs and a prompt's blocks
// compute (TestPagedAttentionDecodePhased). BenchmarkPagedAttentionBurst (30 layers of
// SmolLM2, the keys and values out of cache; see docs/performance.md's seventeenth pass).
func attnDecodePhased[T Float](a *Attn[T], dec *decodeKV[T]) {
	l := a.Layout
	hq, hkv, hd := a.Heads, a.KVHeads, a.HeadDim
	qd, kvd := hq*hd, hkv*hd
	group := hq / hkv
	q, o := a.Q.h, a.Out.h
	kb := kern.RowwiseK
	// A unit is a sequence's KV head: its group stacked query rows, their scores at off
	// and, for a sequence past one block of keys, its blocks' weighted sums at part.
	type unit struct{ s, g, nk, off, part int }
	units := make([]unit, 0, len(l.Seqs)*hkv)
	total, parts := 0, 0
	for si, s := range l.Seqs {
		nk := s.Pos + 1
		nb := 0
		if nk > kb {
			nb = (nk + kb - 1) / kb
		}
		for g := 0; g < hkv; g++ {
			units = append(units, unit{si, g, nk, total, parts})
			total += group * nk
			parts += nb * group * hd
		}
	}
	sp, ip, pp := scratch[T](total), scratch[T](len(units)*group), scratch[T](parts)
	defer recycle(sp)
	defer recycle(ip)
	defer recycle(pp)
	S, inv, P := *sp, *ip, *pp
	qoff := func(u unit) int { return l.Seqs[u.s].Row*qd + u.g*group*hd }
	cores := kern.Procs()
	// The scores: a sequence's keys [lo, hi) a job, every KV head's stacked rows, the
	// keys' rows (and, for a sequence of one block, the values', which the columns' jobs
	// read next) read first and whole.
	type keys struct{ s, lo, hi int }
	var jobs []keys
	per := max(1, (2*cores+len(l.Seqs)-1)/len(l.Seqs))
	most := max(16, attnJobBytes/(kvd*int(unsafe.Sizeof(T(0))))/16*16)
	for si, s := range l.Seqs {
		nk := s.Pos + 1
		step := min(most, max(16, (nk+16*per-1)/(16*per)*16))
		for lo := 0; lo < nk; lo += step {
			jobs = append(jobs, keys{si, lo, min(lo+step, nk)})
		}
	}
	workers(len(jobs), func(_, j int) {
		jb := jobs[j]
		kv := dec.seq[jb.s]
		touch(kv.k[jb.lo*kvd : jb.hi*kvd])
		if l.Seqs[jb.s].Pos < kb {
			touch(kv.v[jb.lo*kvd : jb.hi*kvd])
		}
		for g := 0; g < hkv; g++ {
			u := units[jb.s*hkv+g]
			kern.GemmRowwiseMasked(S[u.off+jb.lo:], q[qoff(u):], kv.k[jb.lo*kvd+g*hd:], group, jb.hi-jb.lo, hd, u.nk, hd, kvd, true, kern.Mask{})
		}
	})
	for ui, u := range units {
		for r := 0; r < group; r++ {
			sum, _ := expSum(S[u.off+r*u.nk:u.off+(r+1)*u.nk], a.Scale)
			inv[ui*group+r] = T(1 / sum)
		}
	}
	// The weighted sums. A sequence of one block of keys: a block of a unit's columns a
	// job, the output scaled there. Longer: a block of keys a job (its values' rows read
	// first and whole), every KV head, into the block's partial sums; GemmRowwise sums a
	// product's k in blocks of kern.RowwiseK, each from zero, and adds them in order, so
	// the partial sums added in order below are its bits.
	type piece struct{ u, lo, hi, blk int } // blk < 0: columns [lo, hi) of unit u
	var pieces []piece
	per = (2*cores + len(units) - 1) / len(units) // pieces a unit, for every core two
	cols := max(16, (hd+16*per-1)/(16*per)*16)
	for ui, u := range units {
		switch {
		case u.nk <= kb:
			for lo := 0; lo < hd; lo += cols {
				pieces = append(pieces, piece{ui, lo, min(lo+cols, hd), -1})
			}
		case u.g == 0: // the sequence's first unit stands for all its KV heads
			for b := 0; b*kb < u.nk; b++ {
				pieces = append(pieces, piece{ui, b * kb, min(b*kb+kb, u.nk), b})
			}
		}
	}
	workers(len(pieces), func(_, j int) {
		pc := pieces[j]
		u := units[pc.u]
		v := dec.seq[u.s].v
		if pc.blk >= 0 {
			touch(v[pc.lo*kvd : pc.hi*kvd])
			for g := 0; g < hkv; g++ {
				ug := units[pc.u+g]
				kern.GemmRowwiseMasked(P[ug.part+pc.blk*group*hd:], S[ug.off+pc.lo:], v[pc.lo*kvd+g*hd:], group, hd, pc.hi-pc.lo, hd, ug.nk, kvd, false, kern.Mask{})
			}
			return
		}
		oo := qoff(u) + pc.lo
		kern.GemmRowwiseMasked(o[oo:], S[u.off:], v[u.g*hd+pc.lo:], group, pc.hi-pc.lo, u.nk, hd, u.nk, kvd, false, kern.Mask{})
		for r := 0; r < group; r++ {
			or := o[oo+r*hd : oo+r*hd+pc.hi-pc.lo]
			for x := range or {
				or[x] *= inv[pc.u*group+r]
			}
		}
	})
	for ui, u := range units {
		if u.nk <= kb {
			continue
		}
		nb := (u.nk + kb - 1) / kb
		for r := 0; r < group; r++ {
			or := o[qoff(u)+r*hd:][:hd]
			copy(or, P[u.part+r*hd:][:hd])
			for b := 1; b < nb; b++ {
				pr := P[u.part+b*group*hd+r*hd:][:hd]
				for x := range or {
					or[x] += pr[x]
				}
			}
			for x := range or {
				or[x] *= inv[ui*group+r]
			}
		}
	}
}

// attnJobBytes bounds the keys one job of attnDecodePhased's scores reads first (bytes):
// they stay in the core's L2 until its products have read them.
const attnJobBytes = 256 << 10

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

// scratch is n elements from decodePool (not zeroed), or new ones. The pool holds the
// slices' pointers, which go back as they came: putting a slice's address instead
// allocated its header on every call.
func scratch[T Float](n int) *[]T {
	if p, ok := decodePool.Get().(*[]T); ok {
		if cap(*p) >= n {
			*p = (*p)[:n]
			return p
		}
		decodePool.Put(p)
	}
	s := make([]T, n)
	return &s
}

// recycle gives a scratch buffer back to decodePool (nil: nothing).
func recycle[T Float](p *[]T) {
	if p != nil {
		decodePool.Put(p)
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
