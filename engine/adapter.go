package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/tuft-go/tuft/engine/kern"
)

// Adapter is one LoRA adapter with its gradients and AdamW state. The caller runs one
// operation on an adapter at a time.
type Adapter struct {
	Config LoraConfig
	W      LoraWeights[float32] // parameters
	Grad   LoraWeights[float32] // accumulated gradients (zeroed by OptimStep)
	M, V   LoraWeights[float32] // AdamW moments
	Step   int64                // optimizer steps taken
}

// projDims returns (in, out) of a layer projection.
func projDims(c Config, p Proj) (int, int) {
	D, I, q, kv := c.Hidden, c.Intermediate, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	switch p {
	case ProjQ:
		return D, q
	case ProjK, ProjV:
		return D, kv
	case ProjO:
		return q, D
	case ProjGate, ProjUp:
		return D, I
	}
	return I, D // down
}

// targets reports which projections an adapter config trains.
func targets(cfg LoraConfig) [NumLayerProj]bool {
	var t [NumLayerProj]bool
	for p := Proj(0); p < NumLayerProj; p++ {
		switch p {
		case ProjQ, ProjK, ProjV, ProjO:
			t[p] = cfg.TrainAttn
		default:
			t[p] = cfg.TrainMLP
		}
	}
	return t
}

// zeroLike allocates an adapter-shaped set of zero tensors.
func zeroLike(c Config, cfg LoraConfig) LoraWeights[float32] {
	lw := LoraWeights[float32]{Rank: cfg.Rank, Layers: make([][NumLayerProj]*LoraPair[float32], c.Layers)}
	t := targets(cfg)
	r := cfg.Rank
	for l := range lw.Layers {
		for p := Proj(0); p < NumLayerProj; p++ {
			if t[p] {
				in, out := projDims(c, p)
				lw.Layers[l][p] = &LoraPair[float32]{In: in, Out: out, A: make([]float32, r*in), B: make([]float32, out*r)}
			}
		}
	}
	if cfg.TrainUnembed {
		lw.LMHead = &LoraPair[float32]{In: c.Hidden, Out: c.VocabSize, A: make([]float32, r*c.Hidden), B: make([]float32, c.VocabSize*r)}
	}
	return lw
}

func (lw *LoraWeights[T]) pairs() []*LoraPair[T] {
	var out []*LoraPair[T]
	for l := range lw.Layers {
		for p := Proj(0); p < NumLayerProj; p++ {
			if lw.Layers[l][p] != nil {
				out = append(out, lw.Layers[l][p])
			}
		}
	}
	if lw.LMHead != nil {
		out = append(out, lw.LMHead)
	}
	return out
}

// NewAdapter creates an adapter initialised as PEFT does: A Kaiming-uniform(a=√5), that is
// U(−1/√in, 1/√in), from a generator seeded by cfg.Seed; B zero.
func (m *Model) NewAdapter(cfg LoraConfig) (*Adapter, error) {
	if cfg.Rank < 1 {
		return nil, Inputf("lora rank %d must be at least 1", cfg.Rank)
	}
	if !cfg.TrainAttn && !cfg.TrainMLP && !cfg.TrainUnembed {
		return nil, Inputf("lora config trains nothing: set train_attn, train_mlp or train_unembed")
	}
	if cfg.Alpha == 0 {
		cfg.Alpha = float64(cfg.Rank)
	}
	a := &Adapter{Config: cfg, W: zeroLike(m.Cfg, cfg), Grad: zeroLike(m.Cfg, cfg), M: zeroLike(m.Cfg, cfg), V: zeroLike(m.Cfg, cfg)}
	a.W.Scale = float32(cfg.Alpha / float64(cfg.Rank))
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6c6f7261))
	for _, p := range a.W.pairs() {
		bound := 1 / math.Sqrt(float64(p.In))
		for i := range p.A {
			p.A[i] = float32((2*rng.Float64() - 1) * bound)
		}
	}
	return a, nil
}

// seqRope caches RoPE tables per model.
var ropeCache sync.Map // *Model → *ropeTables

func (m *Model) rope() *ropeTables {
	if rt, ok := ropeCache.Load(m); ok {
		return rt.(*ropeTables)
	}
	rt := newRope(m.Cfg, m.Cfg.MaxPositions)
	ropeCache.Store(m, rt)
	return rt
}

// ForwardBackward runs forward (and, with req.Backward, backward) over the datums,
// accumulating gradients into a. a nil adapter is the base model (forward only). Inputs
// are validated before any gradient is touched.
func (m *Model) ForwardBackward(ctx context.Context, a *Adapter, req ForwardRequest) (ForwardResult, error) {
	var lw, grad *LoraWeights[float32]
	if a != nil {
		lw = &a.W
		if req.Backward {
			grad = &a.Grad
		}
	} else if req.Backward {
		return ForwardResult{}, Inputf("forward_backward needs a LoRA adapter: the base model is frozen")
	}
	return forwardBackward(ctx, m.Cfg, m.W, m.rope(), lw, grad, req)
}

func forwardBackward[T kern.Float](ctx context.Context, c Config, w *Weights[T], rope *ropeTables, lw, grad *LoraWeights[T], req ForwardRequest) (ForwardResult, error) {
	spec, cfg, err := resolveLoss(req.LossFn, req.LossFnConfig)
	if err != nil {
		return ForwardResult{}, err
	}
	if len(req.Data) == 0 {
		return ForwardResult{}, Inputf("data is empty")
	}
	ks := make([]int, len(req.Data))
	for i, d := range req.Data {
		if ks[i], err = validateDatum(i, d, spec, c); err != nil {
			return ForwardResult{}, err
		}
	}
	sm := &seqModel[T]{c: c, w: w, lw: lw, grad: grad, rope: rope}
	if lw != nil {
		sm.scale = lw.Scale
	}
	// Gradients go into a scratch copy first, so a cancelled call adds nothing.
	var scratch *LoraWeights[T]
	if grad != nil {
		s := zeroLoraLike(grad)
		scratch = &s
		sm.grad = scratch
	}
	res := ForwardResult{Metrics: map[string]float64{}}
	var total float64
	V := c.VocabSize
	for i, d := range req.Data {
		if err := ctx.Err(); err != nil {
			return ForwardResult{}, err
		}
		n, k := len(d.Tokens), ks[i]
		act := sm.forward(d.Tokens, grad != nil)
		tt := d.LossInputs["target_tokens"].I64
		lp := make([]float64, n*k)
		out := make([]float32, n*k)
		for j := range lp {
			lp[j] = float64(act.logp[(j/k)*V+int(tt[j])])
			out[j] = float32(lp[j])
		}
		loss, dlp := datumLoss(req.LossFn, cfg, lp, d.LossInputs)
		total += loss
		shape := []int{n}
		if k > 1 {
			shape = []int{n, k}
		}
		res.Outputs = append(res.Outputs, map[string]Tensor{"logprobs": {DType: Float32, Shape: shape, F32: out}})
		res.Tokens += n
		if grad != nil {
			// dL/dlogits = Σ_k dL/dlp_k · (onehot(target_k) − softmax).
			dl := make([]T, n*V)
			for r := 0; r < n; r++ {
				var sum float64
				for kk := 0; kk < k; kk++ {
					sum += dlp[r*k+kk]
				}
				if sum == 0 {
					nonzero := false
					for kk := 0; kk < k; kk++ {
						nonzero = nonzero || dlp[r*k+kk] != 0
					}
					if !nonzero {
						continue
					}
				}
				row := dl[r*V : r*V+V]
				lrow := act.logp[r*V : r*V+V]
				for v := range row {
					row[v] = T(-sum * math.Exp(float64(lrow[v])))
				}
				for kk := 0; kk < k; kk++ {
					row[tt[r*k+kk]] += T(dlp[r*k+kk])
				}
			}
			sm.backward(act, dl)
		}
	}
	if grad != nil {
		if err := ctx.Err(); err != nil {
			return ForwardResult{}, err
		}
		addLora(grad, scratch)
	}
	res.Metrics["loss:sum"] = total
	return res, nil
}

func zeroLoraLike[T kern.Float](lw *LoraWeights[T]) LoraWeights[T] {
	out := LoraWeights[T]{Rank: lw.Rank, Scale: lw.Scale, Layers: make([][NumLayerProj]*LoraPair[T], len(lw.Layers))}
	for l := range lw.Layers {
		for p := Proj(0); p < NumLayerProj; p++ {
			if q := lw.Layers[l][p]; q != nil {
				out.Layers[l][p] = &LoraPair[T]{In: q.In, Out: q.Out, A: make([]T, len(q.A)), B: make([]T, len(q.B))}
			}
		}
	}
	if q := lw.LMHead; q != nil {
		out.LMHead = &LoraPair[T]{In: q.In, Out: q.Out, A: make([]T, len(q.A)), B: make([]T, len(q.B))}
	}
	return out
}

func addLora[T kern.Float](dst, src *LoraWeights[T]) {
	d, s := dst.pairs(), src.pairs()
	for i := range d {
		kern.Axpy(1, s[i].A, d[i].A)
		kern.Axpy(1, s[i].B, d[i].B)
	}
}

// OptimStep applies one AdamW step (torch.optim.AdamW semantics, with optional global
// gradient-norm clipping as torch.nn.utils.clip_grad_norm_) and zeroes the gradients.
func (m *Model) OptimStep(ctx context.Context, a *Adapter, p AdamParams) (map[string]float64, error) {
	switch {
	case a == nil:
		return nil, Inputf("optim_step needs an adapter")
	case p.LearningRate < 0 || math.IsNaN(p.LearningRate):
		return nil, Inputf("adam_params.learning_rate %g must be ≥ 0", p.LearningRate)
	case p.Beta1 < 0 || p.Beta1 >= 1:
		return nil, Inputf("adam_params.beta1 %g must be in [0, 1)", p.Beta1)
	case p.Beta2 < 0 || p.Beta2 >= 1:
		return nil, Inputf("adam_params.beta2 %g must be in [0, 1)", p.Beta2)
	case p.Eps <= 0:
		return nil, Inputf("adam_params.eps %g must be > 0", p.Eps)
	case p.WeightDecay < 0:
		return nil, Inputf("adam_params.weight_decay %g must be ≥ 0", p.WeightDecay)
	case p.GradClipNorm < 0:
		return nil, Inputf("adam_params.grad_clip_norm %g must be ≥ 0", p.GradClipNorm)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	gp, wp, mp, vp := a.Grad.pairs(), a.W.pairs(), a.M.pairs(), a.V.pairs()
	var sq float64
	for _, g := range gp {
		for _, v := range g.A {
			sq += float64(v) * float64(v)
		}
		for _, v := range g.B {
			sq += float64(v) * float64(v)
		}
	}
	norm := math.Sqrt(sq)
	clip := float32(1)
	if p.GradClipNorm > 0 {
		if coef := p.GradClipNorm / (norm + 1e-6); coef < 1 {
			clip = float32(coef)
		}
	}
	a.Step++
	t := float64(a.Step)
	b1, b2 := float32(p.Beta1), float32(p.Beta2)
	bc1 := 1 - math.Pow(p.Beta1, t)
	bc2 := 1 - math.Pow(p.Beta2, t)
	lr := float32(p.LearningRate)
	decay := float32(1 - p.LearningRate*p.WeightDecay)
	stepSize := float32(p.LearningRate / bc1)
	bc2Sqrt := float32(math.Sqrt(bc2))
	eps := float32(p.Eps)
	update := func(w, g, mm, vv []float32) {
		for i := range w {
			gi := g[i] * clip
			w[i] *= decay
			mm[i] = b1*mm[i] + (1-b1)*gi
			vv[i] = b2*vv[i] + (1-b2)*gi*gi
			denom := float32(math.Sqrt(float64(vv[i])))/bc2Sqrt + eps
			w[i] -= stepSize * mm[i] / denom
			g[i] = 0
		}
	}
	for i := range wp {
		update(wp[i].A, gp[i].A, mp[i].A, vp[i].A)
		update(wp[i].B, gp[i].B, mp[i].B, vp[i].B)
	}
	_ = lr
	return map[string]float64{"grad_norm:max": norm, "learning_rate:max": p.LearningRate}, nil
}
