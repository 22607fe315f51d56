package device

import (
	"runtime"

	"github.com/tuft-go/tuft/engine/kern"
)

// Attention over the paged KV cache (inference: prompt processing and decode).

// pagedMinRows is the fewest query rows of every sequence for which Attention gathers
// paged keys and runs blocked (attnPaged): a prompt. A decode step's single row per
// sequence reads each key once, so it keeps the per-row loop, which reads the keys in
// place rather than copying them first.
const pagedMinRows = 8

// pagedBlocked reports whether Attention runs attnPaged: paged keys, no probabilities
// or statistics kept, and at least pagedMinRows query rows in every sequence.
func pagedBlocked[T Float](a *Attn[T]) bool {
	if !a.P.Empty() {
		return false
	}
	paged := false
	for _, s := range a.Layout.Seqs {
		if s.N < pagedMinRows {
			return false
		}
		paged = paged || s.Blocks != 0
	}
	return paged
}

// attnPaged is Attention for paged keys, blocked as attnForward: each job (a head of a
// block of query rows) first copies its keys and values, a block of the cache at a time,
// into contiguous per-worker buffers, then computes S = Q·Kᵀ, the exponentials and P·V
// with the GEMM kernels instead of one dot product and one axpy per key.
func attnPaged[T Float](a *Attn[T]) {
	l := a.Layout
	hq, hkv, hd := a.Heads, a.KVHeads, a.HeadDim
	qd, kvd := hq*hd, hkv*hd
	group := hq / hkv
	q, k, v, o := a.Q.h, a.K.h, a.V.h, a.Out.h
	jobs := attnJobs(l, hq)
	type buf struct{ s, k, v []T }
	bufs := make([]buf, min(runtime.GOMAXPROCS(0), len(jobs)))
	workers(len(jobs), func(w, j int) {
		jb := jobs[j]
		s := l.Seqs[jb.s]
		rows, nk := jb.i1-jb.i0, s.Pos+jb.i1
		b := &bufs[w]
		if cap(b.s) < rows*nk {
			b.s = make([]T, blockRows(s.N)*(s.Pos+s.N))
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
		kern.Gemm(S, q[qoff:], kb, rows, nk, hd, nk, qd, hd, false, true, false)
		var inv [attnBlock]T
		for r := 0; r < rows; r++ {
			valid := s.Pos + jb.i0 + r + 1
			row := S[r*nk : r*nk+nk]
			sum, _ := expRow(row[:valid], a.Scale)
			clear(row[valid:])
			inv[r] = T(1 / sum)
		}
		kern.Gemm(o[qoff:], S, vb, rows, hd, nk, qd, nk, hd, false, false, false)
		for r := 0; r < rows; r++ {
			or := o[qoff+r*qd : qoff+r*qd+hd]
			for x := range or {
				or[x] *= inv[r]
			}
		}
	})
}
