package sched

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/tuft-go/tuft/engine"
)

// This file is the sampling half of the scheduler: requests, their sequences (units),
// and the decode step that advances them together.

// SampleHooks observe a request; the loop goroutine calls them, and they must return
// quickly.
type SampleHooks struct {
	// Phase starts a lifecycle slice: "prefill" (its prompt's first chunk is scheduled),
	// "decode" (its first tokens are drawn), "postprocess" (its last sequence ended).
	Phase func(name string)
	// FirstToken marks the first sampled tokens.
	FirstToken func()
	// Token receives every sampled token as the step that drew it ends (Stop set on a
	// sequence's last token), for streaming.
	Token func(engine.TokenEvent)
	// Top > 0 fills each event's Top with that many most likely tokens.
	Top int
}

// Sample is one sample request in the scheduler (NewSample prepares it, SubmitSample
// runs it).
type Sample struct {
	ctx     context.Context
	tenant  string
	key     string // adapter and weights generation: the prefix cache's namespace
	lw      *engine.LoraWeights[float32]
	req     engine.SampleRequest
	gen     *engine.Generation // the generation's rules and state: draws, stops, the result
	hooks   SampleHooks
	arrived time.Time

	// Loop state.
	prompt   *unit     // the prompt's prefill, shared by the samples; nil once done
	samples  []*unit   // one per sample, from the end of the prefill
	live     int       // samples not yet stopped
	started  time.Time // the first chunk of the prompt was scheduled
	steps    int       // decode steps the request ran in
	rows     int       // their total sequences
	maxRows  int
	preempts int

	done    func(engine.SampleResult, error)
	settled bool  // its outcome (err) is decided, to be given at the unit's end
	err     error // the outcome, once settled
	closed  bool  // done ran
}

// Batch is what a finished request saw of the batches it ran in, for its span.
type Batch struct {
	Steps    int // decode steps it ran in
	Rows     int // their total sequences
	MaxRows  int // the largest of them
	Preempts int // times one of its sequences was preempted
}

// Batch reads r's batch figures; call it after r's done ran.
func (r *Sample) Batch() Batch {
	return Batch{Steps: r.steps, Rows: r.rows, MaxRows: r.maxRows, Preempts: r.preempts}
}

// unit is a sequence that advances through decode steps: a request's prompt (whose
// last step draws the first token of every sample) or one sample.
type unit struct {
	r     *Sample
	t     *tenantState
	idx   int // sample index; -1: the prompt
	cache *engine.KVCache[float32]
	// feed are the tokens not yet in the cache: a prompt (or what remains of it), the last
	// sampled token, or everything again after a preemption; the step that takes the last
	// of them draws.
	feed  []int32
	draws []engine.Draw // the variates of the pending draw(s), kept if a step fails
	// admitted orders admissions (preemption takes the latest); preemptedAt is the step
	// number of the last preemption.
	admitted    uint64
	preemptedAt int64
	gone        bool
}

// finish answers r, once: its result on success.
func (r *Sample) finish(err error) {
	if r.closed {
		return
	}
	r.closed = true
	if err != nil {
		r.done(engine.SampleResult{}, err)
		return
	}
	r.done(r.gen.Result(), nil)
}

// NewSample checks a request against the model and the KV pool and prepares it for the
// adapter weights lw (nil: the base model) under the prefix cache key key (PrefixKey);
// the engine's Generation holds every rule of how it generates. The tenant is
// TenantFrom(ctx).
func (s *Scheduler) NewSample(ctx context.Context, key string, lw *engine.LoraWeights[float32], req engine.SampleRequest, h SampleHooks) (*Sample, error) {
	g, err := engine.NewGeneration(s.m, req, h.Top)
	if err != nil {
		return nil, err
	}
	p := req.Params
	bl := engine.KVBlockLen
	if need := (len(req.Prompt) + p.MaxTokens + bl - 1) / bl; need > s.blocks {
		return nil, engine.Inputf("prompt of %d tokens plus max_tokens %d needs %d KV-cache positions; the model's KV cache holds %d (engine.scheduler.kv_cache_bytes)",
			len(req.Prompt), p.MaxTokens, need*bl, s.KVTokens())
	}
	return &Sample{ctx: ctx, tenant: TenantFrom(ctx), key: key, lw: lw, req: req, gen: g, hooks: h, arrived: time.Now()}, nil
}

// SubmitSample queues r and returns at once; done receives its result exactly once, on
// the loop goroutine (or on this one, before SubmitSample returns, when the scheduler is
// closed). done must not block: it holds the loop. A request whose ctx ends leaves the
// batch at the next unit boundary with ctx's error.
func (s *Scheduler) SubmitSample(r *Sample, done func(engine.SampleResult, error)) {
	r.done = done
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		r.finish(ErrClosed)
		return
	}
	s.inbox = append(s.inbox, r)
	s.start()
	s.mu.Unlock()
}

// addRequest takes an arrived request into the loop's state. Loop only.
func (s *Scheduler) addRequest(r *Sample) {
	t := s.tenant(r.tenant)
	r.prompt = &unit{r: r, t: t, idx: -1, feed: r.req.Prompt}
	r.samples = make([]*unit, r.req.NumSamples)
	r.live = r.req.NumSamples
	t.pending = append(t.pending, r.prompt)
	s.reqs[r] = struct{}{}
}

// planned is a unit's part of a decode step: its next n feed tokens, taking need free
// blocks.
type planned struct {
	u       *unit
	n, need int
}

// stepCount numbers decode steps (for preemption bookkeeping).
func (s *Scheduler) stepCount() int64 { return s.stats.steps.Load() }

// decodeStep plans and runs one decode step; false when nothing could run.
func (s *Scheduler) decodeStep() bool {
	if err := s.ensurePool(); err != nil {
		for r := range s.reqs {
			s.failRequest(r, err)
		}
		return true
	}
	plan := s.plan()
	if len(plan) == 0 {
		s.prune()
		return false
	}
	// Sequences of one adapter side by side: the engine runs each adapter's LoRA
	// products once over its consecutive rows.
	sort.SliceStable(plan, func(i, j int) bool { return plan[i].u.r.key < plan[j].u.r.key })
	seqs := make([]engine.StepSeq, len(plan))
	for i, p := range plan {
		seqs[i] = s.stepSeq(p)
	}
	for _, p := range plan {
		s.out.touched[p.u.r] = true
	}
	s.stats.steps.Add(1)
	s.stats.stepRows.Add(int64(len(plan)))
	if int64(len(plan)) > s.stats.maxRows.Load() {
		s.stats.maxRows.Store(int64(len(plan)))
	}
	outs, err := s.m.DecodeStep(context.Background(), seqs)
	if err != nil {
		if errors.Is(err, engine.ErrKVPoolFull) {
			// The plan missed a block (it counts conservatively, so this should not happen):
			// give the latest admitted sequence's memory back and try again.
			latest := plan[0].u
			for _, p := range plan {
				if p.u.admitted > latest.admitted {
					latest = p.u
				}
			}
			s.preempt(latest)
			return true
		}
		failed := map[*Sample]bool{}
		for _, p := range plan {
			if !failed[p.u.r] {
				failed[p.u.r] = true
				s.failRequest(p.u.r, fmt.Errorf("decode step: %w", err))
			}
		}
		return true
	}
	if s.hooks.step != nil {
		s.hooks.step(plan)
	}
	for i, p := range plan {
		if !p.u.gone {
			s.apply(p, outs[i], len(plan))
		}
	}
	s.prune()
	return true
}

// stepSeq is a planned unit's StepSeq.
func (s *Scheduler) stepSeq(p planned) engine.StepSeq {
	u, r := p.u, p.u.r
	ss := engine.StepSeq{Adapter: r.lw, Cache: u.cache, Tokens: u.feed[:p.n]}
	if p.n == len(u.feed) {
		if u.draws == nil { // the prompt's (idx -1) are every sample's first
			u.draws = r.gen.Draws(u.idx)
		}
		ss.Draws = u.draws
	}
	if u.idx < 0 {
		r.gen.PromptStep(&ss, u.cache.Len(), p.n)
	}
	return ss
}

// apply takes a step's output for one unit.
func (s *Scheduler) apply(p planned, out engine.StepOut, rows int) {
	u, r := p.u, p.u.r
	pos0 := u.cache.Len() - p.n
	u.feed = u.feed[p.n:]
	r.steps++
	r.rows += rows
	r.maxRows = max(r.maxRows, rows)
	if u.idx < 0 {
		r.gen.ApplyPrompt(pos0, out)
		if len(u.feed) == 0 {
			s.finishPrompt(u, out)
		}
		return
	}
	if len(u.feed) == 0 {
		u.draws = nil
		s.token(u, out.Tokens[0], out.Logprobs[0], drawTop(out, 0))
	}
}

// drawTop is a step output's top logprobs of draw i (nil when not asked for).
func drawTop(out engine.StepOut, i int) []engine.TokenLogprob {
	if i < len(out.DrawTop) {
		return out.DrawTop[i]
	}
	return nil
}

// finishPrompt turns a request's prefilled prompt into its samples: each forks the
// prompt's cache (one prefill for all of them) and takes its first token.
func (s *Scheduler) finishPrompt(u *unit, out engine.StepOut) {
	r := u.r
	r.prompt = nil
	if s.prefix != nil {
		s.prefix.insert(r.tenant, r.key, r.req.Prompt, u.cache)
	}
	if r.hooks.Phase != nil {
		r.hooks.Phase("decode")
	}
	if r.hooks.FirstToken != nil {
		r.hooks.FirstToken()
	}
	for i := range r.samples {
		su := &unit{r: r, t: u.t, idx: i, cache: u.cache.Fork(), admitted: u.admitted}
		r.samples[i] = su
		u.t.running = append(u.t.running, su)
	}
	s.retire(u)
	for i, su := range r.samples {
		if r.closed {
			return
		}
		s.token(su, out.Tokens[i], out.Logprobs[i], drawTop(out, i))
	}
}

// token hands a sampled token to its sequence's generation, which decides whether the
// sequence stops, and either feeds the token to the next step or retires the sequence.
func (s *Scheduler) token(u *unit, tok int32, lp float32, top []engine.TokenLogprob) {
	r := u.r
	ev := r.gen.Accept(u.idx, tok, lp, top)
	if r.hooks.Token != nil {
		r.hooks.Token(ev)
	}
	if ev.Stop == "" {
		u.feed = []int32{tok}
		return
	}
	s.retire(u)
	if r.live--; r.live == 0 {
		s.complete(r)
	}
}

// complete answers a request whose samples have all stopped.
func (s *Scheduler) complete(r *Sample) {
	if r.hooks.Phase != nil {
		r.hooks.Phase("postprocess")
	}
	delete(s.reqs, r)
	s.settleSample(r, nil)
}

// failRequest ends a request with err, giving back its memory.
func (s *Scheduler) failRequest(r *Sample, err error) {
	if r.prompt != nil {
		s.retire(r.prompt)
	}
	for _, u := range r.samples {
		if u != nil {
			s.retire(u)
		}
	}
	delete(s.reqs, r)
	s.settleSample(r, err)
}

// settleSample decides r's outcome: given at once outside a unit, at the unit's end
// (after its device check, endUnit) inside one.
func (s *Scheduler) settleSample(r *Sample, err error) {
	if r.closed || r.settled {
		return
	}
	if s.out == nil {
		r.finish(err)
		return
	}
	r.settled, r.err = true, err
	s.out.samples = append(s.out.samples, r)
}

// retire releases a unit's cache and removes it from its tenant's lists.
func (s *Scheduler) retire(u *unit) {
	if u.gone {
		return
	}
	u.gone = true
	if u.cache != nil {
		u.cache.Release()
		u.cache = nil
	}
	t := u.t
	if i := slices.Index(t.running, u); i >= 0 {
		t.running = slices.Delete(t.running, i, i+1)
	} else if i := slices.Index(t.pending, u); i >= 0 {
		t.pending = slices.Delete(t.pending, i, i+1)
	}
}
