package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/tuft-go/tuft/engine/kern"
)

// SampleHooks report the phases of a sample request (for request tracing). Phases are
// "preprocess", "prefill", "decode" and "postprocess"; nil functions are skipped.
type SampleHooks struct {
	OnPhase      func(phase string, start bool)
	OnFirstToken func()
}

func (h SampleHooks) phase(name string, start bool) {
	if h.OnPhase != nil {
		h.OnPhase(name, start)
	}
}

// kvCache holds one sequence's keys and values per layer, [position][Hkv·hd].
type kvCache struct {
	k, v [][]float32
	n    int // positions filled
}

func newKVCache(c Config, capacity int) *kvCache {
	kvd := c.KVHeads * c.HeadDim
	kc := &kvCache{k: make([][]float32, c.Layers), v: make([][]float32, c.Layers)}
	for l := range kc.k {
		kc.k[l] = make([]float32, 0, capacity*kvd)
		kc.v[l] = make([]float32, 0, capacity*kvd)
	}
	return kc
}

func (kc *kvCache) clone() *kvCache {
	out := &kvCache{k: make([][]float32, len(kc.k)), v: make([][]float32, len(kc.v)), n: kc.n}
	for l := range kc.k {
		out.k[l] = append(make([]float32, 0, cap(kc.k[l])), kc.k[l]...)
		out.v[l] = append(make([]float32, 0, cap(kc.v[l])), kc.v[l]...)
	}
	return out
}

// inferRows runs rows through the model: row r is token toks[r] of sequence seqs[r] at
// position pos[r]; each row's keys and values are appended to its cache before attention,
// and row r attends to its cache up to and including pos[r]. It returns logits (rows×V).
func (m *Model) inferRows(lw *LoraWeights[float32], toks []int32, seqs []*kvCache, pos []int) []float32 {
	c := m.Cfg
	n, D, I, V := len(toks), c.Hidden, c.Intermediate, c.VocabSize
	hq, hkv, hd := c.Heads, c.KVHeads, c.HeadDim
	qd, kvd := hq*hd, hkv*hd
	group := hq / hkv
	rope := m.rope()
	var scale float32
	if lw != nil {
		scale = lw.Scale
	}
	pair := func(l int, p Proj) *LoraPair[float32] {
		if lw == nil || lw.Layers == nil {
			return nil
		}
		return lw.Layers[l][p]
	}
	x := make([]float32, n*D)
	for i, t := range toks {
		copy(x[i*D:(i+1)*D], m.W.Embed[int(t)*D:int(t)*D+D])
	}
	h := make([]float32, n*D)
	q, k, v := make([]float32, n*qd), make([]float32, n*kvd), make([]float32, n*kvd)
	o, tmp := make([]float32, n*qd), make([]float32, n*D)
	g, u := make([]float32, n*I), make([]float32, n*I)
	attScale := float32(1 / math.Sqrt(float64(hd)))
	for l := 0; l < c.Layers; l++ {
		L := &m.W.Layers[l]
		rmsNorm(h, x, L.AttnNorm, n, D, c.RMSNormEps)
		linearF(q, h, L.Wq, L.Bq, pair(l, ProjQ), scale, n, D, qd)
		linearF(k, h, L.Wk, L.Bk, pair(l, ProjK), scale, n, D, kvd)
		linearF(v, h, L.Wv, L.Bv, pair(l, ProjV), scale, n, D, kvd)
		for r := 0; r < n; r++ {
			ropeApply(rope, q[r*qd:(r+1)*qd], 1, hq, pos[r], false)
			ropeApply(rope, k[r*kvd:(r+1)*kvd], 1, hkv, pos[r], false)
			sc := seqs[r]
			sc.k[l] = append(sc.k[l], k[r*kvd:(r+1)*kvd]...)
			sc.v[l] = append(sc.v[l], v[r*kvd:(r+1)*kvd]...)
		}
		parallel(n*hq, func(idx int) {
			r, hh := idx/hq, idx%hq
			kh := hh / group
			sc := seqs[r]
			qi := q[r*qd+hh*hd : r*qd+hh*hd+hd]
			// The cache row of position p sits at index p (caches are filled in order).
			span := pos[r] + 1
			scores := make([]float64, span)
			mx := math.Inf(-1)
			for j := 0; j < span; j++ {
				s := float64(kern.Dot(qi, sc.k[l][j*kvd+kh*hd:j*kvd+kh*hd+hd]) * attScale)
				scores[j] = s
				mx = math.Max(mx, s)
			}
			var sum float64
			for j := range scores {
				scores[j] = math.Exp(scores[j] - mx)
				sum += scores[j]
			}
			oi := o[r*qd+hh*hd : r*qd+hh*hd+hd]
			clear(oi)
			for j := range scores {
				kern.Axpy(float32(scores[j]/sum), sc.v[l][j*kvd+kh*hd:j*kvd+kh*hd+hd], oi)
			}
		})
		linearF(tmp, o, L.Wo, nil, pair(l, ProjO), scale, n, qd, D)
		kern.Axpy(1, tmp, x)
		rmsNorm(h, x, L.MLPNorm, n, D, c.RMSNormEps)
		linearF(g, h, L.Wgate, nil, pair(l, ProjGate), scale, n, D, I)
		linearF(u, h, L.Wup, nil, pair(l, ProjUp), scale, n, D, I)
		for i := range g {
			g[i] = float32(silu(float64(g[i]))) * u[i]
		}
		linearF(tmp, g, L.Wdown, nil, pair(l, ProjDown), scale, n, I, D)
		kern.Axpy(1, tmp, x)
	}
	for _, sc := range seqs {
		sc.n = len(sc.k[0]) / kvd
	}
	rmsNorm(h, x, m.W.FinalNorm, n, D, c.RMSNormEps)
	logits := make([]float32, n*V)
	var lm *LoraPair[float32]
	if lw != nil {
		lm = lw.LMHead
	}
	linearF(logits, h, m.W.LMHead, nil, lm, scale, n, D, V)
	return logits
}

// Sample generates req.NumSamples continuations of req.Prompt with the adapter weights lw
// (nil: the base model).
func (m *Model) Sample(ctx context.Context, lw *LoraWeights[float32], req SampleRequest) (SampleResult, error) {
	return m.SampleWithHooks(ctx, lw, req, SampleHooks{})
}

// SampleWithHooks is Sample with phase callbacks.
//
// Semantics: logits are divided by the temperature, then top-k, then top-p truncate the
// distribution (HF's order), and a token is drawn from what remains (temperature 0:
// argmax). The returned logprob of a sampled token is under the temperature-scaled
// distribution before truncation (at temperature 0, under the unscaled one). Generation
// stops at an EOS token of the model (unless IgnoreEOS), a stop token, or when the decoded
// text contains a stop string; the stopping token is included. The same seed gives the same output.
func (m *Model) SampleWithHooks(ctx context.Context, lw *LoraWeights[float32], req SampleRequest, h SampleHooks) (SampleResult, error) {
	c := m.Cfg
	p := req.Params
	h.phase("preprocess", true)
	switch {
	case len(req.Prompt) == 0:
		return SampleResult{}, Inputf("prompt is empty")
	case req.NumSamples < 1 || req.NumSamples > 1024:
		return SampleResult{}, Inputf("num_samples %d must be in [1, 1024]", req.NumSamples)
	case p.MaxTokens < 1:
		return SampleResult{}, Inputf("max_tokens %d must be at least 1", p.MaxTokens)
	case p.Temperature < 0 || math.IsNaN(p.Temperature):
		return SampleResult{}, Inputf("temperature %g must be ≥ 0", p.Temperature)
	case p.TopP <= 0 || p.TopP > 1 || math.IsNaN(p.TopP):
		return SampleResult{}, Inputf("top_p %g must be in (0, 1]", p.TopP)
	case p.TopK < -1:
		return SampleResult{}, Inputf("top_k %d must be -1 (no limit) or positive", p.TopK)
	case req.TopKPromptLogprobs < 0 || req.TopKPromptLogprobs > 100:
		return SampleResult{}, Inputf("topk_prompt_logprobs %d must be in [0, 100]", req.TopKPromptLogprobs)
	case len(req.Prompt)+p.MaxTokens > c.MaxPositions:
		return SampleResult{}, Inputf("prompt of %d tokens plus max_tokens %d exceeds the model's %d positions", len(req.Prompt), p.MaxTokens, c.MaxPositions)
	}
	for i, t := range req.Prompt {
		if t < 0 || int(t) >= c.VocabSize {
			return SampleResult{}, Inputf("prompt token %d at position %d is outside the vocabulary [0, %d)", t, i, c.VocabSize)
		}
	}
	for _, t := range p.StopTokens {
		if t < 0 || int(t) >= c.VocabSize {
			return SampleResult{}, Inputf("stop token %d is outside the vocabulary [0, %d)", t, c.VocabSize)
		}
	}
	if len(p.StopStrings) > 0 && m.Tok == nil {
		return SampleResult{}, Inputf("stop strings need a tokenizer, and this model has none")
	}
	stopTok := map[int32]bool{}
	if !p.IgnoreEOS {
		for _, t := range c.EOSTokenIDs {
			stopTok[t] = true
		}
	}
	for _, t := range p.StopTokens {
		stopTok[t] = true
	}
	seed := uint64(rand.Int64())
	if p.Seed != nil {
		seed = uint64(*p.Seed)
	}
	res := SampleResult{PromptTokens: len(req.Prompt)}
	V := c.VocabSize
	if req.PromptLogprobs || req.TopKPromptLogprobs > 0 {
		act := singleSeq(c, m.W, m.rope(), lw, nil, len(req.Prompt)).forward(req.Prompt, false)
		n := len(req.Prompt)
		if req.PromptLogprobs {
			res.PromptLogprobs = make([]float32, n)
			res.PromptLogprobs[0] = float32(math.NaN())
			for i := 1; i < n; i++ {
				res.PromptLogprobs[i] = act.logp[(i-1)*V+int(req.Prompt[i])]
			}
		}
		if k := req.TopKPromptLogprobs; k > 0 {
			res.TopKPrompt = make([][]TokenLogprob, n)
			for i := 1; i < n; i++ {
				res.TopKPrompt[i] = topK(act.logp[(i-1)*V:i*V], k)
			}
		}
	}
	h.phase("preprocess", false)
	if err := ctx.Err(); err != nil {
		return SampleResult{}, err
	}

	h.phase("prefill", true)
	capacity := len(req.Prompt) + p.MaxTokens
	base := newKVCache(c, capacity)
	n := len(req.Prompt)
	prefSeqs := make([]*kvCache, n)
	pos := make([]int, n)
	for i := range pos {
		prefSeqs[i], pos[i] = base, i
	}
	logits := m.inferRows(lw, req.Prompt, prefSeqs, pos)
	last := logits[(n-1)*V : n*V]
	h.phase("prefill", false)

	h.phase("decode", true)
	type live struct {
		idx   int
		cache *kvCache
		rng   *rand.Rand
		text  strings.Builder
	}
	seqsOut := make([]Sequence, req.NumSamples)
	var act []*live
	rows := make([][]float32, req.NumSamples)
	for i := 0; i < req.NumSamples; i++ {
		act = append(act, &live{idx: i, cache: base.clone(), rng: rand.New(rand.NewPCG(seed, uint64(i)+0x9e3779b97f4a7c15))})
		rows[i] = last
	}
	first := true
	for step := 0; step < p.MaxTokens && len(act) > 0; step++ {
		if err := ctx.Err(); err != nil {
			return SampleResult{}, err
		}
		var next []*live
		var toks []int32
		var caches []*kvCache
		var positions []int
		for ai, s := range act {
			tok, lp := pick(rows[ai], p, s.rng)
			sq := &seqsOut[s.idx]
			sq.Tokens = append(sq.Tokens, tok)
			sq.Logprobs = append(sq.Logprobs, lp)
			if first {
				first = false
				if h.OnFirstToken != nil {
					h.OnFirstToken()
				}
			}
			stop := stopTok[tok]
			if !stop && len(p.StopStrings) > 0 {
				text := m.Tok.Decode(sq.Tokens)
				for _, ss := range p.StopStrings {
					if ss != "" && strings.Contains(text, ss) {
						stop = true
						break
					}
				}
			}
			switch {
			case stop:
				sq.StopReason = StopReasonStop
			case len(sq.Tokens) >= p.MaxTokens || n+len(sq.Tokens) >= c.MaxPositions:
				sq.StopReason = StopReasonLength
			default:
				next = append(next, s)
				toks = append(toks, tok)
				caches = append(caches, s.cache)
				positions = append(positions, n+len(sq.Tokens)-1)
			}
		}
		act = next
		if len(act) == 0 {
			break
		}
		lg := m.inferRows(lw, toks, caches, positions)
		rows = rows[:len(act)]
		for i := range act {
			rows[i] = lg[i*V : (i+1)*V]
		}
	}
	h.phase("decode", false)
	h.phase("postprocess", true)
	for i := range seqsOut {
		if seqsOut[i].StopReason == "" {
			seqsOut[i].StopReason = StopReasonLength
		}
		res.OutputTokens += len(seqsOut[i].Tokens)
	}
	res.Sequences = seqsOut
	h.phase("postprocess", false)
	return res, nil
}

// pick draws the next token from logits under p and returns it with its logprob.
func pick(logits []float32, p SampleParams, rng *rand.Rand) (int32, float32) {
	temp := p.Temperature
	if temp == 0 {
		temp = 1
	}
	V := len(logits)
	lp := make([]float64, V)
	mx := math.Inf(-1)
	for i, v := range logits {
		lp[i] = float64(v) / temp
		mx = math.Max(mx, lp[i])
	}
	var s float64
	for _, v := range lp {
		s += math.Exp(v - mx)
	}
	lse := mx + math.Log(s)
	for i := range lp {
		lp[i] -= lse
	}
	if p.Temperature == 0 {
		best := 0
		for i := range lp {
			if lp[i] > lp[best] {
				best = i
			}
		}
		return int32(best), float32(lp[best])
	}
	idx := make([]int, V)
	for i := range idx {
		idx[i] = i
	}
	limited := (p.TopK > 0 && p.TopK < V) || p.TopP < 1
	cand := idx
	if limited {
		sort.Slice(idx, func(a, b int) bool { return lp[idx[a]] > lp[idx[b]] || (lp[idx[a]] == lp[idx[b]] && idx[a] < idx[b]) })
		if p.TopK > 0 && p.TopK < V {
			cand = idx[:p.TopK]
		}
		if p.TopP < 1 {
			var tot float64
			for _, i := range cand {
				tot += math.Exp(lp[i])
			}
			var cum float64
			keep := len(cand)
			for j, i := range cand {
				cum += math.Exp(lp[i]) / tot
				if cum >= p.TopP {
					keep = j + 1
					break
				}
			}
			cand = cand[:keep]
		}
	}
	var tot float64
	for _, i := range cand {
		tot += math.Exp(lp[i])
	}
	r := rng.Float64() * tot
	for _, i := range cand {
		r -= math.Exp(lp[i])
		if r <= 0 {
			return int32(i), float32(lp[i])
		}
	}
	last := cand[len(cand)-1]
	return int32(last), float32(lp[last])
}

func topK(logp []float32, k int) []TokenLogprob {
	idx := make([]int, len(logp))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		return logp[idx[a]] > logp[idx[b]] || (logp[idx[a]] == logp[idx[b]] && idx[a] < idx[b])
	})
	if k > len(idx) {
		k = len(idx)
	}
	out := make([]TokenLogprob, k)
	for j := 0; j < k; j++ {
		out[j] = TokenLogprob{Token: int32(idx[j]), Logprob: logp[idx[j]]}
	}
	return out
}
