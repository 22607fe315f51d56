package futures

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/telemetry"
)

// Task is an operation to run.
type Task struct {
	Tenant      string
	QueueKey    string // ordering domain: a training run id or a sampling session id
	Ordered     bool   // enforce strict SeqID order within QueueKey
	SeqID       int64
	OpType      string // telemetry.Op* values
	ModelID     string // for spans and metrics
	Pool        string // execution pool (the base model): tasks of one pool share its workers
	PayloadHash string // identical (QueueKey, SeqID, PayloadHash) resubmission returns the same id
	// InOrder says the sender submits the queue's seq_ids strictly one after another, each
	// only once the previous submission was answered (the Tinker SDK does, with the
	// serial chunks this server advertises). A lower seq_id that has not arrived when this
	// one does will then never arrive (the SDK reserved it and failed before sending), so
	// the queue does not wait for it.
	InOrder bool
	// A task has exactly one body. Run is a blocking one (CPU or IO work: create, save,
	// load, unload), run on one of Options.Workers workers. Start is an asynchronous one
	// (model work the backend's token scheduler runs: forward, forward_backward,
	// optim_step, sample): it hands the work to the executor and returns at once, and the
	// operation ends when c's Done, or a continuation queued with c.Finish, reports its
	// outcome. Start is called the moment the task is runnable; no goroutine waits for it.
	Run   func(ctx context.Context) (Result, error)
	Start func(ctx context.Context, c *Completion)
	// Weight is the task's share of its pool's backlog while it is unfinished (the KV
	// positions a sample may take), which Backlog reports per tenant.
	Weight int
	// Timeout is the operation's deadline from its submission (0: Options.DefaultTimeout).
	// Past it, a queued operation fails without running and a running one sees its
	// context end (cancel.go).
	Timeout time.Duration
}

// Options configure a Manager.
type Options struct {
	Store              store.Store
	TTL                time.Duration // result retention after completion (persistence.future_ttl_seconds)
	MaxQueuedPerTenant int           // unfinished futures per tenant (limits.max_queued_per_tenant)
	// Workers is how many goroutines run blocking tasks (Task.Run), and as many again
	// finish operations (continuations, persistence, resolution): server.operation_workers.
	Workers int
	// SeqGapTimeout is how long an ordered task that arrived ahead of its predecessor waits
	// for it (sessions.seq_gap_timeout_seconds). Refused and abandoned
	// seq_ids never make anything wait: see Refuse and Recover.
	SeqGapTimeout time.Duration
	Logger        *slog.Logger
	Now           func() time.Time
	// KeepInMemory is how long a resolved future stays in memory before it is served
	// from the store (default 2 s, at most TTL): clients long-poll results as they
	// come, so older ones are rarely read and need not weigh on the heap.
	KeepInMemory time.Duration
	// Owner names this API replica: futures record it, and Recover resolves only its
	// own (another replica's in-flight futures are alive, not abandoned). Empty: single.
	Owner string
	// TracerProvider and Instruments receive the execution spans and the futures
	// metrics (default: the OTel global provider and telemetry.Metrics()).
	TracerProvider trace.TracerProvider
	Instruments    *telemetry.Instruments
	// DefaultTimeout is the deadline of a task without its own (limits.future_timeout_seconds).
	DefaultTimeout time.Duration
	// MaxRunningPerTenant bounds one tenant's running tasks in a pool (0: no bound): how
	// many of its operations a model's token scheduler holds at once, and how many
	// blocking workers it may occupy. It is a limit, not fairness: the token scheduler
	// shares each model between the tenants whose operations it holds.
	MaxRunningPerTenant int
}

// OptionsFrom is a Manager's numbers from the configuration (the caller adds the store,
// logger and telemetry): the one place they come from.
func OptionsFrom(c config.Config) Options {
	return Options{TTL: c.FutureTTL(), MaxQueuedPerTenant: c.Limits.MaxQueuedPerTenant, Owner: c.Server.ReplicaID,
		SeqGapTimeout: c.SeqGapTimeout(), DefaultTimeout: c.Limits.FutureTimeoutSeconds.Duration(),
		// A model operation reaches the model's token scheduler (backend) as soon as it
		// is runnable, which runs the decode steps and training packs of every tenant
		// together (continuous batching, deficit round robin in tokens); each tenant has
		// at most limits.max_running_per_tenant of them there. Each run's operations stay
		// in seq_id order.
		Workers:             c.Server.OperationWorkers,
		MaxRunningPerTenant: c.Limits.MaxRunningPerTenant}
}

// entry is an in-memory future.
type entry struct {
	rec    Record
	task   Task
	link   trace.SpanContext
	keys   telemetry.Keys
	done   chan struct{}
	queued time.Time
	// blocking: the task has a blocking body (Task.Run), so it runs from the blocking pool.
	blocking bool
	// With a queued store: the acceptance is written only if the result is not queued
	// within acceptDelay (accept), and never after the result (resultQueued). Both are
	// guarded by Manager.mu.
	accept       *time.Timer
	resultQueued bool
	// cancel ends the context of a running operation (nil when it is not running);
	// cancelled records that its tenant asked for it (Cancel). Guarded by Manager.mu.
	cancel    context.CancelFunc
	cancelled bool
}

// noteResultQueued records that the entry's final record is about to be written, so a
// pending acceptance write is skipped. Callers hold m.mu.
func (e *entry) noteResultQueued() {
	e.resultQueued = true
	if e.accept != nil {
		e.accept.Stop()
	}
}

// Manager owns every future of this process.
type Manager struct {
	o      Options
	log    *slog.Logger
	now    func() time.Time
	tracer trace.Tracer
	ins    *telemetry.Instruments

	mu        sync.Mutex
	cond      *sync.Cond // the blocking workers': the blocking pool may have an entry, or shutdown
	models    *sync.Cond // the dispatcher's: a model's pool may have an entry, or shutdown
	entries   map[string]*entry
	index     dedupeIndex
	sched     *opScheduler
	closing   bool
	recovered map[string]int64          // per ordered queue: one past the highest seq_id resolved before a restart
	doneList  []*entry                  // resolved entries in completion order, for expiry
	started   time.Time                 // when this Manager (process) started
	queued    bool                      // the store queues writes (store.Queuer)
	backlog   map[string]map[string]int // pool → tenant → Task.Weight of unfinished tasks
	running   sync.WaitGroup
	workers   sync.WaitGroup
	stop      chan struct{}

	// The completion queue (exec.go): what the completion workers run, in order.
	wmu      sync.Mutex
	wcond    *sync.Cond
	work     []func()
	workStop bool // set once nothing runs any more (Shutdown): the completion workers end
}

// New creates a Manager.
func New(o Options) (*Manager, error) {
	if o.Store == nil {
		return nil, errors.New("futures: a store is required")
	}
	// The numbers come from the configuration (OptionsFrom); no second default here.
	config.MustPositive("persistence.future_ttl_seconds", o.TTL)
	config.MustPositive("limits.max_queued_per_tenant", o.MaxQueuedPerTenant)
	config.MustPositive("server.operation_workers", o.Workers)
	config.MustPositive("sessions.seq_gap_timeout_seconds", o.SeqGapTimeout)
	config.MustPositive("limits.future_timeout_seconds", o.DefaultTimeout)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.KeepInMemory <= 0 {
		o.KeepInMemory = 2 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	_, queued := o.Store.(store.Queuer)
	m := &Manager{o: o, log: o.Logger, now: o.Now, started: time.Now(), queued: queued,
		entries: map[string]*entry{}, index: newDedupeIndex(),
		sched: newOpScheduler(o.Now, o.MaxQueuedPerTenant, o.Workers, o.MaxRunningPerTenant), stop: make(chan struct{})}
	tel := telemetry.NewSettings(telemetry.WithTracerProvider(o.TracerProvider), telemetry.WithInstruments(o.Instruments))
	m.tracer, m.ins = tel.Tracer(telemetry.ScopeFutures), tel.Instruments
	m.cond, m.models = sync.NewCond(&m.mu), sync.NewCond(&m.mu)
	m.wcond = sync.NewCond(&m.wmu)
	m.startGoroutines()
	return m, nil
}

// Get returns a future's current record.
func (m *Manager) Get(ctx context.Context, tenant, id string) (Record, error) {
	m.mu.Lock()
	if e, ok := m.entries[id]; ok {
		defer m.mu.Unlock()
		if e.rec.Tenant != tenant {
			return Record{}, ErrNotFound
		}
		r := e.rec
		r.QueueState = m.sched.state(e)
		return r, nil
	}
	m.mu.Unlock()
	r, err := m.load(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if r, ok := m.lostFuture(tenant, id); ok {
			return r, nil
		}
		return Record{}, ErrNotFound
	case err != nil:
		return Record{}, err
	case r.Tenant != tenant:
		// Answered exactly as an id that was never stored: another tenant cannot tell
		// whether the id exists.
		if lr, ok := m.lostFuture(tenant, id); ok {
			return lr, nil
		}
		return Record{}, ErrNotFound
	}
	return r, nil
}

// Wait long-polls: it returns as soon as the future resolves, or after maxWait with the
// current record and its queue state.
func (m *Manager) Wait(ctx context.Context, tenant, id string, maxWait time.Duration) (Record, error) {
	m.mu.Lock()
	e, ok := m.entries[id]
	m.mu.Unlock()
	if !ok || e.rec.Tenant != tenant {
		return m.Get(ctx, tenant, id)
	}
	t := time.NewTimer(maxWait)
	defer t.Stop()
	select {
	case <-e.done:
	case <-t.C:
	case <-ctx.Done():
		return Record{}, ctx.Err()
	}
	return m.Get(ctx, tenant, id)
}

// SetNextSeq sets the next expected seq_id of an ordered queue.
func (m *Manager) SetNextSeq(queueKey string, next int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sched.setNext(queueKey, next)
	m.wake()
}

// NextSeq is the next expected seq_id of an ordered queue.
func (m *Manager) NextSeq(queueKey string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sched.nextSeq(queueKey)
}

// DropQueue fails every queued (not running) task of an ordered queue.
func (m *Manager) DropQueue(queueKey, reason string) {
	m.mu.Lock()
	victims := m.sched.drop(queueKey)
	m.mu.Unlock()
	for _, e := range victims {
		m.fail(e, reason)
	}
}

// Shutdown stops accepting tasks, lets running ones finish within ctx and fails the
// queued ones with a message that says why.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return nil
	}
	m.closing = true
	victims := m.sched.drain()
	m.cond.Broadcast()
	m.models.Broadcast()
	m.mu.Unlock()
	close(m.stop)
	for _, e := range victims {
		m.fail(e, shutdownMessage)
	}
	done := make(chan struct{})
	// Running operations still finish on the completion workers, which end only once
	// none is left.
	go func() { m.running.Wait(); m.stopCompletions(); m.workers.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("operations still running at shutdown: %w", ctx.Err())
	}
}

// shutdownMessage is the failure of an operation still queued at shutdown.
const shutdownMessage = "the server is shutting down; submit the operation again"
