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
	res, errs := m.ForwardBackwardBatch(ctx, []BatchItem{{Adapter: a, Request: req}})
	return res[0], errs[0]
}

// BatchItem is one adapter's request in a multi-LoRA batch.
type BatchItem struct {
	Adapter *Adapter // nil: the base model (forward only)
	Request ForwardRequest
}

// ForwardBackwardBatch runs the requests of several adapters (or one adapter's several
// requests) together: their datums are packed so that each projection reads the shared
// base weights once for all of them, while LoRA terms, attention, losses and gradients
// stay per datum and per adapter. The results equal separate ForwardBackward calls. An
// invalid request fails alone (its error is in errs, nothing of it is applied); a
// cancelled context fails them all and applies no gradient.
func (m *Model) ForwardBackwardBatch(ctx context.Context, items []BatchItem) ([]ForwardResult, []error) {
	fb := make([]*fbItem[float32], len(items))
	for i, it := range items {
		fb[i] = &fbItem[float32]{req: it.Request}
		if a := it.Adapter; a != nil {
			fb[i].lw = &a.W
			if it.Request.Backward {
				fb[i].grad = &a.Grad
			}
		} else if it.Request.Backward {
			fb[i].err = Inputf("forward_backward needs a LoRA adapter: the base model is frozen")
		}
	}
	runBatch(ctx, m.Cfg, m.W, m.rope(), fb)
	res, errs := make([]ForwardResult, len(fb)), make([]error, len(fb))
	for i, it := range fb {
		res[i], errs[i] = it.res, it.err
	}
	return res, errs
}

// forwardBackward is the single-request form of runBatch (tests use it with float64).
func forwardBackward[T kern.Float](ctx context.Context, c Config, w *Weights[T], rope *ropeTables, lw, grad *LoraWeights[T], req ForwardRequest) (ForwardResult, error) {
	it := &fbItem[T]{lw: lw, grad: grad, req: req}
	runBatch(ctx, c, w, rope, []*fbItem[T]{it})
	return it.res, it.err
}

// fbItem is one request of a batch and what becomes of it.
type fbItem[T kern.Float] struct {
	lw, grad *LoraWeights[T]
	req      ForwardRequest
	spec     lossSpec
	cfg      map[string]float64
	ks       []int
	scratch  *LoraWeights[T] // gradients land here first: a failed call adds nothing
	total    float64
	res      ForwardResult
	err      error
}

// maxPackRows bounds the rows packed into one pass: the log-probabilities alone take
// rows × vocabulary floats.
const maxPackRows = 1024

type datumRef struct{ item, datum int }

func runBatch[T kern.Float](ctx context.Context, c Config, w *Weights[T], rope *ropeTables, items []*fbItem[T]) {
	var train, infer []datumRef
	for i, it := range items {
		if it.err != nil {
			continue
		}
		if it.err = it.validate(c); it.err != nil {
			continue
		}
		it.res = ForwardResult{Outputs: make([]map[string]Tensor, len(it.req.Data)), Metrics: map[string]float64{}}
		if it.grad != nil {
			s := zeroLoraLike(it.grad)
			it.scratch = &s
		}
		for d := range it.req.Data {
			if it.grad != nil {
				train = append(train, datumRef{i, d})
			} else {
				infer = append(infer, datumRef{i, d})
			}
		}
	}
	// Datums that need gradients and those that do not go in separate passes, so no
	// backward runs over rows that cannot use it.
	for _, refs := range [][]datumRef{train, infer} {
		for len(refs) > 0 {
			if err := ctx.Err(); err != nil {
				failAll(items, err)
				return
			}
			rows, k := 0, 0
			for k < len(refs) && (k == 0 || rows+len(items[refs[k].item].req.Data[refs[k].datum].Tokens) <= maxPackRows) {
				rows += len(items[refs[k].item].req.Data[refs[k].datum].Tokens)
				k++
			}
			runPack(c, w, rope, items, refs[:k])
			refs = refs[k:]
		}
	}
	if err := ctx.Err(); err != nil {
		failAll(items, err)
		return
	}
	for _, it := range items {
		if it.err != nil {
			continue
		}
		// Inputs within their ranges can still overflow together (an importance ratio
		// e^(new-old) past float64): such a result is refused and adds no gradient.
		if math.IsNaN(it.total) || math.IsInf(it.total, 0) || (it.scratch != nil && !finiteLora(it.scratch)) {
			it.err, it.res = Inputf("the loss of %s or its gradients are not finite (loss %g): the inputs overflowed them (e.g. logprobs far "+
				"below the model's, or weights grown huge); nothing was accumulated", it.req.LossFn, it.total), ForwardResult{}
			continue
		}
		if it.scratch != nil {
			addLora(it.grad, it.scratch)
		}
		it.res.Metrics["loss:sum"] = it.total
	}
}

// finiteLora reports whether every value of lw is finite.
func finiteLora[T kern.Float](lw *LoraWeights[T]) bool {
	for _, q := range lw.pairs() {
		for _, v := range q.A {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return false
			}
		}
		for _, v := range q.B {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return false
			}
		}
	}
	return true
}

func failAll[T kern.Float](items []*fbItem[T], err error) {
	for _, it := range items {
		if it.err == nil {
			it.err, it.res = err, ForwardResult{}
		}
	}
}

func (it *fbItem[T]) validate(c Config) error {
	spec, cfg, err := resolveLoss(it.req.LossFn, it.req.LossFnConfig)
	if err != nil {
		return err
	}
	if len(it.req.Data) == 0 {
		return Inputf("data is empty")
	}
	it.spec, it.cfg = spec, cfg
	it.ks = make([]int, len(it.req.Data))
	for i, d := range it.req.Data {
		if it.ks[i], err = validateDatum(i, d, spec, c); err != nil {
			return err
		}
	}
	return nil
}

// runPack runs forward (and backward where the datums' items train) over one pack.
func runPack[T kern.Float](c Config, w *Weights[T], rope *ropeTables, items []*fbItem[T], refs []datumRef) {
	segs := make([]segment[T], len(refs))
	var tokens []int32
	backward := false
	for i, r := range refs {
		it := items[r.item]
		d := it.req.Data[r.datum]
		segs[i] = segment[T]{start: len(tokens), n: len(d.Tokens), lw: it.lw, grad: it.scratch}
		if it.lw != nil {
			segs[i].scale = it.lw.Scale
		}
		backward = backward || it.scratch != nil
		tokens = append(tokens, d.Tokens...)
	}
	sm := newSeqModel(c, w, rope, segs)
	act := sm.forward(tokens, backward)
	V := c.VocabSize
	var dl []T
	if backward {
		dl = make([]T, len(tokens)*V)
	}
	for i, r := range refs {
		it := items[r.item]
		d := it.req.Data[r.datum]
		sg := segs[i]
		n, k := sg.n, it.ks[r.datum]
		logp := act.logp[sg.start*V : (sg.start+n)*V]
		tt := d.LossInputs["target_tokens"].I64
		lp := make([]float64, n*k)
		out := make([]float32, n*k)
		for j := range lp {
			lp[j] = float64(logp[(j/k)*V+int(tt[j])])
			out[j] = float32(lp[j])
		}
		loss, dlp := datumLoss(it.req.LossFn, it.cfg, lp, d.LossInputs)
		it.total += loss
		shape := []int{n}
		if k > 1 {
			shape = []int{n, k}
		}
		it.res.Outputs[r.datum] = map[string]Tensor{"logprobs": {DType: Float32, Shape: shape, F32: out}}
		it.res.Tokens += n
		if it.scratch == nil {
			continue
		}
		// dL/dlogits = Σ_k dL/dlp_k · (onehot(target_k) − softmax).
		drows := dl[sg.start*V : (sg.start+n)*V]
		for r := 0; r < n; r++ {
			var sum float64
			nonzero := false
			for kk := 0; kk < k; kk++ {
				sum += dlp[r*k+kk]
				nonzero = nonzero || dlp[r*k+kk] != 0
			}
			if !nonzero {
				continue
			}
			row := drows[r*V : r*V+V]
			lrow := logp[r*V : r*V+V]
			for v := range row {
				row[v] = T(-sum * math.Exp(float64(lrow[v])))
			}
			for kk := 0; kk < k; kk++ {
				row[tt[r*k+kk]] += T(dlp[r*k+kk])
			}
		}
	}
	if backward {
		sm.backward(act, dl)
	}
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
//
// It is all or nothing: if the gradients, or any updated weight or moment, would not be
// finite, nothing changes (the weights, the moments and the step count stay as they were)
// and the error says why. Non-finite gradients are then discarded, since no step could
// ever use them.
func (m *Model) OptimStep(ctx context.Context, a *Adapter, p AdamParams) (map[string]float64, error) {
	if a == nil {
		return nil, Inputf("optim_step needs an adapter")
	}
	if err := ValidateAdam(p); err != nil {
		return nil, err
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
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		for _, g := range gp {
			clear(g.A)
			clear(g.B)
		}
		return nil, Inputf("optim_step: the accumulated gradients are not finite (norm %g); nothing was applied and they were discarded: "+
			"run forward_backward again (lower the learning rate or check the loss inputs)", norm)
	}
	clip := float32(1)
	if p.GradClipNorm > 0 {
		if coef := p.GradClipNorm / (norm + 1e-6); coef < 1 {
			clip = float32(coef)
		}
	}
	t := float64(a.Step + 1)
	b1, b2 := float32(p.Beta1), float32(p.Beta2)
	bc1 := 1 - math.Pow(p.Beta1, t)
	bc2 := 1 - math.Pow(p.Beta2, t)
	lr := float32(p.LearningRate)
	decay := float32(1 - p.LearningRate*p.WeightDecay)
	stepSize := float32(p.LearningRate / bc1)
	bc2Sqrt := float32(math.Sqrt(bc2))
	eps := float32(p.Eps)
	// step computes element i's new weight and moments; the first pass only checks that
	// they are finite, the second (the same arithmetic) applies them.
	step := func(w, g, mm, vv []float32, i int) (float32, float32, float32) {
		gi := g[i] * clip
		mi := b1*mm[i] + (1-b1)*gi
		vi := b2*vv[i] + (1-b2)*gi*gi
		denom := float32(math.Sqrt(float64(vi)))/bc2Sqrt + eps
		return w[i]*decay - stepSize*mi/denom, mi, vi
	}
	for i := range wp {
		for _, x := range [][4][]float32{{wp[i].A, gp[i].A, mp[i].A, vp[i].A}, {wp[i].B, gp[i].B, mp[i].B, vp[i].B}} {
			for j := range x[0] {
				if w, mi, vi := step(x[0], x[1], x[2], x[3], j); !finite32(w) || !finite32(mi) || !finite32(vi) {
					return nil, Inputf("optim_step with learning_rate %g, weight_decay %g, eps %g would make the adapter's weights or moments non-finite; "+
						"nothing was applied (lower the learning rate or weight decay)", p.LearningRate, p.WeightDecay, p.Eps)
				}
			}
		}
	}
	for i := range wp {
		for _, x := range [][4][]float32{{wp[i].A, gp[i].A, mp[i].A, vp[i].A}, {wp[i].B, gp[i].B, mp[i].B, vp[i].B}} {
			for j := range x[0] {
				x[0][j], x[2][j], x[3][j] = step(x[0], x[1], x[2], x[3], j)
				x[1][j] = 0
			}
		}
	}
	a.Step++
	_ = lr
	return map[string]float64{"grad_norm:max": norm, "learning_rate:max": p.LearningRate}, nil
}

func finite32(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }

// Allowed ranges of AdamW's hyper-parameters: wide enough for any real schedule, narrow
// enough that none alone overflows float32 arithmetic (an eps below ~1e-38 is 0 in
// float32, and 0/0 is NaN).
const (
	maxLearningRate = 10
	minEps, maxEps  = 1e-20, 1
	maxWeightDecay  = 10
	maxGradClipNorm = 1e9
)

// ValidateAdam checks AdamW's hyper-parameters, naming the field and its allowed range,
// so a server can refuse them before queueing the step.
func ValidateAdam(p AdamParams) error {
	// Written as !(in range) so that NaN fails every check.
	switch {
	case !(p.LearningRate >= 0 && p.LearningRate <= maxLearningRate):
		return Inputf("adam_params.learning_rate %g must be in [0, %g]", p.LearningRate, float64(maxLearningRate))
	case !(p.Beta1 >= 0 && p.Beta1 < 1):
		return Inputf("adam_params.beta1 %g must be in [0, 1)", p.Beta1)
	case !(p.Beta2 >= 0 && p.Beta2 < 1):
		return Inputf("adam_params.beta2 %g must be in [0, 1)", p.Beta2)
	case !(p.Eps >= minEps && p.Eps <= maxEps):
		return Inputf("adam_params.eps %g must be in [%g, %g]", p.Eps, minEps, float64(maxEps))
	case !(p.WeightDecay >= 0 && p.WeightDecay <= maxWeightDecay):
		return Inputf("adam_params.weight_decay %g must be in [0, %g]", p.WeightDecay, float64(maxWeightDecay))
	case !(p.GradClipNorm >= 0 && p.GradClipNorm <= maxGradClipNorm):
		return Inputf("adam_params.grad_clip_norm %g must be in [0, %g]", p.GradClipNorm, float64(maxGradClipNorm))
	}
	return nil
}
