package device

import (
	"runtime"

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
	// A decode row (a sequence of one row) runs as one job per KV head whose rows are the
	// query heads sharing it, stacked (their query and output rows are adjacent, HeadDim
	// apart): the keys are gathered once for the group and fill more of the kernel's
	// six-row tile. GemmRowwise makes each row the same however many are stacked.
	stackable := group <= attnBlock
	var jobs []attnJob
	for _, jb := range attnJobs(l, hq) {
		if !stackable || l.Seqs[jb.s].N != 1 || jb.h%group == 0 {
			jobs = append(jobs, jb)
		}
	}
	type buf struct{ s, k, v []T }
	bufs := make([]buf, min(runtime.GOMAXPROCS(0), len(jobs)))
	workers(len(jobs), func(w, j int) {
		jb := jobs[j]
		s := l.Seqs[jb.s]
		stack := stackable && s.N == 1
		rows, nk, ld := jb.i1-jb.i0, s.Pos+jb.i1, qd
		if stack {
			rows, ld = group, hd
		}
		b := &bufs[w]
		if cap(b.s) < rows*nk {
			b.s = make([]T, max(rows, blockRows(s.N))*(s.Pos+s.N))
		}
		if cap(b.k) < nk*hd {
			b.k, b.v = make([]T, (s.Pos+s.N)*hd), make([]T, (s.Pos+s.N)*hd)
		}
		kb, vb := b.k[:nk*hd], b.v[:nk*hd]
		kr := seqKeys(l, s)
		ko := jb.h / group * hd
		for p := 0; p < nk; p++ {
			r := kr.row(p)*kvd + ko
			copy(kb[p*hd:p*hd+hd], k[r:r+hd])
			copy(vb[p*hd:p*hd+hd], v[r:r+hd])
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
		kern.GemmRowwiseMasked(S, q[qoff:], kb, rows, nk, hd, nk, ld, hd, true, sMask)
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
		kern.GemmRowwiseMasked(o[qoff:], S, vb, rows, hd, nk, ld, nk, hd, false, pMask)
		for r := 0; r < rows; r++ {
			or := o[qoff+r*ld : qoff+r*ld+hd]
			for x := range or {
				or[x] *= inv[r]
			}
		}
	})
}
