package sched

import (
	"context"
	"slices"
	"time"

	"github.com/tuft-go/tuft/engine"
)

// This file is the training half of the scheduler: forward(_backward) requests run in
// packs, each pack one pass over the base weights with datums of many adapters and
// tenants, interleaved with decode steps.

// fbCall is one forward(_backward) request in the scheduler.
type fbCall struct {
	ctx     context.Context
	tenant  string
	a       *engine.Adapter
	req     engine.ForwardRequest
	arrived time.Time

	// Loop state.
	t       *tenantState
	job     *engine.TrainJob
	planned int           // datums planned into the pack being built
	packs   int           // packs it ran in
	parts   int           // the most requests a pack it ran in held
	waited  time.Duration // from arrival to its first pack

	done    func(engine.ForwardResult, PackStats, error)
	settled bool // its outcome (res, err) is decided, to be given at the unit's end
	res     engine.ForwardResult
	err     error
	closed  bool // done ran
}

// PackStats are what a forward(_backward) request saw of the training packs, for its
// span.
type PackStats struct {
	Parts  int           // the most requests a pack it ran in held
	Packs  int           // packs it ran in
	Waited time.Duration // from its arrival to its first pack
}

// finish answers c, once: res on success.
func (c *fbCall) finish(res engine.ForwardResult, err error) {
	if c.closed {
		return
	}
	c.closed = true
	c.done(res, PackStats{Parts: c.parts, Packs: c.packs, Waited: c.waited}, err)
}

// SubmitForward queues a forward(_backward) request on adapter a (nil: the base model,
// forward only) for the tenant TenantFrom(ctx) and returns at once; done receives the
// outcome exactly once, on the loop goroutine (or on this one, before SubmitForward
// returns, when the scheduler is closed), and must not block. The caller keeps every
// other operation off a's weights and gradients until done ran.
func (s *Scheduler) SubmitForward(ctx context.Context, a *engine.Adapter, req engine.ForwardRequest, done func(engine.ForwardResult, PackStats, error)) {
	c := &fbCall{ctx: ctx, tenant: TenantFrom(ctx), a: a, req: req, arrived: time.Now(), done: done}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.finish(engine.ForwardResult{}, ErrClosed)
		return
	}
	s.trainIn = append(s.trainIn, c)
	s.start()
	s.mu.Unlock()
}

// addCall takes an arrived call into the loop's state. Loop only.
func (s *Scheduler) addCall(c *fbCall) {
	c.t = s.tenant(c.tenant)
	c.t.calls = append(c.t.calls, c)
	s.calls++
}

// failCall ends a call with err; its adapter is left as it was.
func (s *Scheduler) failCall(c *fbCall, err error) {
	if c.job != nil {
		c.job.Abort(err)
	}
	s.removeCall(c)
	s.settleCall(c, engine.ForwardResult{}, err)
}

// settleCall decides c's outcome: given at once outside a unit, at the unit's end
// (after its device check, endUnit) inside one.
func (s *Scheduler) settleCall(c *fbCall, res engine.ForwardResult, err error) {
	if c.closed || c.settled {
		return
	}
	if s.out == nil {
		c.finish(res, err)
		return
	}
	c.settled, c.res, c.err = true, res, err
	s.out.calls = append(s.out.calls, c)
}

func (s *Scheduler) removeCall(c *fbCall) {
	if i := slices.Index(c.t.calls, c); i >= 0 {
		c.t.calls = slices.Delete(c.t.calls, i, i+1)
		s.calls--
	}
}

// trainPack builds and runs one training pack; false when nothing could run. The tenant
// policy (fillPack, policy.go) shares the pack's token budget between the tenants with
// training work, a quantum of the budget divided among them per round; each tenant's
// calls go in order, whole datums at a time (packQueue answers for them).
func (s *Scheduler) trainPack() bool {
	budget := s.cfg.TrainPackTokens
	var active []*tenantState
	n := len(s.ring)
	for k := 0; k < n; k++ {
		if t := s.ring[(s.trr+k)%n]; len(t.calls) > 0 {
			active = append(active, t)
		}
	}
	s.trr++
	if len(active) == 0 {
		return false
	}
	quantum := max(engine.KVBlockLen, budget/len(active))
	q := &packQueue{s: s, active: active}
	deficit := make([]int, len(active))
	for i, t := range active {
		deficit[i] = t.tdef
	}
	tokens := fillPack(deficit, quantum, budget, q)
	for i, t := range active {
		t.tdef = deficit[i]
	}
	calls := q.packed // in the pack, in order
	if tokens == 0 {
		s.prune()
		return false
	}
	parts := make([]engine.TrainPart, len(calls))
	for i, c := range calls {
		parts[i] = engine.TrainPart{Job: c.job, N: c.planned}
		c.planned = 0
		if c.packs == 0 {
			c.waited = time.Since(c.arrived)
		}
		c.packs++
		c.parts = max(c.parts, len(calls))
	}
	s.out.pack = calls
	s.stats.packs.Add(1)
	s.stats.packTokens.Add(int64(tokens))
	if s.hooks.pack != nil {
		s.hooks.pack(calls)
	}
	if err := s.m.TrainStep(context.Background(), parts); err != nil {
		for _, c := range calls {
			s.failCall(c, err)
		}
		s.prune()
		return true
	}
	for _, c := range calls {
		if c.job.Done() {
			res, err := c.job.Finish()
			s.removeCall(c)
			s.settleCall(c, res, err)
		}
	}
	s.prune()
	return true
}

// packQueue is the training queue's side of building a pack: the policy's oracle over
// the queued calls of the tenants with work.
type packQueue struct {
	s      *Scheduler
	active []*tenantState
	packed []*fbCall // in the pack, in order
}

func (q *packQueue) calls(t int) int { return len(q.active[t].calls) }

func (q *packQueue) next(t, i int) datum {
	c := q.active[t].calls[i]
	if c.job == nil {
		j, err := q.s.m.NewTrainJob(c.a, c.req)
		if err != nil {
			q.s.failCall(c, err) // removes it from the tenant's calls
			return datumGone
		}
		c.job = j
	}
	d := c.job.Next() + c.planned
	if d == c.job.Datums() {
		return datumNone
	}
	return datum(c.job.DatumTokens(d))
}

func (q *packQueue) take(t, i int) {
	c := q.active[t].calls[i]
	if c.planned == 0 {
		q.packed = append(q.packed, c)
	}
	c.planned++
}
