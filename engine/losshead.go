package engine

import (
	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// lossHead is a training pack's loss head: the final hidden states' unembedding and
// log-softmax, the targets' log-probabilities the losses read, and the gradient that flows
// back into the transformer. It is fused (device.Head): the rows × V logits never exist,
// only a chunk of rows of them inside the device's operations, and backward needs none
// (dL/dH = Σⱼ gⱼ·W[tⱼ] − (Σⱼ gⱼ)·E with E = softmax·W, kept by the forward pass; see
// device.Head). That needs only the targets' log-probabilities from the losses, which is
// all that every loss of loss.go reads. A LoRA adapter on the unembedding (train_unembed)
// adds its term per run of rows; its B gradient recomputes the logits once, a chunk at a
// time (LossHeadLoraGrad). Only sampling (sampler.go) still computes full logits, of the
// rows it samples from.
type lossHead[T kern.Float] struct {
	p     *pass[T]
	items []*fbItem[T]
	refs  []datumRef
	segs  []segment[T]
	train bool
	head  *device.Head[T] // after logprobs
	runs  []loraRun[T]    // the runs with an unembedding pair, as head.Lora
}

func newLossHead[T kern.Float](p *pass[T], items []*fbItem[T], refs []datumRef, segs []segment[T], train bool) *lossHead[T] {
	return &lossHead[T]{p: p, items: items, refs: refs, segs: segs, train: train}
}

// forward runs the transformer over the pack, asking it for no logits but for the final
// norm's output (which it fuses with the last residual add).
func (lh *lossHead[T]) forward(tokens []int32) *acts[T] {
	lh.p.headNorm = true
	return lh.p.forward(tokens, lh.train, []int32{})
}

// logprobs returns the targets' log-probabilities, datum by datum in the pack's order,
// each datum's row by row with its k targets.
func (lh *lossHead[T]) logprobs(act *acts[T]) []T {
	p, d := lh.p, lh.p.d
	D, V := p.c.Hidden, p.c.VocabSize
	off := []int32{0}
	var tok []int32
	for _, r := range lh.refs {
		it := lh.items[r.item]
		k := it.ks[r.datum]
		for j, t := range it.req.Data[r.datum].LossInputs["target_tokens"].I64 {
			tok = append(tok, int32(t))
			if j%k == k-1 {
				off = append(off, int32(len(tok)))
			}
		}
	}
	w := p.w.LMHead
	if p.wide {
		w = w.WideActivations() // the head's products keep float32 hidden states, as linear's do
	}
	h := &device.Head[T]{H: act.hf, W: w, Rows: p.all.rows, D: D, V: V,
		Off: p.ints(off), Tok: p.ints(tok), LogP: p.alloc(len(tok))}
	if lh.train {
		h.E = p.alloc(p.all.rows * D)
	}
	for _, r := range p.all.runs {
		lq := r.lw.pair(proj{lm: true})
		if lq == nil {
			continue
		}
		// z = scale·H·Aᵀ, as the linear layer's LoRA term.
		z := p.alloc(r.n * lq.rank)
		d.MatMulNT(z, act.hf.Slice(r.start*D, (r.start+r.n)*D), lq.a, r.n, lq.rank, D, false)
		d.Scale(z, r.lw.scale)
		hl := device.HeadLora[T]{Start: r.start, N: r.n, R: lq.rank, Z: z, B: lq.b}
		if lh.train {
			hl.F = p.alloc(r.n * lq.rank)
			if g := r.grad.pair(proj{lm: true}); g != nil {
				hl.DB = g.b
				h.LSE = p.alloc(p.all.rows)
			}
		}
		h.Lora = append(h.Lora, hl)
		lh.runs = append(lh.runs, r)
	}
	d.LossHead(h)
	out := make([]T, len(tok))
	d.Download(out, h.LogP)
	lh.head = h
	return out
}

// backward takes g, dL/dlogprob per target in logprobs' order, back through the head and
// the transformer.
func (lh *lossHead[T]) backward(act *acts[T], g []float64) {
	p, d, h := lh.p, lh.p.d, lh.head
	n, D := p.all.rows, p.c.Hidden
	gt := make([]T, len(g))
	for i, v := range g {
		gt[i] = T(v)
	}
	gd := p.alloc(len(g))
	d.Upload(gd, gt)
	dhf := p.alloc(n * D)
	d.LossHeadBack(h, dhf, gd)
	// The unembedding's LoRA terms, as linearBack's: dB (all runs in one recomputation of
	// the logits), dz = dL/dlogits·B·scale, dA += dzᵀ·H, dH += dz·A.
	if !h.LSE.Empty() {
		d.LossHeadLoraGrad(h, gd)
	}
	for i, l := range h.Lora {
		r := lh.runs[i]
		lq, gp := r.lw.pair(proj{lm: true}), r.grad.pair(proj{lm: true})
		dz := p.temp(l.N * l.R)
		d.LossHeadBack(&device.Head[T]{W: l.B, E: l.F, Rows: l.N, D: l.R, V: h.V, Off: h.Off.Slice(l.Start, l.Start+l.N+1), Tok: h.Tok}, dz, gd)
		d.Scale(dz, r.lw.scale)
		hs := act.hf.Slice(l.Start*D, (l.Start+l.N)*D)
		if gp != nil {
			d.MatMulTN(gp.a, dz, hs, l.R, D, l.N, true)
		}
		d.MatMulNN(dhf.Slice(l.Start*D, (l.Start+l.N)*D), dz, lq.a, l.N, D, l.R, true)
		p.free(dz)
	}
	p.backward(act, dhf)
}
