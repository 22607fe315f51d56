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
	// headNorm: the loss head reads the final norm's output (acts.hf), so forward
	// computes it (fused with the last residual add) though it is asked for no logits.
	headNorm bool
}

// newPass lays out the segments; slots[i] is row i's KV-cache slot when they have caches
// (all of them, from one pool, or none).
func newPass[T kern.Float](c Config, d device.Device[T], w *devWeights[T], rope *device.Rope, segs []segment[T], slots []int32) *pass[T] {
	return newPassTables(c, d, w, rope, segs, slots, 0)
}

// newPassTables is newPass with the block tables padded with zeros to tabCap entries
// (a decode step's graph uploads the same sizes every step).
func newPassTables[T kern.Float](c Config, d device.Device[T], w *devWeights[T], rope *device.Rope, segs []segment[T], slots []int32, tabCap int) *pass[T] {
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
		if pad := tabCap - len(p.lay.Tables); pad > 0 {
			p.lay.Tables = append(p.lay.Tables, make([]int32, pad)...)
		}
		p.lay.Tab = p.ints(p.lay.Tables)
	}
	p.lay.Desc = p.ints(p.lay.Pack())
	return p
}

// alloc returns n zeroed elements that live until release.
func (p *pass[T]) alloc(n int) device.Tensor[T] {
	if p.recycle {
		return p.hostAlloc(n, false)
	}
	return p.devAlloc(n)
}

// allocOut is alloc for an output its producer writes whole before anything reads it (a
// product without accumulation, a norm, attention, SwiGLU): a recycled buffer is not
// cleared first. arenaPoison checks that every such producer does write it whole.
func (p *pass[T]) allocOut(n int) device.Tensor[T] {
	if p.recycle {
		return p.hostAlloc(n, true)
	}
	return p.devAlloc(n)
}

func (p *pass[T]) devAlloc(n int) device.Tensor[T] {
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

// tempOut is temp for a gradient its producer writes whole (allocOut).
func (p *pass[T]) tempOut(n int) device.Tensor[T] {
	if p.recycle {
		return device.Host(arenaGetRaw[T](n))
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
//
// Each residual add is fused with the norm that reads its sum (device.AddRMSNorm): the
// attention block's with the MLP norm, the MLP block's with the next layer's attention
// norm or the final norm. On a device with bfloat16 operands (device.BF16Operands) the
// norms, attention and SwiGLU write the bfloat16 operand of the base products that read
// their output, into one buffer that each of them overwrites in turn (the products that
// read one are queued before the next is written); the float32 output exists only where
// a LoRA term reads it, since adapters stay float32.
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
	x := p.allocOut(n * D)
	d.Embed(x, w.Embed, p.ints(tokens), D)
	attScale := T(1 / math.Sqrt(float64(hd)))
	var opnd device.Tensor[T]
	if bo, ok := d.(device.BF16Operands[T]); ok {
		// Freed when forward returns: the products that read it are queued by then.
		if opnd = bo.AllocBF16(n * max(D, qd, I)); !opnd.Empty() {
			defer d.Free(opnd)
		}
	}
	// out is an output of width columns that base products read (see above).
	out := func(width int, prs ...Proj) device.Tensor[T] {
		if opnd.Empty() {
			return p.allocOut(n * width)
		}
		b := opnd.Slice(0, n*width)
		if !p.adapts(prs...) {
			return b
		}
		return p.allocOut(n * width).WithBF16(b)
	}
	// Without keep, one set of buffers serves every layer and the residual stream is
	// updated in place. The outputs of the o and down projections are added to the
	// residual stream at once, so one buffer (delta) serves both in every layer.
	var s layerAct[T]
	norm1 := func() { s.h1, s.rstd1 = out(D, ProjQ, ProjK, ProjV), p.allocOut(n) }
	buffers := func() {
		s.q, s.k, s.v, s.o = p.allocOut(n*qd), p.allocOut(n*kvd), p.allocOut(n*kvd), out(qd, ProjO)
		s.h2, s.rstd2 = out(D, ProjGate, ProjUp), p.allocOut(n)
		s.g, s.u, s.a = p.allocOut(n*I), p.allocOut(n*I), out(I, ProjDown)
	}
	delta := p.allocOut(n * D)
	if !keep {
		norm1()
		buffers()
	}
	final := lmRows == nil || len(lmRows) > 0 || p.headNorm
	for l := 0; l < c.Layers; l++ {
		L := &w.Layers[l]
		a := &s
		if keep {
			// h1 and rstd1 are set when the previous layer's last add wrote them.
			a = &act.layers[l]
			s = *a
			if l == 0 {
				norm1()
			}
			buffers()
			*a = s
		}
		a.x = x
		if l == 0 {
			d.RMSNorm(a.h1, a.rstd1, x, L.AttnNorm, n, D, c.RMSNormEps)
		}
		p.linears(p.all, a.h1, D, linOut[T]{a.q, L.Wq, L.Bq, lp(l, ProjQ), qd, &a.zq},
			linOut[T]{a.k, L.Wk, L.Bk, lp(l, ProjK), kvd, &a.zk}, linOut[T]{a.v, L.Wv, L.Bv, lp(l, ProjV), kvd, &a.zv})
		// Causal attention within each sequence, or over its cache after this step's keys
		// and values joined it (rotated and written in one call).
		at := device.Attn[T]{Q: a.q, Out: a.o, K: a.k, V: a.v, Heads: hq, KVHeads: hkv, HeadDim: hd, Scale: attScale, Layout: &p.lay}
		if p.pool != nil {
			at.K, at.V = p.pool.k[l], p.pool.v[l]
			d.RopeQKV(a.q, a.k, a.v, at.K, at.V, p.pos, p.slots, hq, hkv, p.rope)
		} else {
			d.RopeQK(a.q, a.k, p.pos, hq, hkv, p.rope, false)
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
		a.zo = p.linear(p.all, delta, a.o, L.Wo, device.Tensor[T]{}, lp(l, ProjO), qd, D)
		if keep {
			a.x2 = p.allocOut(n * D)
		} else {
			a.x2 = x
		}
		d.AddRMSNorm(a.x2, a.h2, a.rstd2, x, delta, L.MLPNorm, n, D, c.RMSNormEps)
		p.linears(p.all, a.h2, D, linOut[T]{a.g, L.Wgate, device.Tensor[T]{}, lp(l, ProjGate), I, &a.zg},
			linOut[T]{a.u, L.Wup, device.Tensor[T]{}, lp(l, ProjUp), I, &a.zu})
		d.SwiGLU(a.a, a.g, a.u)
		a.zd = p.linear(p.all, delta, a.a, L.Wdown, device.Tensor[T]{}, lp(l, ProjDown), I, D)
		if keep {
			x = p.allocOut(n * D)
		}
		// The sum is the next layer's input (its attention norm's output with it), or
		// the final norm's.
		switch {
		case l+1 < c.Layers:
			next := &s
			if keep {
				next = &act.layers[l+1]
				s = layerAct[T]{}
				norm1()
				next.h1, next.rstd1 = s.h1, s.rstd1
			}
			d.AddRMSNorm(x, next.h1, next.rstd1, a.x2, delta, w.Layers[l+1].AttnNorm, n, D, c.RMSNormEps)
		case final:
			act.hf, act.rstdf = p.allocOut(n*D), p.allocOut(n)
			d.AddRMSNorm(x, act.hf, act.rstdf, a.x2, delta, w.FinalNorm, n, D, c.RMSNormEps)
		default:
			d.Add(x, a.x2, delta)
		}
	}
	act.xf = x
	if !final {
		return act // a prefill chunk that asks for no logits
	}
	if c.Layers == 0 {
		act.hf, act.rstdf = p.alloc(n*D), p.alloc(n)
		d.RMSNorm(act.hf, act.rstdf, x, w.FinalNorm, n, D, c.RMSNormEps)
	}
	if lmRows != nil && len(lmRows) == 0 {
		return act // the loss head's rows (headNorm): it reads act.hf
	}
	V := c.VocabSize
	h, rs := act.hf, p.all
	if lmRows != nil {
		// Only some rows need logits (the last of each sampled sequence): gather them, with
		// the LoRA runs they fall in.
		h = p.allocOut(len(lmRows) * D)
		d.Embed(h, act.hf, p.ints(lmRows), D)
		rs = p.subset(lmRows)
	}
	act.logits = p.allocOut(rs.rows * V)
	act.zlm = p.linear(rs, act.logits, h, w.LMHead, device.Tensor[T]{}, proj{lm: true}, D, V)
	return act
}

// al rounds an element offset into a bfloat16 buffer up to 128 elements (256 bytes).
func al(n int) int { return (n + 127) &^ 127 }

// adapts reports whether a LoRA run of the pass adapts one of the projections prs in some
// layer: their input is then needed in float32 (forward.out).
func (p *pass[T]) adapts(prs ...Proj) bool {
	for _, r := range p.all.runs {
		for l := 0; l < p.c.Layers; l++ {
			for _, pr := range prs {
				if r.lw.pair(lp(l, pr)) != nil {
					return true
				}
			}
		}
	}
	return false
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
	// The gradients that input-gradient products read get bfloat16 operands where the
	// device takes them (device.BF16Operands), written by the operations that produce
	// them: the residual stream's (RMSNormBack), dg and du (SwiGLUBack), dq and dk
	// (RopeQK), dv (AttentionBack). gx holds the residual's; gr dg and du, then dq, dk
	// and dv.
	var gx, gr device.Tensor[T]
	if bo, ok := d.(device.BF16Operands[T]); ok {
		if gx = bo.AllocBF16(n * D); !gx.Empty() {
			gr = bo.AllocBF16(max(al(n*I)+n*I, al(al(n*qd)+n*kvd)+n*kvd))
			defer func() {
				d.Free(gx)
				d.Free(gr)
			}()
		}
	}
	// grad attaches rows×width elements of the operand buffer b from element off to t;
	// the offsets are rounded up to 128 elements (al), so every operand starts 256-byte
	// aligned as an allocation does (cuBLAS picks its kernels by the operands' alignment).
	grad := func(t, b device.Tensor[T], off, width int) device.Tensor[T] {
		if b.Empty() {
			return t
		}
		return t.WithBF16(b.Slice(off, off+n*width))
	}
	dx := grad(p.alloc(n*D), gx, 0, D) // RMSNormBack adds to it
	d.RMSNormBack(dx, dhf, act.xf, w.FinalNorm, act.rstdf, n, D)
	for l := c.Layers - 1; l >= 0; l-- {
		L := &w.Layers[l]
		a := &act.layers[l]
		// MLP: x = x2 + down(a); dx flows to x2 directly and through the MLP.
		dA := p.tempOut(n * I)
		p.linearBack(dA, dx, a.a, L.Wdown, lp(l, ProjDown), a.zd, I, D, false)
		dg, du := grad(p.tempOut(n*I), gr, 0, I), grad(p.tempOut(n*I), gr, al(n*I), I)
		d.SwiGLUBack(dg, du, dA, a.g, a.u)
		dh2 := p.tempOut(n * D)
		p.linearBack(dh2, dg, a.h2, L.Wgate, lp(l, ProjGate), a.zg, D, I, false)
		p.linearBack(dh2, du, a.h2, L.Wup, lp(l, ProjUp), a.zu, D, I, true)
		dx2 := dx // the residual path
		d.RMSNormBack(dx2, dh2, a.x2, L.MLPNorm, a.rstd2, n, D)
		// Attention: x2 = x + o_proj(attn).
		do := p.tempOut(n * qd)
		p.linearBack(do, dx2, a.o, L.Wo, lp(l, ProjO), a.zo, qd, D, false)
		dq, dk, dv := grad(p.tempOut(n*qd), gr, 0, qd), grad(p.tempOut(n*kvd), gr, al(n*qd), kvd), grad(p.tempOut(n*kvd), gr, al(al(n*qd)+n*kvd), kvd)
		at := device.Attn[T]{Q: a.q, K: a.k, V: a.v, Heads: hq, KVHeads: hkv, HeadDim: hd, Scale: attScale, Layout: &p.lay, P: a.p, Stats: p.stats}
		if p.adapts(ProjO) {
			at.Out = a.o // kept in float32 for o's LoRA term: Σ dO∘O spares a sweep (AttentionBack)
		}
		d.AttentionBack(&at, dq, dk, dv, do)
		d.RopeQK(dq, dk, p.pos, hq, hkv, p.rope, true)
		// Embeddings are frozen: below layer 0's projections nothing needs dx.
		var dh1 device.Tensor[T]
		if l > 0 {
			dh1 = p.tempOut(n * D)
		}
		p.linearBack(dh1, dq, a.h1, L.Wq, lp(l, ProjQ), a.zq, D, qd, false)
		p.linearBack(dh1, dk, a.h1, L.Wk, lp(l, ProjK), a.zk, D, kvd, true)
		p.linearBack(dh1, dv, a.h1, L.Wv, lp(l, ProjV), a.zv, D, kvd, true)
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
