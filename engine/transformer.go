package engine

import (
	"math"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// This file is the transformer, written once for every device and for both of its uses:
// training (packed sequences that attend within themselves, activations kept for the
// backward pass, which sits right under the forward pass) and sampling (sequences that
// continue from a KV cache, one step at a time). Read it top to bottom: RoPE tables, the
// pass and its sequences, the LoRA-aware linear layer, forward, backward.

// invFreq computes RoPE's inverse frequencies with optional llama3 scaling.
func invFreq(c Config) []float64 {
	half := c.HeadDim / 2
	f := make([]float64, half)
	for i := range f {
		f[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.HeadDim))
	}
	if s := c.RopeScaling; s != nil && s.Type == "llama3" {
		old := float64(s.OriginalMaxPositions)
		lowWave, highWave := old/s.LowFreqFactor, old/s.HighFreqFactor
		for i, v := range f {
			wave := 2 * math.Pi / v
			switch {
			case wave < highWave:
			case wave > lowWave:
				f[i] = v / s.Factor
			default:
				smooth := (old/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				f[i] = (1-smooth)*v/s.Factor + smooth*v
			}
		}
	}
	return f
}

// newRope computes a config's RoPE tables for positions [0, positions).
func newRope(c Config, positions int) *device.Rope { return device.NewRope(invFreq(c), positions) }

// segment is one sequence of a pass: rows [start, start+n) of the pass at positions
// pos…pos+n−1, the adapter they run with (lw nil: the base model; grad nil: no
// gradients) and, when sampling, the KV cache that holds positions before pos and
// receives theirs (kv nil: the sequence attends within its own rows, pos is 0).
type segment[T kern.Float] struct {
	start, n, pos int
	lw, grad      *devLora[T]
	kv            *KVCache[T]
}

// loraRun is a stretch of consecutive rows that share an adapter and gradient, so their
// LoRA products are one matrix product each.
type loraRun[T kern.Float] struct {
	start, n int
	lw, grad *devLora[T]
}

// rowSet is the rows a linear layer runs over and their LoRA runs.
type rowSet[T kern.Float] struct {
	rows int
	runs []loraRun[T]
}

// pass is everything one forward (and backward) pass reads: frozen weights, RoPE tables,
// the sequences and where their keys live. Every projection multiplies the rows of all
// sequences by the base weight in one product (one pass over the weights, however many
// adapters); LoRA terms go per run of rows, attention per sequence.
type pass[T kern.Float] struct {
	c    Config
	d    device.Device[T]
	w    *devWeights[T]
	rope *device.Rope
	segs []segment[T]
	all  rowSet[T]
	pool *KVPool[T] // the caches' pool; nil in a training pass
	// stats: attention keeps per-row statistics for the backward pass rather than its
	// probabilities (devices that can recompute them; see device.StatsKeeper).
	stats bool

	pos   device.Tensor[int32] // each row's position
	slots device.Tensor[int32] // each row's KV slot (cached passes)
	lay   device.Layout
	mem   []device.Tensor[T]     // freed by release
	imem  []device.Tensor[int32] // likewise
	// recycle: host buffers come from the arena and go back to it on release (training
	// passes, whose outputs are copied out before release); host lists them.
	recycle bool
	host    [][]T
	// wide: the forward products multiply float32 activations whatever the frozen
	// weights' format (training and scoring passes; see device.Tensor.WideActivations).
	wide bool
}

// newPass lays out the segments; slots[i] is row i's KV-cache slot when they have caches
// (all of them, from one pool, or none).
func newPass[T kern.Float](c Config, d device.Device[T], w *devWeights[T], rope *device.Rope, segs []segment[T], slots []int32) *pass[T] {
	p := &pass[T]{c: c, d: d, w: w, rope: rope, segs: segs, stats: device.KeepsStats(d)}
	pos := make([]int32, 0, 64)
	probs := 0
	for i, sg := range segs {
		p.all.rows += sg.n
		for j := 0; j < sg.n; j++ {
			pos = append(pos, int32(sg.pos+j))
		}
		as := device.AttnSeq{Row: sg.start, N: sg.n, Pos: sg.pos, KRow: sg.start}
		if sg.kv != nil {
			p.pool = sg.kv.pool
			as.Table, as.Blocks = len(p.lay.Tables), len(sg.kv.blocks)
			p.lay.Tables = append(p.lay.Tables, sg.kv.blocks...)
		}
		as.POff = probs
		probs += c.Heads * sg.n * (sg.pos + sg.n)
		p.lay.Seqs = append(p.lay.Seqs, as)
		if sg.lw != nil {
			// Consecutive sequences of one adapter share one LoRA product per projection
			// when decoding, and on devices where each product is a kernel launch. CPU
			// training keeps one per sequence, as the engine always computed it.
			merge := sg.kv != nil || !d.HostMemory()
			if k := len(p.all.runs) - 1; merge && k >= 0 && p.all.runs[k].lw == sg.lw && p.all.runs[k].grad == sg.grad &&
				p.all.runs[k].start+p.all.runs[k].n == sg.start && segs[i-1].lw == sg.lw {
				p.all.runs[k].n += sg.n
			} else {
				p.all.runs = append(p.all.runs, loraRun[T]{start: sg.start, n: sg.n, lw: sg.lw, grad: sg.grad})
			}
		}
	}
	p.pos = p.ints(pos)
	if p.pool != nil {
		p.lay.BlockLen = p.pool.blockLen
		p.slots = p.ints(slots)
		p.lay.Tab = p.ints(p.lay.Tables)
	}
	p.lay.Desc = p.ints(p.lay.Pack())
	return p
}

// alloc returns n zeroed elements that live until release.
func (p *pass[T]) alloc(n int) device.Tensor[T] {
	if p.recycle {
		return p.hostAlloc(n)
	}
	t := p.d.Alloc(n)
	if !p.d.HostMemory() {
		p.mem = append(p.mem, t)
	}
	return t
}

func (p *pass[T]) ints(v []int32) device.Tensor[int32] {
	t := p.d.Ints(v)
	if !p.d.HostMemory() {
		p.imem = append(p.imem, t)
	}
	return t
}

// temp returns n zeroed elements that live until free (scratch of the backward pass).
func (p *pass[T]) temp(n int) device.Tensor[T] {
	if p.recycle {
		return device.Host(arenaGet[T](n))
	}
	return p.d.Alloc(n)
}

// free gives back a tensor from temp.
func (p *pass[T]) free(t device.Tensor[T]) {
	if p.recycle {
		arenaPut(t.Host())
		return
	}
	p.d.Free(t)
}

// release frees everything the pass allocated.
func (p *pass[T]) release() {
	for _, s := range p.host {
		arenaPut(s)
	}
	p.host = nil
	for _, t := range p.mem {
		p.d.Free(t)
	}
	for _, t := range p.imem {
		p.d.FreeInts(t)
	}
	p.mem, p.imem = nil, nil
}

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
	p.d.MatMulNT(y, x, w, rs.rows, out, in, false)
	return p.linearRest(rs, y, x, b, pr, in, out)
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
	so := make([]device.SharedOut[T], len(outs))
	for i, o := range outs {
		w := o.w
		if p.wide {
			w = w.WideActivations()
		}
		so[i] = device.SharedOut[T]{C: o.y, W: w, N: o.out}
	}
	p.d.MatMulNTShared(x, so, rs.rows, in)
	for _, o := range outs {
		*o.zs = p.linearRest(rs, o.y, x, o.b, o.pr, in, o.out)
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
	zall := p.alloc(device.LoraScratch(runs))
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

// linearBack accumulates every run's LoRA gradients and adds dL/dx to dx (empty: not
// needed) in one grouped product, and the base weight's share in one product over all
// rows.
func (p *pass[T]) linearBack(dx, dy, x, w device.Tensor[T], pr proj, zs []device.Tensor[T], in, out int) {
	d := p.d
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
		dz := p.temp(device.LoraScratch(runs))
		d.LoraBackward(dx, dy, x, dz, runs, in, out)
		p.free(dz)
	}
	if !dx.Empty() {
		d.MatMulNN(dx, dy, w, p.all.rows, in, out, true)
	}
}

// layerAct are one layer's saved activations.
type layerAct[T kern.Float] struct {
	x, h1, rstd1   device.Tensor[T]
	zq, zk, zv, zo []device.Tensor[T] // per LoRA run
	q, k, v, o     device.Tensor[T]
	p              device.Tensor[T] // attention probabilities (see device.Attn.P)
	x2, h2, rstd2  device.Tensor[T]
	zg, zu, zd     []device.Tensor[T]
	g, u, a        device.Tensor[T]
}

// acts is what forward returns: the logits of the rows asked for and, when kept, what
// backward needs.
type acts[T kern.Float] struct {
	layers []layerAct[T]
	xf     device.Tensor[T] // input of the final norm
	hf     device.Tensor[T]
	rstdf  device.Tensor[T]
	zlm    []device.Tensor[T]
	logits device.Tensor[T] // len(lmRows) × V (all rows when lmRows is nil), not normalised
}

// forward runs the model over the pass's rows (tokens: all of them, in segment order).
// keep saves what backward needs; lmRows picks the rows the unembedding runs on (nil:
// every row; keep needs every row). Cached segments write their keys and values to their
// caches' reserved slots and attend over the cache.
func (p *pass[T]) forward(tokens []int32, keep bool, lmRows []int32) *acts[T] {
	c, d, w := p.c, p.d, p.w
	n, D, I := len(tokens), c.Hidden, c.Intermediate
	if n != p.all.rows {
		panic("engine: forward over a token count that is not the segments' total")
	}
	hq, hkv, hd := c.Heads, c.KVHeads, c.HeadDim
	qd, kvd := hq*hd, hkv*hd
	act := &acts[T]{}
	if keep {
		act.layers = make([]layerAct[T], c.Layers)
	}
	x := p.alloc(n * D)
	d.Embed(x, w.Embed, p.ints(tokens), D)
	attScale := T(1 / math.Sqrt(float64(hd)))
	// Without keep, one set of buffers serves every layer and the residual stream is
	// updated in place.
	var s layerAct[T]
	buffers := func() {
		s.h1, s.rstd1 = p.alloc(n*D), p.alloc(n)
		s.q, s.k, s.v, s.o = p.alloc(n*qd), p.alloc(n*kvd), p.alloc(n*kvd), p.alloc(n*qd)
		s.h2, s.rstd2 = p.alloc(n*D), p.alloc(n)
		s.g, s.u, s.a = p.alloc(n*I), p.alloc(n*I), p.alloc(n*I)
	}
	var attn, mlp device.Tensor[T]
	if !keep {
		buffers()
		attn = p.alloc(n * D)
		mlp = attn
	}
	for l := 0; l < c.Layers; l++ {
		L := &w.Layers[l]
		a := &s
		if keep {
			a = &act.layers[l]
			s = layerAct[T]{}
			buffers()
			*a = s
			attn, mlp = p.alloc(n*D), p.alloc(n*D)
		}
		a.x = x
		d.RMSNorm(a.h1, a.rstd1, x, L.AttnNorm, n, D, c.RMSNormEps)
		p.linears(p.all, a.h1, D, linOut[T]{a.q, L.Wq, L.Bq, lp(l, ProjQ), qd, &a.zq},
			linOut[T]{a.k, L.Wk, L.Bk, lp(l, ProjK), kvd, &a.zk}, linOut[T]{a.v, L.Wv, L.Bv, lp(l, ProjV), kvd, &a.zv})
		d.Rope(a.q, p.pos, hq, p.rope, false)
		d.Rope(a.k, p.pos, hkv, p.rope, false)
		// Causal attention within each sequence, or over its cache after this step's keys
		// and values joined it.
		at := device.Attn[T]{Q: a.q, Out: a.o, K: a.k, V: a.v, Heads: hq, KVHeads: hkv, HeadDim: hd, Scale: attScale, Layout: &p.lay}
		if p.pool != nil {
			at.K, at.V = p.pool.k[l], p.pool.v[l]
			d.KVWrite(at.K, a.k, p.slots, kvd)
			d.KVWrite(at.V, a.v, p.slots, kvd)
		}
		if keep {
			at.Stats = p.stats
			if p.stats {
				a.p = p.alloc(p.lay.StatsLen(hq))
			} else {
				a.p = p.alloc(p.lay.ProbLen(hq))
			}
			at.P = a.p
		}
		d.Attention(&at)
		a.zo = p.linear(p.all, attn, a.o, L.Wo, device.Tensor[T]{}, lp(l, ProjO), qd, D)
		if keep {
			a.x2 = p.alloc(n * D)
		} else {
			a.x2 = x
		}
		d.Add(a.x2, x, attn)
		d.RMSNorm(a.h2, a.rstd2, a.x2, L.MLPNorm, n, D, c.RMSNormEps)
		p.linears(p.all, a.h2, D, linOut[T]{a.g, L.Wgate, device.Tensor[T]{}, lp(l, ProjGate), I, &a.zg},
			linOut[T]{a.u, L.Wup, device.Tensor[T]{}, lp(l, ProjUp), I, &a.zu})
		d.SwiGLU(a.a, a.g, a.u)
		a.zd = p.linear(p.all, mlp, a.a, L.Wdown, device.Tensor[T]{}, lp(l, ProjDown), I, D)
		if keep {
			x = p.alloc(n * D)
		}
		d.Add(x, a.x2, mlp)
	}
	act.xf = x
	if lmRows != nil && len(lmRows) == 0 {
		return act // a prefill chunk that asks for no logits
	}
	act.hf, act.rstdf = p.alloc(n*D), p.alloc(n)
	d.RMSNorm(act.hf, act.rstdf, x, w.FinalNorm, n, D, c.RMSNormEps)
	V := c.VocabSize
	h, rs := act.hf, p.all
	if lmRows != nil {
		// Only some rows need logits (the last of each sampled sequence): gather them, with
		// the LoRA runs they fall in.
		h = p.alloc(len(lmRows) * D)
		d.Embed(h, act.hf, p.ints(lmRows), D)
		rs = p.subset(lmRows)
	}
	act.logits = p.alloc(rs.rows * V)
	act.zlm = p.linear(rs, act.logits, h, w.LMHead, device.Tensor[T]{}, proj{lm: true}, D, V)
	return act
}

// subset is the row set of the given rows of the pass (ascending), renumbered from 0.
func (p *pass[T]) subset(rows []int32) rowSet[T] {
	rs := rowSet[T]{rows: len(rows)}
	for i, r := range rows {
		for _, run := range p.all.runs {
			if int(r) < run.start || int(r) >= run.start+run.n {
				continue
			}
			if k := len(rs.runs) - 1; k >= 0 && rs.runs[k].lw == run.lw && rs.runs[k].start+rs.runs[k].n == i {
				rs.runs[k].n++
			} else {
				rs.runs = append(rs.runs, loraRun[T]{start: i, n: 1, lw: run.lw, grad: run.grad})
			}
		}
	}
	return rs
}

// backward accumulates LoRA gradients given dhf (rows × D), the gradient of the loss
// with respect to the final norm's output (the loss head's, losshead.go).
func (p *pass[T]) backward(act *acts[T], dhf device.Tensor[T]) {
	c, d, w := p.c, p.d, p.w
	n, D, I := p.all.rows, c.Hidden, c.Intermediate
	hq, hkv, hd := c.Heads, c.KVHeads, c.HeadDim
	qd, kvd := hq*hd, hkv*hd
	attScale := T(1 / math.Sqrt(float64(hd)))
	dx := p.alloc(n * D)
	d.RMSNormBack(dx, dhf, act.xf, w.FinalNorm, act.rstdf, n, D)
	for l := c.Layers - 1; l >= 0; l-- {
		L := &w.Layers[l]
		a := &act.layers[l]
		// MLP: x = x2 + down(a); dx flows to x2 directly and through the MLP.
		dA := p.temp(n * I)
		p.linearBack(dA, dx, a.a, L.Wdown, lp(l, ProjDown), a.zd, I, D)
		dg, du := p.temp(n*I), p.temp(n*I)
		d.SwiGLUBack(dg, du, dA, a.g, a.u)
		dh2 := p.temp(n * D)
		p.linearBack(dh2, dg, a.h2, L.Wgate, lp(l, ProjGate), a.zg, D, I)
		p.linearBack(dh2, du, a.h2, L.Wup, lp(l, ProjUp), a.zu, D, I)
		dx2 := dx // the residual path
		d.RMSNormBack(dx2, dh2, a.x2, L.MLPNorm, a.rstd2, n, D)
		// Attention: x2 = x + o_proj(attn).
		do := p.temp(n * qd)
		p.linearBack(do, dx2, a.o, L.Wo, lp(l, ProjO), a.zo, qd, D)
		dq, dk, dv := p.temp(n*qd), p.temp(n*kvd), p.temp(n*kvd)
		at := device.Attn[T]{Q: a.q, K: a.k, V: a.v, Heads: hq, KVHeads: hkv, HeadDim: hd, Scale: attScale, Layout: &p.lay, P: a.p, Stats: p.stats}
		d.AttentionBack(&at, dq, dk, dv, do)
		d.Rope(dq, p.pos, hq, p.rope, true)
		d.Rope(dk, p.pos, hkv, p.rope, true)
		// Embeddings are frozen: below layer 0's projections nothing needs dx.
		var dh1 device.Tensor[T]
		if l > 0 {
			dh1 = p.temp(n * D)
		}
		p.linearBack(dh1, dq, a.h1, L.Wq, lp(l, ProjQ), a.zq, D, qd)
		p.linearBack(dh1, dk, a.h1, L.Wk, lp(l, ProjK), a.zk, D, kvd)
		p.linearBack(dh1, dv, a.h1, L.Wv, lp(l, ProjV), a.zv, D, kvd)
		if l > 0 {
			d.RMSNormBack(dx2, dh1, a.x, L.AttnNorm, a.rstd1, n, D)
		}
		for _, t := range []device.Tensor[T]{dA, dg, du, dh2, do, dq, dk, dv, dh1} {
			if !t.Empty() {
				p.free(t)
			}
		}
		dx = dx2
	}
}
