package engine

import (
	"math"

	"github.com/tuft-go/tuft/engine/kern"
)

// seqModel is everything one forward/backward pass reads: frozen weights, the adapter
// (nil: base model), the gradients to accumulate into (nil: no backward) and RoPE tables.
type seqModel[T kern.Float] struct {
	c     Config
	w     *Weights[T]
	lw    *LoraWeights[T]
	grad  *LoraWeights[T]
	rope  *ropeTables
	scale T
}

func (s *seqModel[T]) pair(l int, p Proj) (*LoraPair[T], *LoraPair[T]) {
	if s.lw == nil || s.lw.Layers == nil {
		return nil, nil
	}
	lp := s.lw.Layers[l][p]
	var g *LoraPair[T]
	if s.grad != nil && lp != nil {
		g = s.grad.Layers[l][p]
	}
	return lp, g
}

// linearF computes y = x·Wᵀ (+b) + scale·(x·Aᵀ)·Bᵀ for rows of x; it returns zs =
// scale·x·Aᵀ for the backward pass (nil without LoRA).
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
	rank := len(lp.A) / in
	zs := make([]T, rows*rank)
	kern.MatMulNT(zs, x, lp.A, rows, rank, in, false)
	for i := range zs {
		zs[i] *= scale
	}
	kern.MatMulNT(y, zs, lp.B, rows, out, rank, true)
	return zs
}

// linearB accumulates the LoRA gradients of y = linearF(x) and adds dL/dx to dx.
func linearB[T kern.Float](dx, dy, x, w []T, lp, g *LoraPair[T], zs []T, scale T, rows, in, out int) {
	if lp != nil && g != nil {
		rank := len(lp.A) / in
		kern.MatMulTN(g.B, dy, zs, out, rank, rows, true)
		dz := make([]T, rows*rank)
		kern.MatMulNN(dz, dy, lp.B, rows, rank, out, false)
		for i := range dz {
			dz[i] *= scale
		}
		kern.MatMulTN(g.A, dz, x, rank, in, rows, true)
		if dx != nil {
			kern.MatMulNN(dx, dz, lp.A, rows, in, rank, true)
		}
	} else if lp != nil && dx != nil {
		rank := len(lp.A) / in
		dz := make([]T, rows*rank)
		kern.MatMulNN(dz, dy, lp.B, rows, rank, out, false)
		for i := range dz {
			dz[i] *= scale
		}
		kern.MatMulNN(dx, dz, lp.A, rows, in, rank, true)
	}
	if dx != nil {
		kern.MatMulNN(dx, dy, w, rows, in, out, true)
	}
}

type layerAct[T kern.Float] struct {
	x, h1, rstd1        []T
	zq, zk, zv, zo      []T
	q, k, v, p, o       []T
	x2, h2, rstd2       []T
	zg, zu, zd, g, u, a []T
}

// seqAct are one sequence's saved activations.
type seqAct[T kern.Float] struct {
	n      int
	layers []layerAct[T]
	xf     []T // input of the final norm
	hf     []T
	rstdf  []T
	zlm    []T
	logp   []T // log-softmax, n × V
}

// forward runs the model over one sequence, keeping what backward needs when keep.
func (s *seqModel[T]) forward(tokens []int32, keep bool) *seqAct[T] {
	c := s.c
	n, D, I := len(tokens), c.Hidden, c.Intermediate
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
		lq, _ := s.pair(l, ProjQ)
		lk, _ := s.pair(l, ProjK)
		lv, _ := s.pair(l, ProjV)
		a.zq = linearF(a.q, a.h1, L.Wq, L.Bq, lq, s.scale, n, D, qd)
		a.zk = linearF(a.k, a.h1, L.Wk, L.Bk, lk, s.scale, n, D, kvd)
		a.zv = linearF(a.v, a.h1, L.Wv, L.Bv, lv, s.scale, n, D, kvd)
		ropeApply(s.rope, a.q, n, hq, 0, false)
		ropeApply(s.rope, a.k, n, hkv, 0, false)
		a.p = make([]T, hq*n*n)
		a.o = make([]T, n*qd)
		parallel(hq, func(h int) {
			kh := h / group
			for i := 0; i < n; i++ {
				qi := a.q[i*qd+h*hd : i*qd+h*hd+hd]
				pr := a.p[(h*n+i)*n : (h*n+i)*n+n]
				m := math.Inf(-1)
				for j := 0; j <= i; j++ {
					sc := kern.Dot(qi, a.k[j*kvd+kh*hd:j*kvd+kh*hd+hd]) * attScale
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
				oi := a.o[i*qd+h*hd : i*qd+h*hd+hd]
				for j := 0; j <= i; j++ {
					pr[j] = T(float64(pr[j]) / sum)
					kern.Axpy(pr[j], a.v[j*kvd+kh*hd:j*kvd+kh*hd+hd], oi)
				}
			}
		})
		attn := make([]T, n*D)
		lo, _ := s.pair(l, ProjO)
		a.zo = linearF(attn, a.o, L.Wo, nil, lo, s.scale, n, qd, D)
		x2 := make([]T, n*D)
		for i := range x2 {
			x2[i] = x[i] + attn[i]
		}
		a.x2 = x2
		a.h2 = make([]T, n*D)
		a.rstd2 = rmsNorm(a.h2, x2, L.MLPNorm, n, D, c.RMSNormEps)
		a.g, a.u = make([]T, n*I), make([]T, n*I)
		lg, _ := s.pair(l, ProjGate)
		lu, _ := s.pair(l, ProjUp)
		a.zg = linearF(a.g, a.h2, L.Wgate, nil, lg, s.scale, n, D, I)
		a.zu = linearF(a.u, a.h2, L.Wup, nil, lu, s.scale, n, D, I)
		a.a = make([]T, n*I)
		for i := range a.a {
			a.a[i] = T(silu(float64(a.g[i]))) * a.u[i]
		}
		mlp := make([]T, n*D)
		ld, _ := s.pair(l, ProjDown)
		a.zd = linearF(mlp, a.a, L.Wdown, nil, ld, s.scale, n, I, D)
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
	var lm *LoraPair[T]
	if s.lw != nil {
		lm = s.lw.LMHead
	}
	act.zlm = linearF(act.logp, act.hf, s.w.LMHead, nil, lm, s.scale, n, D, V)
	parallel(n, func(i int) { logSoftmaxRow(act.logp[i*V:i*V+V], act.logp[i*V:i*V+V]) })
	return act
}

// backward accumulates LoRA gradients given dlogp[i][t] = dL/dlogit... expressed as
// dlogits (n × V), the gradient of the loss with respect to the logits.
func (s *seqModel[T]) backward(act *seqAct[T], dlogits []T) {
	c := s.c
	n, D, I, V := act.n, c.Hidden, c.Intermediate, c.VocabSize
	hq, hkv, hd := c.Heads, c.KVHeads, c.HeadDim
	qd, kvd := hq*hd, hkv*hd
	group := hq / hkv
	attScale := T(1 / math.Sqrt(float64(hd)))
	dhf := make([]T, n*D)
	var lm, glm *LoraPair[T]
	if s.lw != nil {
		lm = s.lw.LMHead
		if s.grad != nil {
			glm = s.grad.LMHead
		}
	}
	linearB(dhf, dlogits, act.hf, s.w.LMHead, lm, glm, act.zlm, s.scale, n, D, V)
	dx := make([]T, n*D)
	rmsNormBack(dx, dhf, act.xf, s.w.FinalNorm, act.rstdf, n, D)
	for l := c.Layers - 1; l >= 0; l-- {
		L := &s.w.Layers[l]
		a := &act.layers[l]
		// MLP: x = x2 + down(a); dx flows to x2 directly and through the MLP.
		dA := make([]T, n*I)
		ld, gd := s.pair(l, ProjDown)
		linearB(dA, dx, a.a, L.Wdown, ld, gd, a.zd, s.scale, n, I, D)
		dg, du := make([]T, n*I), make([]T, n*I)
		for i := range dA {
			g := float64(a.g[i])
			sg := 1 / (1 + math.Exp(-g))
			du[i] = dA[i] * T(g*sg)
			dg[i] = dA[i] * a.u[i] * T(sg*(1+g*(1-sg)))
		}
		dh2 := make([]T, n*D)
		lg, gg := s.pair(l, ProjGate)
		lu, gu := s.pair(l, ProjUp)
		linearB(dh2, dg, a.h2, L.Wgate, lg, gg, a.zg, s.scale, n, D, I)
		linearB(dh2, du, a.h2, L.Wup, lu, gu, a.zu, s.scale, n, D, I)
		dx2 := dx // the residual path
		rmsNormBack(dx2, dh2, a.x2, L.MLPNorm, a.rstd2, n, D)
		// Attention: x2 = x + o_proj(attn).
		do := make([]T, n*qd)
		lo, gor := s.pair(l, ProjO)
		linearB(do, dx2, a.o, L.Wo, lo, gor, a.zo, s.scale, n, qd, D)
		dq, dk, dv := make([]T, n*qd), make([]T, n*kvd), make([]T, n*kvd)
		// Heads sharing a KV head write the same dk/dv rows, so parallelise by KV head.
		parallel(hkv, func(kh int) {
			dp := make([]T, n)
			for h := kh * group; h < (kh+1)*group; h++ {
				for i := 0; i < n; i++ {
					pr := a.p[(h*n+i)*n : (h*n+i)*n+n]
					doi := do[i*qd+h*hd : i*qd+h*hd+hd]
					var rowDot T
					for j := 0; j <= i; j++ {
						dp[j] = kern.Dot(doi, a.v[j*kvd+kh*hd:j*kvd+kh*hd+hd])
						rowDot += dp[j] * pr[j]
						kern.Axpy(pr[j], doi, dv[j*kvd+kh*hd:j*kvd+kh*hd+hd])
					}
					qi := a.q[i*qd+h*hd : i*qd+h*hd+hd]
					dqi := dq[i*qd+h*hd : i*qd+h*hd+hd]
					for j := 0; j <= i; j++ {
						ds := pr[j] * (dp[j] - rowDot) * attScale
						kern.Axpy(ds, a.k[j*kvd+kh*hd:j*kvd+kh*hd+hd], dqi)
						kern.Axpy(ds, qi, dk[j*kvd+kh*hd:j*kvd+kh*hd+hd])
					}
				}
			}
		})
		ropeApply(s.rope, dq, n, hq, 0, true)
		ropeApply(s.rope, dk, n, hkv, 0, true)
		dh1 := make([]T, n*D)
		lq, gq := s.pair(l, ProjQ)
		lk, gk := s.pair(l, ProjK)
		lv, gv := s.pair(l, ProjV)
		linearB(dh1, dq, a.h1, L.Wq, lq, gq, a.zq, s.scale, n, D, qd)
		linearB(dh1, dk, a.h1, L.Wk, lk, gk, a.zk, s.scale, n, D, kvd)
		linearB(dh1, dv, a.h1, L.Wv, lv, gv, a.zv, s.scale, n, D, kvd)
		if l == 0 {
			break // embeddings are frozen: nothing below needs dx
		}
		rmsNormBack(dx2, dh1, a.x, L.AttnNorm, a.rstd1, n, D)
		dx = dx2
	}
}
