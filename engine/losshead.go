package engine

import (
	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// lossHead is a training pack's loss head: the final hidden states' unembedding and
// log-softmax, the targets' log-probabilities the losses read, and the gradient that flows
// back into the transformer. It is fused (device.Head): the rows × V logits never exist,
// only a chunk of rows of them inside the device's LossHead, and backward needs none
// (dL/dH = Σⱼ gⱼ·W[tⱼ] − (Σⱼ gⱼ)·E with E = softmax·W, kept by the forward pass; see
// device.Head). That needs only the targets' log-probabilities from the losses, which is
// all that every loss of loss.go reads.
//
// The full logits are kept (full: the log-softmax of every row in one rows × V tensor, the
// gradient with respect to the logits by XentBack, then the unembedding's backward) in one
// case: a LoRA adapter on the unembedding (train_unembed) in the pack, whose B gradient
// Σᵣ dL/dlogits[r]ᵀ·zᵣ needs every row's probabilities weighted by the loss's gradient,
// known only after the forward pass.
type lossHead[T kern.Float] struct {
	p     *pass[T]
	items []*fbItem[T]
	refs  []datumRef
	segs  []segment[T]
	train bool
	full  bool
	head  *device.Head[T] // the fused head, after forward
	idx   []int64         // full: the targets' flat indices into the logits
}

func newLossHead[T kern.Float](p *pass[T], items []*fbItem[T], refs []datumRef, segs []segment[T], backward bool) *lossHead[T] {
	lh := &lossHead[T]{p: p, items: items, refs: refs, segs: segs, train: backward}
	for _, r := range p.all.runs {
		lh.full = lh.full || r.lw.pair(proj{lm: true}) != nil
	}
	return lh
}

// forward runs the transformer over the pack; the fused head asks it for no logits and
// applies the final norm itself.
func (lh *lossHead[T]) forward(tokens []int32) *acts[T] {
	p := lh.p
	if lh.full {
		return p.forward(tokens, lh.train, nil)
	}
	act := p.forward(tokens, lh.train, []int32{})
	n, D := len(tokens), p.c.Hidden
	act.hf, act.rstdf = p.alloc(n*D), p.alloc(n)
	p.d.RMSNorm(act.hf, act.rstdf, act.xf, p.w.FinalNorm, n, D, p.c.RMSNormEps)
	return act
}

// logprobs returns the targets' log-probabilities, datum by datum in the pack's order,
// each datum's row by row with its k targets.
func (lh *lossHead[T]) logprobs(act *acts[T]) []T {
	p, d := lh.p, lh.p.d
	V := p.c.VocabSize
	off := []int32{0}
	var tok []int32
	for i, r := range lh.refs {
		it := lh.items[r.item]
		tt := it.req.Data[r.datum].LossInputs["target_tokens"].I64
		k := it.ks[r.datum]
		for j, t := range tt {
			if lh.full {
				lh.idx = append(lh.idx, int64(lh.segs[i].start+j/k)*int64(V)+t)
			}
			tok = append(tok, int32(t))
			if j%k == k-1 {
				off = append(off, int32(len(tok)))
			}
		}
	}
	out := make([]T, len(tok))
	if lh.full {
		d.LogSoftmax(act.logits, p.all.rows, V)
		d.Gather(out, act.logits, lh.idx)
		return out
	}
	h := &device.Head[T]{H: act.hf, W: p.w.LMHead, Rows: p.all.rows, D: p.c.Hidden, V: V,
		Off: p.ints(off), Tok: p.ints(tok), LogP: p.alloc(len(tok))}
	if lh.train {
		h.E = p.alloc(p.all.rows * p.c.Hidden)
	}
	d.LossHead(h)
	d.Download(out, h.LogP)
	lh.head = h
	return out
}

// backward takes g, dL/dlogprob per target in logprobs' order, back through the head and
// the transformer.
func (lh *lossHead[T]) backward(act *acts[T], g []float64) {
	p, d := lh.p, lh.p.d
	n, D, V := p.all.rows, p.c.Hidden, p.c.VocabSize
	if !lh.full {
		gt := make([]T, len(g))
		for i, v := range g {
			gt[i] = T(v)
		}
		gd := p.alloc(len(g))
		d.Upload(gd, gt)
		dhf := p.alloc(n * D)
		d.LossHeadBack(lh.head, dhf, gd)
		p.backwardHidden(act, dhf)
		return
	}
	// dL/dlogits = Σ_k dL/dlp_k · (onehot(target_k) − softmax), for rows with a non-zero
	// dL/dlp.
	var xg device.XentGrad
	listed := make([]bool, n)
	off := 0
	for i, r := range lh.refs {
		sg, k := lh.segs[i], lh.items[r.item].ks[r.datum]
		for row := 0; row < sg.n; row++ {
			var sum float64
			nonzero := false
			for kk := 0; kk < k; kk++ {
				sum += g[off+row*k+kk]
				nonzero = nonzero || g[off+row*k+kk] != 0
			}
			if !nonzero {
				continue
			}
			listed[sg.start+row] = true
			xg.Rows = append(xg.Rows, int32(sg.start+row))
			xg.Sums = append(xg.Sums, sum)
			for kk := 0; kk < k; kk++ {
				xg.Idx = append(xg.Idx, lh.idx[off+row*k+kk])
				xg.Vals = append(xg.Vals, g[off+row*k+kk])
			}
		}
		off += sg.n * k
	}
	// On the host the gradient overwrites the log-probabilities, each row read before it
	// is written; rows XentBack does not list must then be zeroed here.
	var dl device.Tensor[T]
	if h := act.logits.Host(); h != nil {
		dl = act.logits
		for r, ok := range listed {
			if !ok {
				clear(h[r*V : (r+1)*V])
			}
		}
	} else {
		dl = p.alloc(n * V)
	}
	d.XentBack(dl, act.logits, V, &xg)
	p.backward(act, dl)
}
