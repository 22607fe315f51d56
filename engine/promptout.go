package engine

import (
	"math"
	"math/rand/v2"
)

// This file computes the prompt-position outputs of a sample request that newer Tinker
// SDKs ask for (target_prompt_logprobs and prompt_alt_tokens_k) in the decode steps that
// prefill its prompt, whole or in chunks, so that Sample and an iteration-level
// scheduler produce the same numbers.

// altStream is the PCG stream of a request's alternative prompt-token draws: apart from
// the samples' streams, so asking for alternatives does not change the samples.
const altStream = 0x5851f42d4c957f2d

// PromptPlan says what a sample request's prompt prefill computes besides the prompt
// itself: per chunk of prompt positions, the target ids to score and the alternative
// tokens to draw, and where their results go.
type PromptPlan struct {
	req SampleRequest
	u   []float64 // the alternative draws' variates, row-major (nil at temperature 0)
}

// NewPromptPlan prepares req's prompt outputs; seed is the request's (as for its samples).
// The variates of the alternative draws are fixed here, so a prompt computed again (after
// a preemption) or in other chunks draws the same tokens.
func NewPromptPlan(req SampleRequest, seed uint64) *PromptPlan {
	p := &PromptPlan{req: req}
	if k := req.PromptAltTokensK; k > 0 && req.Params.Temperature > 0 && len(req.Prompt) > 1 {
		rng := rand.New(rand.NewPCG(seed, altStream))
		p.u = make([]float64, (len(req.Prompt)-1)*k)
		for i := range p.u {
			p.u[i] = rng.Float64()
		}
	}
	return p
}

// Active reports whether the request asks for any of these outputs.
func (p *PromptPlan) Active() bool {
	return p.req.PromptTargets != nil || p.req.PromptAltTokensK > 0
}

// FirstPos is the first prompt position whose next-token distribution the outputs need
// (len(Prompt) when none): positions before it may come from a prefix cache.
func (p *PromptPlan) FirstPos() int {
	first := len(p.req.Prompt)
	if p.req.PromptAltTokensK > 0 {
		first = 0
	}
	if t := p.req.PromptTargets; t != nil {
		first = min(first, t.FirstRow())
	}
	return first
}

// Init allocates the outputs in res.
func (p *PromptPlan) Init(res *SampleResult) {
	if t := p.req.PromptTargets; t != nil {
		res.PromptTargetLogprobs = &PromptTargetLogprobs{Rows: t.Rows, Cols: t.Cols, Logprobs: make([]float32, len(t.IDs)),
			RowStarts: t.RowStarts, ColIdx: t.ColIdx}
	}
	if k := p.req.PromptAltTokensK; k > 0 {
		rows := max(0, len(p.req.Prompt)-1)
		res.PromptAltTokens = &PromptAltTokens{K: k, Tokens: make([]int32, rows*k), Logprobs: make([]float32, rows*k)}
	}
}

// Step fills a prefill step's TargetSets and PositionDraws for the n prompt tokens at
// positions pos0… (row pos0+j of the outputs is computed from the token at pos0+j).
func (p *PromptPlan) Step(ss *StepSeq, pos0, n int) {
	rows := len(p.req.Prompt) - 1
	if t := p.req.PromptTargets; t != nil {
		ss.TargetSets = make([][]int32, n)
		for j := range n {
			if r := pos0 + j; r < rows {
				lo, hi := t.Span(r)
				ss.TargetSets[j] = t.IDs[lo:hi]
			}
		}
	}
	if k := p.req.PromptAltTokensK; k > 0 {
		ss.PositionDraws = make([][]Draw, n)
		pr := p.req.Params
		for j := range n {
			r := pos0 + j
			if r >= rows {
				continue
			}
			ds := make([]Draw, k)
			for x := range ds {
				ds[x] = Draw{Temperature: pr.Temperature, TopK: pr.TopK, TopP: pr.TopP}
				if p.u != nil {
					ds[x].U = p.u[r*k+x]
				}
			}
			ss.PositionDraws[j] = ds
		}
	}
}

// Apply takes a prefill step's results for the prompt tokens at positions pos0… into res.
func (p *PromptPlan) Apply(res *SampleResult, pos0 int, out StepOut) {
	rows := len(p.req.Prompt) - 1
	if t, o := p.req.PromptTargets, res.PromptTargetLogprobs; t != nil && o != nil {
		for j, lps := range out.TargetSetLogprobs {
			r := pos0 + j
			if r >= rows {
				continue
			}
			lo, _ := t.Span(r)
			for x, lp := range lps {
				if math.IsNaN(float64(lp)) { // an id of -1: nothing asked
					lp = 0
				}
				o.Logprobs[lo+x] = lp
			}
		}
	}
	if a := res.PromptAltTokens; a != nil {
		k := a.K
		for j, toks := range out.PositionTokens {
			r := pos0 + j
			if r >= rows || toks == nil {
				continue
			}
			copy(a.Tokens[r*k:(r+1)*k], toks)
			copy(a.Logprobs[r*k:(r+1)*k], out.PositionLogprobs[j])
		}
	}
}
