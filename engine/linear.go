package engine

import (
	"sync/atomic"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// The LoRA-aware linear layer of the transformer (transformer.go): a base product, its
// bias, and every run's LoRA term in one grouped device call, forward and backward.

// proj names one LoRA target: a layer's projection, or the unembedding (lm).
type proj struct {
	l  int
	p  Proj
	lm bool
}

func lp(l int, p Proj) proj { return proj{l: l, p: p} }

// linear computes y = x·Wᵀ (+b) for the rows of rs, then adds every run's LoRA term in
// one grouped product (device.LoraOps: one launch per stage on a GPU, however many
// adapters); it returns the per-run zs = scale·x·Aᵀ that backward needs (nil without
// LoRA; nil entries for runs whose adapter does not adapt this projection).
func (p *pass[T]) linear(rs rowSet[T], y, x, w, b device.Tensor[T], pr proj, in, out int) []device.Tensor[T] {
	if p.wide {
		w = w.WideActivations()
	}
	if zs, ok := p.linearFused(rs, y, x, w, b, pr, in, out); ok {
		return zs
	}
	p.d.MatMulNT(y, x, w, rs.rows, out, in, false)
	return p.linearRest(rs, y, x, b, pr, in, out)
}

// fuseLoRA lets a device that implements device.LoraFusedOps run a lone adapter's term
// inside its base product (off in tests: the separate calls, which give the same bits);
// fusedCalls counts the fused calls made (tests check the path was taken).
var (
	fuseLoRA   = true
	fusedCalls atomic.Int64
)

// fusedRun is the one LoRA run of rs for pr when the device may fuse it into the base
// product: one adapter over every row, no bias between the two (the bias is added
// before the LoRA term).
func (p *pass[T]) fusedRun(rs rowSet[T], pr proj, b device.Tensor[T]) (device.LoraFusedOps[T], *loraRun[T], *devPair[T]) {
	f, ok := p.d.(device.LoraFusedOps[T])
	if !ok || !fuseLoRA || !b.Empty() || len(rs.runs) != 1 {
		return nil, nil, nil
	}
	r := &rs.runs[0]
	lq := r.lw.pair(pr)
	if lq == nil || r.start != 0 || r.n != rs.rows {
		return nil, nil, nil
	}
	return f, r, lq
}

// linearFused is linear as one fused device call (fusedRun), or false.
func (p *pass[T]) linearFused(rs rowSet[T], y, x, w, b device.Tensor[T], pr proj, in, out int) ([]device.Tensor[T], bool) {
	f, r, lq := p.fusedRun(rs, pr, b)
	if f == nil {
		return nil, false
	}
	z := p.allocOut(r.n * lq.rank)
	run := device.LoraRun[T]{Row: 0, N: r.n, Rank: lq.rank, A: lq.a, B: lq.b, Scale: r.lw.scale, Z: z}
	if !f.MatMulNTLora(y, x, w, &run, rs.rows, out, in) {
		return nil, false
	}
	fusedCalls.Add(1)
	return []device.Tensor[T]{z}, true
}

// linOut is one of the projections linears computes from one input.
type linOut[T kern.Float] struct {
	y, w, b device.Tensor[T]
	pr      proj
	out     int
	zs      *[]device.Tensor[T] // receives linear's zs
}

// linears is linear for projections of one input (a layer's Q, K and V; gate and up):
// their base products go to the device as one MatMulNTShared (one preparation of x,
// one hand-off to the cores when decoding), bias and LoRA per projection as linear adds
// them.
func (p *pass[T]) linears(rs rowSet[T], x device.Tensor[T], in int, outs ...linOut[T]) {
	so := make([]device.SharedOut[T], 0, len(outs))
	fused := make([]bool, len(outs))
	for i, o := range outs {
		w := o.w
		if p.wide {
			w = w.WideActivations()
		}
		if *o.zs, fused[i] = p.linearFused(rs, o.y, x, w, o.b, o.pr, in, o.out); fused[i] {
			continue
		}
		so = append(so, device.SharedOut[T]{C: o.y, W: w, N: o.out})
	}
	if len(so) > 0 {
		p.d.MatMulNTShared(x, so, rs.rows, in)
	}
	for i, o := range outs {
		if !fused[i] {
			*o.zs = p.linearRest(rs, o.y, x, o.b, o.pr, in, o.out)
		}
	}
}

// linearRest is linear after the base product y = x·Wᵀ: the bias and the LoRA terms.
func (p *pass[T]) linearRest(rs rowSet[T], y, x, b device.Tensor[T], pr proj, in, out int) []device.Tensor[T] {
	d := p.d
	if !b.Empty() {
		d.AddRows(y, b, rs.rows)
	}
	var runs []device.LoraRun[T]
	var idx []int // runs[j] is rs.runs[idx[j]]
	for i, r := range rs.runs {
		lq := r.lw.pair(pr)
		if lq == nil {
			continue
		}
		runs = append(runs, device.LoraRun[T]{Row: r.start, N: r.n, Rank: lq.rank, A: lq.a, B: lq.b, Scale: r.lw.scale})
		idx = append(idx, i)
	}
	if len(runs) == 0 {
		return nil
	}
	// One allocation holds every run's z.
	zall := p.allocOut(device.LoraScratch(runs))
	zs := make([]device.Tensor[T], len(rs.runs))
	off := 0
	for j := range runs {
		n := runs[j].N * runs[j].Rank
		runs[j].Z = zall.Slice(off, off+n)
		zs[idx[j]] = runs[j].Z
		off += n
	}
	d.LoraForward(y, x, runs, in, out)
	return zs
}

// linearBack computes dL/dx into dx (empty: not needed), overwriting it or, with acc,
// adding to it: the base weight's share in one product over all rows, which writes a
// fresh dx whole (so its buffer needs no clearing), then every run's LoRA term, whose
// gradients it accumulates, in one grouped product.
func (p *pass[T]) linearBack(dx, dy, x, w device.Tensor[T], pr proj, zs []device.Tensor[T], in, out int, acc bool) {
	d := p.d
	if !dx.Empty() {
		if p.linearBackFused(dx, dy, x, w, pr, zs, in, out, acc) {
			return
		}
		d.MatMulNN(dx, dy, w, p.all.rows, in, out, acc)
	}
	var runs []device.LoraRun[T]
	for i, r := range p.all.runs {
		lq := r.lw.pair(pr)
		if lq == nil {
			continue
		}
		g := r.grad.pair(pr)
		if g == nil && dx.Empty() {
			continue
		}
		run := device.LoraRun[T]{Row: r.start, N: r.n, Rank: lq.rank, A: lq.a, B: lq.b, Scale: r.lw.scale, Z: zs[i]}
		if g != nil {
			run.GA, run.GB = g.a, g.b
		}
		runs = append(runs, run)
	}
	if len(runs) > 0 {
		dz := p.tempOut(device.LoraScratch(runs))
		d.LoraBackward(dx, dy, x, dz, runs, in, out)
		p.free(dz)
	}
}

// linearBackFused is linearBack as one fused device call and the gradients (fusedRun),
// or false.
func (p *pass[T]) linearBackFused(dx, dy, x, w device.Tensor[T], pr proj, zs []device.Tensor[T], in, out int, acc bool) bool {
	f, r, lq := p.fusedRun(p.all, pr, device.Tensor[T]{})
	if f == nil {
		return false
	}
	dz := p.tempOut(r.n * lq.rank)
	defer p.free(dz)
	run := device.LoraRun[T]{Row: 0, N: r.n, Rank: lq.rank, A: lq.a, B: lq.b, Scale: r.lw.scale, Z: zs[0]}
	if !f.MatMulNNLora(dx, dy, w, dz, &run, p.all.rows, in, out, acc) {
		return false
	}
	fusedCalls.Add(1)
	if g := r.grad.pair(pr); g != nil {
		run.GA, run.GB = g.a, g.b
		f.LoraGrads(dy, x, dz, []device.LoraRun[T]{run}, in, out)
	}
	return true
}
