package engine

import (
	"math"
	"math/rand/v2"

	"github.com/tuft-go/tuft/engine/tokenizer"
)

// This file holds the rules of generating from a sample request, once: which tokens
// stop, the seed and each sample's random stream, how each token is drawn, when and why
// a sequence stops, and where prompt logprobs and top-k go. Sample (sampler.go) and an
// iteration-level scheduler (backend) both drive a Generation and decide only which
// decode steps run, so one request gives the same tokens and logprobs either way.

// sampleStream is the PCG stream of sample 0; sample i draws from sampleStream+i. The
// prompt's alternative tokens draw from altStream (promptout.go).
const sampleStream = 0x9e3779b97f4a7c15

// Generation is the state of one sample request's generation: per sample its random
// stream, its stop-string automaton state and text, and the result as it grows. It does
// not run decode steps: the caller builds each StepSeq with PromptStep and Draws, runs
// it, and hands the outputs back with ApplyPrompt and Accept. Not safe for concurrent use.
type Generation struct {
	req       SampleRequest
	maxPos    int
	stopTok   map[int32]bool
	stops     *StopMatcher // nil without stop strings
	text      TextCodec
	rngs      []*rand.Rand
	top       int // top logprobs asked of every draw (streaming and sequences' top-k)
	streamTop int // of them, those in each TokenEvent
	plan      *PromptPlan
	seqs      []genSeq
	res       SampleResult
}

// genSeq is one sample's stop-string state.
type genSeq struct {
	stop StopState
	text *tokenizer.Stream // the sample's text for stop strings; nil until its first token
}

// NewGeneration checks req against the model and prepares its generation; streamTop > 0
// asks for that many most likely tokens in each TokenEvent. The seed (random when the
// request names none) gives every sample its own generator, so a sample's tokens do not
// depend on what else is in a batch.
func NewGeneration(m *Model, req SampleRequest, streamTop int) (*Generation, error) {
	c := m.Cfg
	p := req.Params
	if err := ValidateSample(c, req); err != nil {
		return nil, err
	}
	if len(p.StopStrings) > 0 && m.Tok == nil {
		return nil, Inputf("stop strings need a tokenizer, and this model has none")
	}
	g := &Generation{req: req, maxPos: c.MaxPositions, stopTok: map[int32]bool{}, stops: NewStopMatcher(p.StopStrings),
		text: m.Tok, streamTop: streamTop, top: max(streamTop, req.TopKSampleLogprobs)}
	if !p.IgnoreEOS { // the SDK's stop=[]: no stop token at all, EOS included
		for _, t := range c.EOSTokenIDs {
			g.stopTok[t] = true
		}
	}
	for _, t := range p.StopTokens {
		g.stopTok[t] = true
	}
	seed := uint64(rand.Int64())
	if p.Seed != nil {
		seed = uint64(*p.Seed)
	}
	g.rngs = make([]*rand.Rand, req.NumSamples)
	for i := range g.rngs {
		g.rngs[i] = rand.New(rand.NewPCG(seed, uint64(i)+sampleStream))
	}
	g.seqs = make([]genSeq, req.NumSamples)
	g.plan = NewPromptPlan(req, seed)
	n := len(req.Prompt)
	g.res = SampleResult{Sequences: make([]Sequence, req.NumSamples), PromptTokens: n}
	if req.PromptLogprobs {
		g.res.PromptLogprobs = make([]float32, n)
		g.res.PromptLogprobs[0] = float32(math.NaN())
	}
	if req.TopKPromptLogprobs > 0 {
		g.res.TopKPrompt = make([][]TokenLogprob, n)
	}
	g.plan.Init(&g.res)
	return g, nil
}

// Plan is the request's prompt-position outputs (for a scheduler's prefix-cache limit).
func (g *Generation) Plan() *PromptPlan { return g.plan }

// Samples is the number of sequences generated.
func (g *Generation) Samples() int { return len(g.rngs) }

// Tokens is sample seq's tokens so far (the caller must not change them).
func (g *Generation) Tokens(seq int) []int32 { return g.res.Sequences[seq].Tokens }

// Draws is the next draw of sample seq, or with seq < 0 the first draw of every sample
// (the prompt's last step). Each variate comes from the sample's own generator, and only
// when the draw is random; a caller that runs a step again (after a failure or a
// preemption) reuses the draws it got, so the output is as if the step ran once.
func (g *Generation) Draws(seq int) []Draw {
	if seq >= 0 {
		return []Draw{g.draw(seq)}
	}
	ds := make([]Draw, len(g.rngs))
	for i := range ds {
		ds[i] = g.draw(i)
	}
	return ds
}

func (g *Generation) draw(seq int) Draw {
	p := g.req.Params
	d := Draw{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, Top: g.top}
	if p.Temperature > 0 {
		d.U = g.rngs[seq].Float64()
	}
	return d
}

// PromptStep fills what a prefill step of the prompt tokens at positions pos0…pos0+n-1
// computes besides them: prompt logprob targets, prompt top-k, and the prompt plan's
// target sets and alternative draws. Its draws (on the prompt's last chunk) are Draws(-1).
func (g *Generation) PromptStep(ss *StepSeq, pos0, n int) {
	if g.req.PromptLogprobs {
		ss.Targets = make([]int32, n)
		for j := range ss.Targets {
			ss.Targets[j] = -1
			if k := pos0 + j + 1; k < len(g.req.Prompt) {
				ss.Targets[j] = g.req.Prompt[k]
			}
		}
	}
	ss.TopK = g.req.TopKPromptLogprobs
	g.plan.Step(ss, pos0, n)
}

// ApplyPrompt takes a prefill step's outputs for the prompt tokens at positions pos0…
// into the result (row j scores the token at pos0+j+1).
func (g *Generation) ApplyPrompt(pos0 int, out StepOut) {
	n := len(g.req.Prompt)
	for j, lp := range out.TargetLogprobs {
		if k := pos0 + j + 1; k < n && !math.IsNaN(float64(lp)) {
			g.res.PromptLogprobs[k] = lp
		}
	}
	for j, top := range out.TopK {
		if k := pos0 + j + 1; k < n {
			g.res.TopKPrompt[k] = top
		}
	}
	g.plan.Apply(&g.res, pos0, out)
}

// SetPromptCacheHit records how many prompt tokens came from a prefix cache.
func (g *Generation) SetPromptCacheHit(n int) { g.res.PromptCacheHitTokens = n }

// Accept appends a drawn token (with its logprob and its draw's top tokens) to sample
// seq and decides whether the sequence stops: at a stop token (EOS included unless
// ignored) or when its text gains a stop string (StopReasonStop; the stopping token is
// kept), else at max_tokens or the model's context (StopReasonLength). It returns the
// event for a streaming caller; its Stop is empty while the sequence goes on.
func (g *Generation) Accept(seq int, tok int32, lp float32, top []TokenLogprob) TokenEvent {
	sq := &g.res.Sequences[seq]
	sq.Tokens = append(sq.Tokens, tok)
	sq.Logprobs = append(sq.Logprobs, lp)
	if k := g.req.TopKSampleLogprobs; k > 0 {
		sq.TopK = append(sq.TopK, headOf(top, k))
	}
	stop := g.stopTok[tok]
	if g.stops != nil {
		// Only the new text is matched: what the token adds to the text of the prompt and
		// the tokens so far (a lone SentencePiece token would lose its leading space, the
		// first sampled one too if decoded without the prompt), so the automaton needs
		// nothing else.
		s := &g.seqs[seq]
		if s.text == nil {
			s.text = tokenizer.NewStreamAfter(g.text, g.req.Prompt)
		}
		var hit bool
		s.stop, hit = g.stops.Feed(s.stop, s.text.Next(tok))
		stop = stop || hit
	}
	switch {
	case stop:
		sq.StopReason = StopReasonStop
	case len(sq.Tokens) >= g.req.Params.MaxTokens || len(g.req.Prompt)+len(sq.Tokens) >= g.maxPos:
		sq.StopReason = StopReasonLength
	}
	return TokenEvent{Seq: seq, Token: tok, Logprob: lp, Top: headOf(top, g.streamTop), Stop: sq.StopReason}
}

// Result is the request's result once every sample has stopped.
func (g *Generation) Result() SampleResult {
	res := g.res
	res.OutputTokens = 0
	for _, sq := range res.Sequences {
		res.OutputTokens += len(sq.Tokens)
	}
	return res
}

// headOf is the k most likely of a draw's top tokens (nil for k ≤ 0).
func headOf(top []TokenLogprob, k int) []TokenLogprob {
	if k <= 0 {
		return nil
	}
	return top[:min(k, len(top))]
}
