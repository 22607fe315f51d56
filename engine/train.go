package engine

import (
	"math"

	"github.com/tuft-go/tuft/engine/kern"
)

// segment is one sequence of a packed batch: rows [start, start+n) and the adapter it
// runs with (lw nil: the base model; grad nil: no gradients).
type segment[T kern.Float] struct {
	start, n int
	lw, grad *LoraWeights[T]
	scale    T
}

// seqModel is everything one forward/backward pass reads: frozen weights, RoPE tables and
// the packed sequences. Every projection multiplies the rows of all sequences by the
// base weight in one product (one pass over the weights, however many adapters); the
// LoRA terms and attention are per sequence.
type seqModel[T kern.Float] struct {
	c    Config
	w    *Weights[T]
	rope *ropeTables
	segs []segment[T]
	rows int
}

func newSeqModel[T kern.Float](c Config, w *Weights[T], rope *ropeTables, segs []segment[T]) *seqModel[T] {
	sm := &seqModel[T]{c: c, w: w, rope: rope, segs: segs}
	for _, sg := range segs {
		sm.rows += sg.n
	}
	return sm
}

// singleSeq is a seqModel over one sequence of n tokens.
func singleSeq[T kern.Float](c Config, w *Weights[T], rope *ropeTables, lw, grad *LoraWeights[T], n int) *seqModel[T] {
	sg := segment[T]{n: n, lw: lw, grad: grad}
	if lw != nil {
		sg.scale = lw.Scale
	}
	return newSeqModel(c, w, rope, []segment[T]{sg})
}

// proj names one LoRA target: a layer's projection, or the unembedding (lm).
type proj struct {
	l  int
	p  Proj
	lm bool
}

// loraPair returns the adapter's pair for pr, nil when lw is nil or does not train it.
func loraPair[T kern.Float](lw *LoraWeights[T], pr proj) *LoraPair[T] {
	if lw == nil {
		return nil
	}
	if pr.lm {
		return lw.LMHead
	}
	if lw.Layers == nil {
		return nil
	}
	return lw.Layers[pr.l][pr.p]
}

// linear computes y = x·Wᵀ (+b) for all rows, then adds each sequence's LoRA term; it
// returns the per-sequence zs = scale·x·Aᵀ that backward needs (nil without LoRA).
func (s *seqModel[T]) linear(y, x, w, b []T, pr proj, in, out int) [][]T {
	kern.MatMulNT(y, x, w, s.rows, out, in, false)
	if b != nil {
		for r := 0; r < s.rows; r++ {
			kern.Axpy(1, b, y[r*out:r*out+out])
		}
	}
	var zs [][]T
	for i, sg := range s.segs {
		lp := loraPair(sg.lw, pr)
		if lp == nil {
			continue
		}
		if zs == nil {
			zs = make([][]T, len(s.segs))
		}
		zs[i] = loraF(y[sg.start*out:(sg.start+sg.n)*out], x[sg.start*in:(sg.start+sg.n)*in], lp, sg.scale, sg.n, in, out)
	}
	return zs
}

// linearBack accumulates each sequence's LoRA gradients and adds dL/dx to dx (nil: not
// needed), the base weight's share in one product over all rows.
func (s *seqModel[T]) linearBack(dx, dy, x, w []T, pr proj, zs [][]T, in, out int) {
	for i, sg := range s.segs {
		lp := loraPair(sg.lw, pr)
		if lp == nil {
			continue
		}
		var dxs []T
		if dx != nil {
			dxs = dx[sg.start*in : (sg.start+sg.n)*in]
		}
		loraB(dxs, dy[sg.start*out:(sg.start+sg.n)*out], x[sg.start*in:(sg.start+sg.n)*in], lp, loraPair(sg.grad, pr), zs[i], sg.scale, sg.n, in, out)
	}
	if dx != nil {
		kern.MatMulNN(dx, dy, w, s.rows, in, out, true)
	}
}

// linearF computes y = x·Wᵀ (+b) + scale·(x·Aᵀ)·Bᵀ for rows of x (one adapter); it
// returns zs = scale·x·Aᵀ (nil without LoRA).
func linearF[T kern.Float](y, x, w, b []T, lp *LoraPair[T], scale T, rows, in, out int) []T {
	kern.MatMulNT(y, x, w, rows, out, in, false)
	if b != nil {
		for r := 0; r < rows; r++ {
			kern.Axpy(1, b, y[r*out:r*out+out])
		}
	}
	if lp == nil {
		return nil
	}
	return loraF(y, x, lp, scale, rows, in, out)
}

// loraF adds scale·(x·Aᵀ)·Bᵀ to y and returns zs = scale·x·Aᵀ.
func loraF[T kern.Float](y, x []T, lp *LoraPair[T], scale T, rows, in, out int) []T {
	rank := len(lp.A) / in
	zs := make([]T, rows*rank)
	kern.MatMulNT(zs, x, lp.A, rows, rank, in, false)
	for i := range zs {
		zs[i] *= scale
	}
	kern.MatMulNT(y, zs, lp.B, rows, out, rank, true)
	return zs
}

// loraB is the LoRA half of a linear layer's backward: it accumulates the gradients of
// A and B into g (nil: frozen) and adds the LoRA path's dL/dx to dx (nil: not needed).
func loraB[T kern.Float](dx, dy, x []T, lp, g *LoraPair[T], zs []T, scale T, rows, in, out int) {
	if g == nil && dx == nil {
		return
	}
	rank := len(lp.A) / in
	if g != nil {
		kern.MatMulTN(g.B, dy, zs, out, rank, rows, true)
	}
	dz := make([]T, rows*rank)
	kern.MatMulNN(dz, dy, lp.B, rows, rank, out, false)
	for i := range dz {
		dz[i] *= scale
	}
	if g != nil {
		kern.MatMulTN(g.A, dz, x, rank, in, rows, true)
	}
	if dx != nil {
		kern.MatMulNN(dx, dz, lp.A, rows, in, rank, true)
	}
}

type layerAct[T kern.Float] struct {
	x, h1, rstd1   []T
	zq, zk, zv, zo [][]T // per sequence
	q, k, v, o     []T
	p              [][]T // attention probabilities, per sequence: heads × n × n
	x2, h2, rstd2  []T
	zg, zu, zd     [][]T
	g, u, a        []T
}

// seqAct are the saved activations of a packed batch.
type seqAct[T kern.Float] struct {
	n      int // rows of all sequences
	layers []layerAct[T]
	xf     []T // input of the final norm
	hf     []T
	rstdf  []T
	zlm    [][]T
	logp   []T // log-softmax, n × V
}

func lp(l int, p Proj) proj { return proj{l: l, p: p} }

// forward runs the model over the packed sequences (tokens: all of them, in segment
// order), keeping what backward needs when keep.
func (s *seqModel[T]) forward(tokens []int32, keep bool) *seqAct[T] {
	c := s.c
	n, D, I := len(tokens), c.Hidden, c.Intermediate
	if n != s.rows {
		panic("engine: forward over a token count that is not the segments' total")
	}
	hq, hkv, hd := c.Heads, c.KVHeads, c.HeadDim
	qd, kvd := hq*hd, hkv*hd
	act := &seqAct[T]{n: n, layers: make([]layerAct[T], c.Layers)}
	x := make([]T, n*D)
	for i, t := range tokens {
		copy(x[i*D:(i+1)*D], s.w.Embed[int(t)*D:int(t)*D+D])
	}
	attScale := T(1 / math.Sqrt(float64(hd)))
	group := hq / hkv
	for l := 0; l < c.Layers; l++ {
		L := &s.w.Layers[l]
		a := &act.layers[l]
		a.x = x
		a.h1 = make([]T, n*D)
		a.rstd1 = rmsNorm(a.h1, x, L.AttnNorm, n, D, c.RMSNormEps)
		a.q, a.k, a.v = make([]T, n*qd), make([]T, n*kvd), make([]T, n*kvd)
		a.zq = s.linear(a.q, a.h1, L.Wq, L.Bq, lp(l, ProjQ), D, qd)
		a.zk = s.linear(a.k, a.h1, L.Wk, L.Bk, lp(l, ProjK), D, kvd)
		a.zv = s.linear(a.v, a.h1, L.Wv, L.Bv, lp(l, ProjV), D, kvd)
		a.p = make([][]T, len(s.segs))
		for i, sg := range s.segs {
			ropeApply(s.rope, a.q[sg.start*qd:(sg.start+sg.n)*qd], sg.n, hq, 0, false)
			ropeApply(s.rope, a.k[sg.start*kvd:(sg.start+sg.n)*kvd], sg.n, hkv, 0, false)
			a.p[i] = make([]T, hq*sg.n*sg.n)
		}
		a.o = make([]T, n*qd)
		// Causal attention within each sequence, in parallel over (sequence, head).
		parallel(len(s.segs)*hq, func(job int) {
			sg, h := s.segs[job/hq], job%hq
			sn, p := sg.n, a.p[job/hq]
			q, k, v, o := a.q[sg.start*qd:], a.k[sg.start*kvd:], a.v[sg.start*kvd:], a.o[sg.start*qd:]
			kh := h / group
			for i := 0; i < sn; i++ {
				qi := q[i*qd+h*hd : i*qd+h*hd+hd]
				pr := p[(h*sn+i)*sn : (h*sn+i)*sn+sn]
				m := math.Inf(-1)
				for j := 0; j <= i; j++ {
					sc := kern.Dot(qi, k[j*kvd+kh*hd:j*kvd+kh*hd+hd]) * attScale
					pr[j] = sc
					if float64(sc) > m {
						m = float64(sc)
					}
				}
				var sum float64
				for j := 0; j <= i; j++ {
					e := math.Exp(float64(pr[j]) - m)
					pr[j] = T(e)
					sum += e
				}
				oi := o[i*qd+h*hd : i*qd+h*hd+hd]
				for j := 0; j <= i; j++ {
					pr[j] = T(float64(pr[j]) / sum)
					kern.Axpy(pr[j], v[j*kvd+kh*hd:j*kvd+kh*hd+hd], oi)
				}
			}
		})
		attn := make([]T, n*D)
		a.zo = s.linear(attn, a.o, L.Wo, nil, lp(l, ProjO), qd, D)
		x2 := make([]T, n*D)
		for i := range x2 {
			x2[i] = x[i] + attn[i]
		}
		a.x2 = x2
		a.h2 = make([]T, n*D)
		a.rstd2 = rmsNorm(a.h2, x2, L.MLPNorm, n, D, c.RMSNormEps)
		a.g, a.u = make([]T, n*I), make([]T, n*I)
		a.zg = s.linear(a.g, a.h2, L.Wgate, nil, lp(l, ProjGate), D, I)
		a.zu = s.linear(a.u, a.h2, L.Wup, nil, lp(l, ProjUp), D, I)
		a.a = make([]T, n*I)
		for i := range a.a {
			a.a[i] = T(silu(float64(a.g[i]))) * a.u[i]
		}
		mlp := make([]T, n*D)
		a.zd = s.linear(mlp, a.a, L.Wdown, nil, lp(l, ProjDown), I, D)
		x = make([]T, n*D)
		for i := range x {
			x[i] = x2[i] + mlp[i]
		}
		if !keep {
			act.layers[l] = layerAct[T]{}
		}
	}
	act.xf = x
	act.hf = make([]T, n*D)
	act.rstdf = rmsNorm(act.hf, x, s.w.FinalNorm, n, D, c.RMSNormEps)
	V := c.VocabSize
	act.logp = make([]T, n*V)
	act.zlm = s.linear(act.logp, act.hf, s.w.LMHead, nil, proj{lm: true}, D, V)
	parallel(n, func(i int) { logSoftmaxRow(act.logp[i*V:i*V+V], act.logp[i*V:i*V+V]) })
	return act
}

// backward accumulates LoRA gradients given dlogits (rows × V), the gradient of the
// loss with respect to the logits.
func (s *seqModel[T]) backward(act *seqAct[T], dlogits []T) {
	c := s.c
	n, D, I, V := act.n, c.Hidden, c.Intermediate, c.VocabSize
	hq, hkv, hd := c.Heads, c.KVHeads, c.HeadDim
	qd, kvd := hq*hd, hkv*hd
	group := hq / hkv
	attScale := T(1 / math.Sqrt(float64(hd)))
	dhf := make([]T, n*D)
	s.linearBack(dhf, dlogits, act.hf, s.w.LMHead, proj{lm: true}, act.zlm, D, V)
	dx := make([]T, n*D)
	rmsNormBack(dx, dhf, act.xf, s.w.FinalNorm, act.rstdf, n, D)
	for l := c.Layers - 1; l >= 0; l-- {
		L := &s.w.Layers[l]
		a := &act.layers[l]
		// MLP: x = x2 + down(a); dx flows to x2 directly and through the MLP.
		dA := make([]T, n*I)
		s.linearBack(dA, dx, a.a, L.Wdown, lp(l, ProjDown), a.zd, I, D)
		dg, du := make([]T, n*I), make([]T, n*I)
		for i := range dA {
			g := float64(a.g[i])
			sg := 1 / (1 + math.Exp(-g))
			du[i] = dA[i] * T(g*sg)
			dg[i] = dA[i] * a.u[i] * T(sg*(1+g*(1-sg)))
		}
		dh2 := make([]T, n*D)
		s.linearBack(dh2, dg, a.h2, L.Wgate, lp(l, ProjGate), a.zg, D, I)
		s.linearBack(dh2, du, a.h2, L.Wup, lp(l, ProjUp), a.zu, D, I)
		dx2 := dx // the residual path
		rmsNormBack(dx2, dh2, a.x2, L.MLPNorm, a.rstd2, n, D)
		// Attention: x2 = x + o_proj(attn).
		do := make([]T, n*qd)
		s.linearBack(do, dx2, a.o, L.Wo, lp(l, ProjO), a.zo, qd, D)
		dq, dk, dv := make([]T, n*qd), make([]T, n*kvd), make([]T, n*kvd)
		// Heads sharing a KV head write the same dk/dv rows, so parallelise by
		// (sequence, KV head).
		parallel(len(s.segs)*hkv, func(job int) {
			seg, kh := s.segs[job/hkv], job%hkv
			sn, P := seg.n, a.p[job/hkv]
			q, k, v := a.q[seg.start*qd:], a.k[seg.start*kvd:], a.v[seg.start*kvd:]
			dos, dqs, dks, dvs := do[seg.start*qd:], dq[seg.start*qd:], dk[seg.start*kvd:], dv[seg.start*kvd:]
			dp := make([]T, sn)
			for h := kh * group; h < (kh+1)*group; h++ {
				for i := 0; i < sn; i++ {
					pr := P[(h*sn+i)*sn : (h*sn+i)*sn+sn]
					doi := dos[i*qd+h*hd : i*qd+h*hd+hd]
					var rowDot T
					for j := 0; j <= i; j++ {
						dp[j] = kern.Dot(doi, v[j*kvd+kh*hd:j*kvd+kh*hd+hd])
						rowDot += dp[j] * pr[j]
						kern.Axpy(pr[j], doi, dvs[j*kvd+kh*hd:j*kvd+kh*hd+hd])
					}
					qi := q[i*qd+h*hd : i*qd+h*hd+hd]
					dqi := dqs[i*qd+h*hd : i*qd+h*hd+hd]
					for j := 0; j <= i; j++ {
						ds := pr[j] * (dp[j] - rowDot) * attScale
						kern.Axpy(ds, k[j*kvd+kh*hd:j*kvd+kh*hd+hd], dqi)
						kern.Axpy(ds, qi, dks[j*kvd+kh*hd:j*kvd+kh*hd+hd])
					}
				}
			}
		})
		for _, sg := range s.segs {
			ropeApply(s.rope, dq[sg.start*qd:(sg.start+sg.n)*qd], sg.n, hq, 0, true)
			ropeApply(s.rope, dk[sg.start*kvd:(sg.start+sg.n)*kvd], sg.n, hkv, 0, true)
		}
		dh1 := make([]T, n*D)
		s.linearBack(dh1, dq, a.h1, L.Wq, lp(l, ProjQ), a.zq, D, qd)
		s.linearBack(dh1, dk, a.h1, L.Wk, lp(l, ProjK), a.zk, D, kvd)
		s.linearBack(dh1, dv, a.h1, L.Wv, lp(l, ProjV), a.zv, D, kvd)
		if l == 0 {
			break // embeddings are frozen: nothing below needs dx
		}
		rmsNormBack(dx2, dh1, a.x, L.AttnNorm, a.rstd1, n, D)
		dx = dx2
	}
}
