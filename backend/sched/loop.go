package sched

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
)

// This file is the iteration-level scheduler each hosted model runs (in the API server
// for local models, in `tuft worker` for remote ones): one goroutine that owns the model
// and runs, one at a time, two kinds of bounded units of work:
//
//   - a decode step (sample.go; its memory in kv.go): one engine.DecodeStep over every active sequence of
//     every sample request, sampling session, adapter and tenant (sorted by adapter), plus
//     chunks of new prompts, within a token budget, filled fairly across tenants (deficit
//     round robin); requests join at the next step and leave when done;
//   - a training pack (train.go): one engine.TrainStep over datums of queued
//     forward(_backward) requests of many adapters and tenants, within a token budget,
//     filled by deficit round robin across tenants.
//
// Between units it checks every request's context (deadline, cancellation) and drops
// those that ended. While both kinds have work they alternate by time (choose): one
// pack, then decode steps for as long as the pack took, scaled by TrainShare. Hence the
// bounds (docs/scheduling.md):
//
//   - a decode step waits for at most one training pack: TrainPackTokens tokens of forward
//     and backward, or one datum where a single datum is longer;
//   - a training pack waits for decode steps for at most the previous pack's time (times
//     (1−TrainShare)/TrainShare) plus one step (StepTokens tokens);
//   - a tenant's new sample request gets its first chunk into the batch at the next
//     decode step with memory for it, and its share of every step's budget by deficit
//     round robin;
//   - a tenant's training datum joins a pack as soon as its deficit covers it: within
//     ⌈datum tokens / quantum⌉ packs, the quantum being the pack budget divided among
//     the tenants with training work.

// Config configures the scheduler of each hosted model.
type Config struct {
	// MaxBatchSeqs bounds the sequences in one decode step.
	MaxBatchSeqs int
	// StepTokens bounds the tokens of one decode step: one per decoding sequence plus the
	// prompt chunks of joining requests.
	StepTokens int
	// PrefillChunk bounds the tokens of one prompt in one step, so a long prompt is
	// prefilled over several steps while the other sequences keep decoding.
	PrefillChunk int
	// KVCacheBytes is the device memory of the model's KV-cache pool; work is KV-admitted as
	// it fits, and sequences are preempted (and later recomputed) when decoding outgrows it.
	KVCacheBytes int64
	// PrefixCacheEntries bounds the prompts whose KV blocks are kept for later requests of
	// the same adapter (0 disables the prefix cache).
	PrefixCacheEntries int
	// TrainPackTokens bounds the tokens of one training pass (a longer single datum runs
	// alone).
	TrainPackTokens int
	// TrainShare is the share of the model's time training gets while both training and
	// sampling have work (the rest goes to sampling).
	TrainShare float64
}

// DefaultConfig is the configuration of config.Default() (engine.scheduler).
func DefaultConfig() Config { return ConfigFrom(config.Default("").Engine.Scheduler) }

// ConfigFrom is the scheduler configuration of engine.scheduler.
func ConfigFrom(c config.Scheduler) Config {
	return Config{MaxBatchSeqs: c.MaxBatchSize, StepTokens: c.StepTokenBudget, PrefillChunk: c.PrefillChunkTokens,
		KVCacheBytes: c.KVCacheBytes, PrefixCacheEntries: c.PrefixCacheEntries, TrainPackTokens: c.TrainPackTokens,
		TrainShare: c.TrainShare}
}

// check panics, naming the key, on a value the configuration did not give
// (config.MustPositive): the numbers come from engine.scheduler (ConfigFrom).
func (c Config) check() {
	config.MustPositive("engine.scheduler.max_batch_size", c.MaxBatchSeqs)
	config.MustPositive("engine.scheduler.step_token_budget", c.StepTokens)
	config.MustPositive("engine.scheduler.prefill_chunk_tokens", c.PrefillChunk)
	config.MustPositive("engine.scheduler.kv_cache_bytes", c.KVCacheBytes)
	config.MustPositive("engine.scheduler.train_pack_tokens", c.TrainPackTokens)
	if c.PrefixCacheEntries < 0 || !(c.TrainShare > 0 && c.TrainShare < 1) {
		panic(fmt.Sprintf("engine.scheduler: prefix_cache_entries %d must not be negative and train_share %g must be in (0, 1): pass the configuration's values",
			c.PrefixCacheEntries, c.TrainShare))
	}
}

// ErrClosed is returned for work a closed executor did not run.
var ErrClosed = errors.New("the model executor is closed")

// Work kinds.
const (
	kindSample = iota
	kindTrain
	kindJob
)

// Scheduler is one model's token scheduler: it batches the decode steps of every running
// sample request (continuous batching, KV admission against the block pool) and the
// training packs. It is not futures' operation scheduler (futures.opScheduler), which
// decides which queued operation reaches this one.
type Scheduler struct {
	m   *engine.Model
	cfg Config
	// blockBytes and blocks size the KV pool, created at the first sample request.
	blockBytes int64
	blocks     int

	mu      sync.Mutex
	inbox   []*Sample // arrived, not yet taken by the loop
	trainIn []*fbCall
	jobIn   []*job
	running bool // the loop goroutine is running
	closed  bool
	idle    chan struct{} // closed when a loop exits (for Close)
	kick    chan struct{} // new work arrived (wakes a loop that waits)

	// Owned by the loop goroutine.
	pool    *engine.KVPool[float32]
	prefix  *prefixCache
	tenants map[string]*tenantState
	ring    []*tenantState // tenants in arrival order: the round-robin order
	rr      int            // where the next decode step's round robin starts
	trr     int            // likewise for training packs
	reqs    map[*Sample]struct{}
	calls   int          // training calls in tenant queues
	credit  float64      // seconds sampling may still run before the next training pack
	admits  uint64       // KV admission counter (preemption takes the latest first)
	jobs    []*job       // exclusive jobs, oldest first
	lastJob bool         // the last unit was a job
	burst   int          // jobs still to run in the current jobs' turn
	out     *unitOutcome // the unit being run (nil between units)

	// devErr reads and clears the device's error (the model's device; a test may
	// replace it before the first submission).
	devErr func() error

	stats schedStats
	hooks testHooks
}

// Hold makes the loop wait before its next unit of work until release is called, so a
// test can queue work deterministically (with Queued). For tests only.
func (s *Scheduler) Hold() (release func()) {
	gate := make(chan struct{})
	var once sync.Once
	s.mu.Lock() // the loop reads the hook under s.mu: it may be running another unit
	s.hooks.iter = func() { <-gate }
	s.mu.Unlock()
	return func() { once.Do(func() { close(gate) }) }
}

// testHooks let tests hold the loop and watch what it runs; nil in production.
type testHooks struct {
	iter func()                    // before each unit of work (it may block, holding the loop); under mu
	step func([]planned)           // after a decode step ran
	pack func([]*fbCall)           // after a training pack ran
	kind func(kind int, both bool) // the kind of work about to run; both: both kinds had work
	job  func()                    // a job is about to run (on the loop goroutine)
}

// schedStats are counters for tests and benchmarks.
type schedStats struct {
	steps, stepRows, maxRows atomic.Int64
	packs, packTokens        atomic.Int64
	preemptions              atomic.Int64
	prefixHitTokens          atomic.Int64
	maxStep, maxPack, maxJob atomic.Int64 // the longest decode step, training pack and job, ns
	jobs                     atomic.Int64
}

// tenantState is one tenant's work on the model.
type tenantState struct {
	name    string
	running []*unit // sequences with a KV cache, oldest admission first
	pending []*unit // sequences waiting for memory: preempted ones first, then new prompts
	deficit int     // decode step round robin
	calls   []*fbCall
	tdef    int // training pack round robin
}

// New is the scheduler of model m. Its loop goroutine runs while there is work.
func New(m *engine.Model, cfg Config) *Scheduler {
	cfg.check()
	c := m.Cfg
	bb := int64(2*c.Layers*engine.KVBlockLen*c.KVHeads*c.HeadDim) * 4
	blocks := int(cfg.KVCacheBytes / bb)
	return &Scheduler{m: m, cfg: cfg, blockBytes: bb, blocks: max(blocks, 1), tenants: map[string]*tenantState{},
		reqs: map[*Sample]struct{}{}, kick: make(chan struct{}, 1), devErr: m.Device().Err}
}

// Queued is the number of requests, calls and jobs submitted but not yet taken by the loop.
func (s *Scheduler) Queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inbox) + len(s.trainIn) + len(s.jobIn)
}

// KVTokens is the KV pool's capacity in positions.
func (s *Scheduler) KVTokens() int { return s.blocks * engine.KVBlockLen }

// start makes sure the loop runs and notices new work. Callers hold s.mu.
func (s *Scheduler) start() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
	if s.running {
		return
	}
	s.running = true
	s.idle = make(chan struct{})
	go s.loop()
}

// loop runs units of work until there is none, then exits (the next submission starts it
// again).
func (s *Scheduler) loop() {
	for {
		s.mu.Lock()
		if iter := s.hooks.iter; iter != nil {
			s.mu.Unlock()
			iter()
			s.mu.Lock()
		}
		closed := s.closed
		for _, r := range s.inbox {
			s.addRequest(r)
		}
		for _, c := range s.trainIn {
			s.addCall(c)
		}
		s.jobs = append(s.jobs, s.jobIn...)
		s.inbox, s.trainIn, s.jobIn = nil, nil, nil
		if closed {
			// Answered outside s.mu: a done callback may submit more work (refused now).
			s.mu.Unlock()
			s.shutdown()
			s.mu.Lock()
		}
		if closed || (len(s.reqs) == 0 && s.calls == 0 && len(s.jobs) == 0) {
			s.running = false
			close(s.idle)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.dropEnded()
		work := [2]bool{len(s.reqs) > 0, s.calls > 0}
		// Queued jobs run next: a turn runs the jobs queued when it began, one unit each,
		// then a unit of other work if any waits. A job waits for at most one unit of
		// other work (plus the jobs before it); a unit of other work for one turn of jobs.
		kind := kindJob
		s.burst = min(s.burst, len(s.jobs))
		if len(s.jobs) == 0 || (s.lastJob && s.burst == 0 && (work[kindSample] || work[kindTrain])) {
			if !work[kindSample] && !work[kindTrain] {
				continue // every job ended while it waited
			}
			kind = s.choose(work)
		}
		if kind == kindJob {
			if !s.lastJob || s.burst == 0 {
				s.burst = len(s.jobs) // a new turn
			}
			s.burst--
		}
		s.lastJob = kind == kindJob
		if s.hooks.kind != nil {
			s.hooks.kind(kind, work[kindSample] && work[kindTrain])
		}
		t0 := time.Now()
		ran := s.run(kind)
		el := time.Since(t0)
		if ran {
			longest := &s.stats.maxStep
			switch kind {
			case kindTrain:
				longest = &s.stats.maxPack
			case kindJob:
				longest = &s.stats.maxJob
			}
			if int64(el) > longest.Load() {
				longest.Store(int64(el))
			}
		}
		if kind == kindJob {
			continue // a job's time counts against neither share
		}
		d := el.Seconds()
		if kind == kindTrain {
			// Sampling may now run for as long, scaled by the shares, before the next pack.
			s.credit = d * (1 - s.cfg.TrainShare) / s.cfg.TrainShare
		} else {
			s.credit -= d
		}
		if !ran {
			// Nothing could run (all waiting on memory that running work holds, which
			// cannot happen with the KV admission rules, or every request ended): do not spin.
			s.wait(5 * time.Millisecond)
		}
	}
}

// run runs one unit of work of the given kind. A panic inside it (a bug, or a device
// failing in a way the engine does not report as an error) fails the work the loop
// holds, which may be half-updated, instead of the whole process: the futures layer
// used to turn such a panic into one failed operation, and the loop keeps that promise
// for everything it runs.
func (s *Scheduler) run(kind int) (ran bool) {
	s.out = &unitOutcome{touched: map[*Sample]bool{}}
	defer s.endUnit() // after the recovery below: the answers go out after the device check
	defer func() {
		if v := recover(); v != nil {
			err := fmt.Errorf("internal error in the model scheduler: %v", v)
			slog.Error("model scheduler panicked; failing the work it held", "model", s.m.Name, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			for r := range s.reqs {
				s.failRequest(r, err)
			}
			for _, t := range s.ring {
				for _, c := range slices.Clone(t.calls) {
					s.failCall(c, err)
				}
			}
			if s.out.job != nil {
				s.out.jobErr = err
			}
			s.prune()
			ran = true
		}
	}()
	switch kind {
	case kindJob:
		return s.runJob()
	case kindTrain:
		return s.trainPack()
	}
	return s.decodeStep()
}

// choose picks the kind of the next unit of work. While both kinds have work they
// alternate by time: one training pack, then decode steps for as long as the pack took
// (scaled by the shares; at least one step), then the next pack. So a decode step waits
// for at most one pack, and a pack for at most the previous pack's time in steps plus
// one step. A kind without work banks nothing.
func (s *Scheduler) choose(work [2]bool) int {
	switch {
	case !work[kindTrain]:
		s.credit = 0
		return kindSample
	case !work[kindSample]:
		s.credit = 0
		return kindTrain
	case s.credit > 0:
		return kindSample
	}
	return kindTrain
}

// wait sleeps for d or until new work arrives.
func (s *Scheduler) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.kick:
	}
}

// dropEnded fails the requests and calls whose context ended (deadline, cancellation):
// they leave the batch before the next unit of work.
func (s *Scheduler) dropEnded() {
	for r := range s.reqs {
		if err := r.ctx.Err(); err != nil {
			s.failRequest(r, fmt.Errorf("sample request ended after %s: %w", time.Since(r.arrived).Round(time.Millisecond), err))
		}
	}
	s.dropEndedJobs()
	for _, t := range s.ring {
		// failCall removes the call from t.calls: walk a copy.
		for _, c := range slices.Clone(t.calls) {
			if err := c.ctx.Err(); err != nil {
				s.failCall(c, err)
			}
		}
	}
}

// tenant returns the state of a tenant, creating it. Loop only.
func (s *Scheduler) tenant(name string) *tenantState {
	t, ok := s.tenants[name]
	if !ok {
		t = &tenantState{name: name}
		s.tenants[name] = t
		s.ring = append(s.ring, t)
	}
	return t
}

// prune forgets tenants with no work left. Loop only.
func (s *Scheduler) prune() {
	keep := s.ring[:0]
	for _, t := range s.ring {
		if len(t.running) > 0 || len(t.pending) > 0 || len(t.calls) > 0 {
			keep = append(keep, t)
		} else {
			delete(s.tenants, t.name)
		}
	}
	clear(s.ring[len(keep):])
	s.ring = keep
}

// shutdown fails everything. Loop only, after closed was set.
func (s *Scheduler) shutdown() {
	for r := range s.reqs {
		s.failRequest(r, ErrClosed)
	}
	for _, t := range s.ring {
		for _, c := range slices.Clone(t.calls) {
			s.failCall(c, ErrClosed)
		}
	}
	for _, j := range s.jobs {
		j.finish(ErrClosed)
	}
	s.jobs = nil
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prefix != nil {
		s.prefix.drop(func(string) bool { return true })
	}
	if s.pool != nil {
		s.pool.Close()
		s.pool = nil
	}
}

// Close fails queued and running work and waits for the loop to stop.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.closed = true
	running, idle := s.running, s.idle
	inbox, trainIn, jobIn := s.inbox, s.trainIn, s.jobIn
	s.inbox, s.trainIn, s.jobIn = nil, nil, nil
	s.mu.Unlock()
	for _, r := range inbox {
		r.finish(ErrClosed)
	}
	for _, c := range trainIn {
		c.finish(engine.ForwardResult{}, ErrClosed)
	}
	for _, j := range jobIn {
		j.finish(ErrClosed)
	}
	if running {
		<-idle
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prefix != nil {
		s.prefix.drop(func(string) bool { return true })
	}
	if s.pool != nil {
		s.pool.Close()
		s.pool = nil
	}
}

// DropPrefixes forgets the cached prompts of an adapter (removed or replaced).
func (s *Scheduler) DropPrefixes(lora string) {
	s.mu.Lock()
	p := s.prefix
	s.mu.Unlock()
	if p != nil {
		p.drop(func(key string) bool { return adapterOfKey(key) == lora })
	}
}

// Stats are a model scheduler's counters since it started.
type Stats struct {
	Steps           int64 // decode steps run
	StepRows        int64 // sequences over all decode steps
	MaxRows         int64 // the largest decode step, in sequences
	Packs           int64 // training packs run
	PackTokens      int64 // tokens over all packs
	Preemptions     int64 // sequences whose memory was taken back (and later recomputed)
	PrefixHitTokens int64 // prompt positions served from the prefix cache
	Jobs            int64 // exclusive jobs run (device operations: optimizer steps, adapters)
	// MaxStep, MaxPack and MaxJob are the longest decode step, training pack and job: the
	// units of the scheduler's waiting bounds (docs/scheduling.md) measured.
	MaxStep, MaxPack, MaxJob time.Duration
}

// Stats reads the counters.
func (s *Scheduler) Stats() Stats {
	st := &s.stats
	return Stats{Steps: st.steps.Load(), StepRows: st.stepRows.Load(), MaxRows: st.maxRows.Load(), Packs: st.packs.Load(),
		PackTokens: st.packTokens.Load(), Preemptions: st.preemptions.Load(), PrefixHitTokens: st.prefixHitTokens.Load(),
		Jobs: st.jobs.Load(), MaxStep: time.Duration(st.maxStep.Load()), MaxPack: time.Duration(st.maxPack.Load()),
		MaxJob: time.Duration(st.maxJob.Load())}
}
