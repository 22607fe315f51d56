// Package futures runs the control plane's asynchronous operations: every training and
// sampling call becomes a future with an unguessable request id. Operations of one
// training run execute strictly in seq_id order (out-of-order arrivals wait); tenants
// share each execution pool fairly (round-robin across tenants); results are persisted
// and stay retrievable for a TTL; a restart resolves every future left in flight.
package futures

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/telemetry"
)

// Status of a future.
type Status string

// Future states.
const (
	StatusPending Status = "pending"
	StatusRunning Status = "running"
	StatusReady   Status = "ready"
	StatusFailed  Status = "failed"
)

// Category is the Tinker failure category.
type Category string

// Failure categories (the lower-case values the SDK expects).
const (
	CategoryUser    Category = "user"
	CategoryServer  Category = "server"
	CategoryUnknown Category = "unknown"
)

// Queue states reported by try_again replies.
const (
	QueueActive          = "active"
	QueuePausedCapacity  = "paused_capacity"
	QueuePausedRateLimit = "paused_rate_limit"
)

// Result is an operation's encoded result.
type Result struct {
	ContentType string `json:"content_type"`
	Kind        string `json:"kind"`
	Body        []byte `json:"body"`
}

// Failure is a failed operation's error, as the client sees it.
type Failure struct {
	Message  string   `json:"message"`
	Category Category `json:"category"`
}

// Record is a future's persisted state.
type Record struct {
	ID          string    `json:"id"`
	Tenant      string    `json:"tenant"`
	QueueKey    string    `json:"queue_key"`
	OpType      string    `json:"op_type"`
	ModelID     string    `json:"model_id"`
	Pool        string    `json:"pool"`
	SeqID       int64     `json:"seq_id"`
	Ordered     bool      `json:"ordered"`
	Status      Status    `json:"status"`
	QueueState  string    `json:"queue_state,omitempty"`
	PayloadHash string    `json:"payload_hash,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	DoneAt      time.Time `json:"done_at,omitzero"`
	Result      *Result   `json:"result,omitempty"`
	Failure     *Failure  `json:"failure,omitempty"`
	// Abandoned marks a future that a restart failed before it ran. Its seq_id may be
	// submitted again; when a later seq_id of the queue arrives instead, the queue moves
	// past it (the client has seen the failure and will not resend it).
	Abandoned bool `json:"abandoned,omitempty"`
	// Refused marks a future recorded for an operation refused at submission: it settles
	// the seq_id so the queue's next operation runs without waiting for it.
	Refused bool `json:"refused,omitempty"`
	// Owner is the API replica that runs the future ("" for a single server).
	Owner string `json:"owner,omitempty"`
}

// Done reports whether the future has resolved.
func (r *Record) Done() bool { return r.Status == StatusReady || r.Status == StatusFailed }

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
	Run     func(ctx context.Context) (Result, error)
}

// Options configure a Manager.
type Options struct {
	Store              store.Store
	TTL                time.Duration // result retention after completion (default 24 h)
	MaxQueuedPerTenant int           // unfinished futures per tenant (default 256)
	WorkersPerPool     int           // concurrent operations per pool (default 1)
	// SeqGapTimeout is how long an ordered task that arrived ahead of its predecessor waits
	// for it (default 5 min, the SDK's submission retry budget). Refused and abandoned
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
}

// DefaultSeqGapTimeout is Options.SeqGapTimeout's default: the Tinker SDK retries a
// submission for up to 5 minutes, so a predecessor can legitimately arrive that late.
const DefaultSeqGapTimeout = 5 * time.Minute

// Errors of Submit and Wait.
var (
	ErrNotFound     = errors.New("future not found")
	ErrShuttingDown = errors.New("the server is shutting down")
)

// ConflictError: the same (queue, seq_id) was submitted with a different payload.
type ConflictError struct {
	QueueKey   string
	SeqID      int64
	ExistingID string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("seq_id %d of %s was already submitted with a different payload (request %s); each operation needs a new seq_id", e.SeqID, e.QueueKey, e.ExistingID)
}

// SeqError: an ordered task's seq_id is below what the queue expects next.
type SeqError struct {
	QueueKey string
	SeqID    int64
	Next     int64
}

func (e *SeqError) Error() string {
	return fmt.Sprintf("seq_id %d of %s is behind the run: it was executed, refused, or passed over as never sent (the next expected seq_id is %d)", e.SeqID, e.QueueKey, e.Next)
}

// OverLimitError: the tenant has too many unfinished futures.
type OverLimitError struct {
	Limit      int
	RetryAfter time.Duration
}

func (e *OverLimitError) Error() string {
	return fmt.Sprintf("too many queued operations: at most %d unfinished operations per tenant; retry after %s", e.Limit, e.RetryAfter)
}

// CategoryOf returns the category of an operation error: errors that implement
// Category() report their own; everything else is a server error.
func CategoryOf(err error) Category {
	var c interface{ Category() Category }
	if errors.As(err, &c) {
		return c.Category()
	}
	return CategoryServer
}

type userError struct{ err error }

func (u userError) Error() string      { return u.err.Error() }
func (u userError) Unwrap() error      { return u.err }
func (u userError) Category() Category { return CategoryUser }

// UserError marks err as the client's fault.
func UserError(err error) error { return userError{err} }

// entry is an in-memory future.
type entry struct {
	rec    Record
	task   Task
	link   trace.SpanContext
	keys   telemetry.Keys
	done   chan struct{}
	queued time.Time
	// With a queued store: the acceptance is written only if the result is not queued
	// within acceptDelay (accept), and never after the result (resultQueued). Both are
	// guarded by Manager.mu.
	accept       *time.Timer
	resultQueued bool
	// cancel ends a running task's context (Cancel); cancelled records a Cancel that
	// came before the task's context existed. Both are guarded by Manager.mu.
	cancel    context.CancelCauseFunc
	cancelled bool
}

// acceptDelay is how long an operation may stay unresolved before its acceptance is
// written to a store that queues writes. Most control-plane operations resolve sooner,
// so they cost one write (the result), not two.
const acceptDelay = 20 * time.Millisecond

// orderedQueue buffers the tasks of one ordering domain until their turn.
type orderedQueue struct {
	next     int64
	waiting  map[int64]*entry
	waitedAt time.Time // when the queue started waiting for next
	// refused holds seq_ids refused at submission, ahead of next: each is skipped when
	// its turn comes (the entry is already resolved, failed).
	refused map[int64]*entry
	// abandoned holds seq_ids whose futures a restart failed before they ran: the queue
	// skips one as soon as a later seq_id waits, since the client saw the failure and will
	// not resend it, but a resubmission that comes first runs.
	abandoned map[int64]bool
	// skipBelow: an in-order sender (Task.InOrder) has submitted seq_ids up to here, so
	// any lower seq_id that never arrived never will; the queue moves past them.
	skipBelow int64
}

// pool runs the runnable tasks of one pool, round-robin across tenants.
type pool struct {
	name    string
	tenants map[string][]*entry // runnable FIFO per tenant
	order   []string            // round-robin ring of tenants with runnable work
	rr      int
	running int
}

// Manager owns every future of this process.
type Manager struct {
	o      Options
	log    *slog.Logger
	now    func() time.Time
	tracer trace.Tracer
	ins    *telemetry.Instruments

	mu        sync.Mutex
	cond      *sync.Cond
	entries   map[string]*entry
	byKey     map[string]string // queue/seq → id (dedupe)
	queues    map[string]*orderedQueue
	pools     map[string]*pool
	perTenant map[string]int
	closing   bool
	recovered map[string]int64      // per ordered queue: one past the highest seq_id resolved before a restart
	prior     map[priorKey]priorRef // queue/seq → future resolved earlier, only in the store now (dedupe)
	doneList  []*entry              // resolved entries in completion order, for expiry
	started   time.Time             // when this Manager (process) started
	queued    bool                  // the store queues writes (store.Queuer)
	running   sync.WaitGroup
	workers   sync.WaitGroup
	stop      chan struct{}
}

// New creates a Manager.
func New(o Options) (*Manager, error) {
	if o.Store == nil {
		return nil, errors.New("futures: a store is required")
	}
	if o.TTL <= 0 {
		o.TTL = 24 * time.Hour
	}
	if o.MaxQueuedPerTenant <= 0 {
		o.MaxQueuedPerTenant = 256
	}
	if o.WorkersPerPool <= 0 {
		o.WorkersPerPool = 1
	}
	if o.SeqGapTimeout <= 0 {
		o.SeqGapTimeout = DefaultSeqGapTimeout
	}
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
	m := &Manager{o: o, log: o.Logger, now: o.Now, started: time.Now(), queued: queued, entries: map[string]*entry{}, byKey: map[string]string{}, prior: map[priorKey]priorRef{},
		queues: map[string]*orderedQueue{}, pools: map[string]*pool{}, perTenant: map[string]int{}, stop: make(chan struct{})}
	tel := telemetry.NewSettings(telemetry.WithTracerProvider(o.TracerProvider), telemetry.WithInstruments(o.Instruments))
	m.tracer, m.ins = tel.Tracer(telemetry.ScopeFutures), tel.Instruments
	m.cond = sync.NewCond(&m.mu)
	m.workers.Add(1)
	go m.janitor()
	return m, nil
}

const keyFuture = "future/"

// dedupeWindow bounds how long a resolved operation's (queue, seq_id) is remembered for
// dedupe once it lives only in the store: clients resubmit within seconds or minutes (the
// SDK's retries), and the memory this takes grows with the operation rate. After it, a
// resubmission of a finished seq_id is refused as already executed instead of answered
// with the old request id; the result itself stays retrievable for the future TTL.
const dedupeWindow = time.Hour

// priorRef points at a resolved future that lives only in the store, for dedupe of
// resubmissions. It holds no pointers (nor does its map key, a hash of the queue and
// seq_id), so the garbage collector never scans the index however large it grows; a
// hash collision is caught by checking the record found.
type priorRef struct {
	id   [idLen]byte // the request id without "req_"
	done int64       // unix nanoseconds
}

type priorKey [16]byte

func priorKeyOf(ik string) priorKey {
	var k priorKey
	h1, h2 := fnv.New64a(), fnv.New64()
	h1.Write([]byte(ik))
	h2.Write([]byte(ik))
	binary.LittleEndian.PutUint64(k[:8], h1.Sum64())
	binary.LittleEndian.PutUint64(k[8:], h2.Sum64())
	return k
}

// inPrior reports whether ik is in the store-only dedupe index. Callers hold m.mu.
func (m *Manager) inPrior(ik string) bool {
	_, ok := m.prior[priorKeyOf(ik)]
	return ok
}

func newPriorRef(id string, done time.Time) (priorRef, bool) {
	var r priorRef
	s, ok := strings.CutPrefix(id, "req_")
	if !ok || len(s) != len(r.id) {
		return r, false
	}
	copy(r.id[:], s)
	r.done = done.UnixNano()
	return r, true
}

func (r priorRef) requestID() string { return "req_" + string(r.id[:]) }

// indexKey names an ordered operation for dedupe. The index lives in memory only: it is
// rebuilt from the future records on restart, so a write costs one key, not two.
func indexKey(queue string, seq int64) string { return queue + "/" + strconv.FormatInt(seq, 10) }

// idAlphabet is base32 in ASCII order, so ids compare like the times they start with.
const idAlphabet = "234567abcdefghijklmnopqrstuvwxyz"

// idLen is the length of an id after "req_".
const idLen = 26

// newID returns "req_" + 10 characters of the current time in milliseconds + 16
// random characters (80 bits). Ids sort by creation time, and the time tells a restarted
// process which unknown ids an earlier process handed out (see lostFuture).
func newID() string {
	b := make([]byte, idLen)
	if _, err := rand.Read(b[10:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	ms := uint64(time.Now().UnixMilli())
	for i := 9; i >= 0; i-- {
		b[i] = idAlphabet[ms&31]
		ms >>= 5
	}
	for i := 10; i < len(b); i++ {
		b[i] = idAlphabet[b[i]&31]
	}
	return "req_" + string(b)
}

// idTime decodes the creation time newID put in an id.
func idTime(id string) (time.Time, bool) {
	s, ok := strings.CutPrefix(id, "req_")
	if !ok || len(s) != idLen {
		return time.Time{}, false
	}
	var ms uint64
	for i := 0; i < 10; i++ {
		d := strings.IndexByte(idAlphabet, s[i])
		if d < 0 {
			return time.Time{}, false
		}
		ms = ms<<5 | uint64(d)
	}
	return time.UnixMilli(int64(ms)), true
}

func (m *Manager) persist(ctx context.Context, rec *Record) error {
	b, ttl, err := m.encode(rec)
	if err != nil {
		return err
	}
	return m.o.Store.Set(ctx, keyFuture+rec.ID, b, ttl)
}

func (m *Manager) encode(rec *Record) ([]byte, time.Duration, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, 0, fmt.Errorf("encode future %s: %w", rec.ID, err)
	}
	var ttl time.Duration
	if rec.Done() {
		ttl = m.o.TTL
	}
	return b, ttl, nil
}

// persistAccepted writes a still-unresolved entry's record, unless its result is
// already queued (which it must never overwrite). The write is queued under m.mu, so a
// result queued later lands after it.
func (m *Manager) persistAccepted(e *entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.resultQueued {
		return
	}
	rec := e.rec
	rec.QueueState = ""
	id := rec.ID
	m.persistThen(context.Background(), &rec, func(err error) {
		if err != nil {
			m.log.Error("persist accepted future", "request_id", id, "error", err)
		}
	})
}

// persistThen writes rec and calls then with the outcome once it is durable, without
// blocking the caller: through the store's write queue where it has one (then runs on
// the commit goroutine), else on a goroutine of its own.
func (m *Manager) persistThen(ctx context.Context, rec *Record, then func(error)) {
	m.running.Add(1)
	b, ttl, err := m.encode(rec)
	if err != nil {
		then(err)
		m.running.Done()
		return
	}
	if m.queued {
		store.SetQueued(ctx, m.o.Store, keyFuture+rec.ID, b, ttl, func(err error) {
			then(err)
			m.running.Done()
		})
		return
	}
	go func() {
		defer m.running.Done()
		then(m.o.Store.Set(ctx, keyFuture+rec.ID, b, ttl))
	}()
}

// Recover resolves every future a previous process left pending or running: it fails
// them with a message that says the server restarted. Their seq_ids may be submitted
// again, but never hold up the queue: a later seq_id skips them (the SDK, having seen the
// failure, never resends one). It returns how many it failed.
func (m *Manager) Recover(ctx context.Context) (int, error) {
	var stale []Record
	hw := map[string]int64{}
	abandoned := map[string][]int64{}
	prior := map[priorKey]priorRef{}
	err := m.o.Store.Scan(ctx, keyFuture, func(_ string, v []byte) error {
		var r Record
		if err := json.Unmarshal(v, &r); err != nil {
			m.log.Warn("skipping unreadable future record", "error", err)
			return nil
		}
		if r.Owner != "" && r.Owner != m.o.Owner {
			return nil // another replica's: alive there, not abandoned
		}
		switch {
		case !r.Done():
			stale = append(stale, r)
		case r.Abandoned: // never ran: skippable, see orderedQueue.abandoned
			if r.Ordered {
				abandoned[r.QueueKey] = append(abandoned[r.QueueKey], r.SeqID)
			}
		default:
			if r.Ordered && r.SeqID+1 > hw[r.QueueKey] {
				hw[r.QueueKey] = r.SeqID + 1
			}
			if r.QueueKey != "" {
				if ref, ok := newPriorRef(r.ID, r.DoneAt); ok {
					prior[priorKeyOf(indexKey(r.QueueKey, r.SeqID))] = ref
				}
			}
		}
		return nil
	})
	for _, r := range stale {
		if r.Ordered {
			abandoned[r.QueueKey] = append(abandoned[r.QueueKey], r.SeqID)
		}
	}
	m.mu.Lock()
	m.recovered = hw
	for ik, ref := range prior {
		m.prior[ik] = ref
	}
	for key, seqs := range abandoned {
		q := m.queue(key)
		for _, s := range seqs {
			q.abandoned[s] = true
		}
	}
	m.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("scan futures: %w", err)
	}
	for i := range stale {
		r := &stale[i]
		r.Status, r.Abandoned = StatusFailed, true
		r.DoneAt = m.now()
		r.Failure = &Failure{Category: CategoryServer,
			Message: fmt.Sprintf("the server restarted while this %s operation was pending, so it never ran; submit it again", r.OpType)}
		b, err := json.Marshal(r)
		if err != nil {
			return i, err
		}
		if err := m.o.Store.Set(ctx, keyFuture+r.ID, b, m.o.TTL); err != nil {
			return i, fmt.Errorf("fail stale future %s: %w", r.ID, err)
		}
	}
	return len(stale), nil
}

// RecoveredNextSeq is one past the highest seq_id of queueKey that was resolved before
// the restart Recover handled (0 when none): the persisted results are the ground truth
// of how far an ordered queue got.
func (m *Manager) RecoveredNextSeq(queueKey string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recovered[queueKey]
}

// SetNextSeq sets the next expected seq_id of an ordered queue.
func (m *Manager) SetNextSeq(queueKey string, next int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queue(queueKey)
	q.next = next
	q.waitedAt = m.now()
	m.promote(queueKey, q)
}

// NextSeq is the next expected seq_id of an ordered queue.
func (m *Manager) NextSeq(queueKey string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.queue(queueKey).next
}

func (m *Manager) queue(key string) *orderedQueue {
	q, ok := m.queues[key]
	if !ok {
		q = &orderedQueue{next: 1, waiting: map[int64]*entry{}, waitedAt: m.now(), refused: map[int64]*entry{}, abandoned: map[int64]bool{}}
		m.queues[key] = q
	}
	return q
}

func (m *Manager) pool(name string) *pool {
	p, ok := m.pools[name]
	if !ok {
		p = &pool{name: name, tenants: map[string][]*entry{}}
		m.pools[name] = p
		for i := 0; i < m.o.WorkersPerPool; i++ {
			m.workers.Add(1)
			go m.worker(p)
		}
	}
	return p
}

// Submit queues a task and returns its request id.
func (m *Manager) Submit(ctx context.Context, t Task) (string, error) {
	if t.Run == nil {
		return "", errors.New("futures: task has no Run function")
	}
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return "", ErrShuttingDown
	}
	var ik string
	if t.QueueKey != "" {
		ik = indexKey(t.QueueKey, t.SeqID)
		if id, ok := m.byKey[ik]; ok {
			if e, ok := m.entries[id]; ok && e.rec.Tenant == t.Tenant {
				m.mu.Unlock()
				if e.rec.PayloadHash == t.PayloadHash {
					return id, nil
				}
				return "", &ConflictError{QueueKey: t.QueueKey, SeqID: t.SeqID, ExistingID: id}
			}
		} else if !t.Ordered && m.inPrior(ik) {
			// Resolved earlier (before a restart, or long enough ago to live only in the
			// store): the same resubmission gets the same id. (An ordered one is below
			// its queue's next seq_id, and the check there finds it.)
			m.mu.Unlock()
			if id, rec, ok := m.lookupIndex(ctx, ik, t.Tenant); ok {
				if rec.PayloadHash == t.PayloadHash {
					return id, nil
				}
				return "", &ConflictError{QueueKey: t.QueueKey, SeqID: t.SeqID, ExistingID: id}
			}
			m.mu.Lock()
		}
	}
	if t.Ordered {
		if q := m.queue(t.QueueKey); t.SeqID < q.next {
			next := q.next // read under the lock: workers advance it
			m.mu.Unlock()
			// A resubmission of an operation finished before a restart: look it up.
			if id, rec, ok := m.lookupIndex(ctx, ik, t.Tenant); ok {
				if rec.PayloadHash == t.PayloadHash {
					return id, nil
				}
				return "", &ConflictError{QueueKey: t.QueueKey, SeqID: t.SeqID, ExistingID: id}
			}
			return "", &SeqError{QueueKey: t.QueueKey, SeqID: t.SeqID, Next: next}
		}
	}
	if n := m.perTenant[t.Tenant]; n >= m.o.MaxQueuedPerTenant {
		// Computed before the unlock: workers change the pools under m.mu.
		ra := m.retryAfter(t.Pool)
		m.mu.Unlock()
		return "", &OverLimitError{Limit: m.o.MaxQueuedPerTenant, RetryAfter: ra}
	}
	now := m.now()
	e := &entry{
		rec: Record{ID: newID(), Owner: m.o.Owner, Tenant: t.Tenant, QueueKey: t.QueueKey, OpType: t.OpType, ModelID: t.ModelID, Pool: t.Pool,
			SeqID: t.SeqID, Ordered: t.Ordered, Status: StatusPending, QueueState: QueueActive, PayloadHash: t.PayloadHash, CreatedAt: now},
		task: t, link: trace.SpanContextFromContext(ctx), keys: telemetry.KeysFrom(ctx), done: make(chan struct{}), queued: now,
	}
	m.entries[e.rec.ID] = e
	if ik != "" {
		m.byKey[ik] = e.rec.ID
	}
	m.perTenant[t.Tenant]++
	rec := e.rec
	m.mu.Unlock()

	// Where the store queues writes in order, the acceptance is queued, not waited for:
	// the result is written after it, and only the result must be durable before anyone
	// sees it. A crash before the acceptance commits looks, after the restart, like a
	// future the restart abandoned (see lostFuture). Other stores write it now.
	if m.queued {
		m.mu.Lock()
		e.accept = time.AfterFunc(acceptDelay, func() { m.persistAccepted(e) })
		m.mu.Unlock()
	} else if err := m.persist(ctx, &rec); err != nil {
		m.mu.Lock()
		delete(m.entries, rec.ID)
		if ik != "" && m.byKey[ik] == rec.ID {
			delete(m.byKey, ik)
		}
		m.perTenant[t.Tenant]--
		m.mu.Unlock()
		return "", fmt.Errorf("persist future: %w", err)
	}
	ins := m.ins
	created := telemetry.AddAttrs(telemetry.MAttrOperationType, t.OpType)
	if ins.ModelIDAttribute && t.ModelID != "" {
		created = telemetry.AddAttrs(telemetry.MAttrOperationType, t.OpType, telemetry.MAttrModelID, t.ModelID)
	}
	ins.FuturesCreated.Add(ctx, 1, created...)
	ins.FuturesQueueLength.Add(ctx, 1, telemetry.AddAttrs(telemetry.MAttrQueueState, QueueActive)...)

	m.mu.Lock()
	if t.Ordered {
		q := m.queue(t.QueueKey)
		q.waiting[t.SeqID] = e
		if t.InOrder && t.SeqID > q.skipBelow {
			q.skipBelow = t.SeqID
		}
		m.promote(t.QueueKey, q)
	} else {
		m.enqueue(e)
	}
	m.mu.Unlock()
	return rec.ID, nil
}

// lookupIndex finds an operation resolved earlier that lives only in the store.
func (m *Manager) lookupIndex(ctx context.Context, ik, tenant string) (string, Record, bool) {
	if ik == "" {
		return "", Record{}, false
	}
	m.mu.Lock()
	ref, ok := m.prior[priorKeyOf(ik)]
	m.mu.Unlock()
	if !ok {
		return "", Record{}, false
	}
	b, err := m.o.Store.Get(ctx, keyFuture+ref.requestID())
	if err != nil {
		return "", Record{}, false
	}
	var r Record
	if json.Unmarshal(b, &r) != nil || r.Tenant != tenant || indexKey(r.QueueKey, r.SeqID) != ik {
		return "", Record{}, false // another tenant's, or a hash collision
	}
	return r.ID, r, true
}

// retryAfter estimates when a tenant over its limit may try again. Callers hold m.mu.
func (m *Manager) retryAfter(poolName string) time.Duration {
	d := time.Second
	if p, ok := m.pools[poolName]; ok {
		n := 0
		for _, q := range p.tenants {
			n += len(q)
		}
		// A rough estimate: a tenth of a second per queued operation ahead, capped.
		if est := time.Duration(n) * 100 * time.Millisecond; est > d {
			d = est
		}
	}
	if d > 30*time.Second {
		d = 30 * time.Second
	}
	return d
}

// promote moves the ordered queue's next task, if it has arrived, to its pool, first
// moving past seq_ids that are settled without running: refused at submission, or
// abandoned by a restart while a later seq_id waits. Callers hold m.mu.
func (m *Manager) promote(key string, q *orderedQueue) {
	for {
		if e, ok := q.waiting[q.next]; ok {
			delete(q.waiting, q.next)
			delete(q.abandoned, q.next)
			m.enqueue(e)
			break
		}
		if e, ok := q.refused[q.next]; ok {
			delete(q.refused, q.next)
			m.perTenant[e.rec.Tenant]--
		} else if _, inFlight := m.byKey[indexKey(key, q.next)]; inFlight || len(q.waiting) == 0 {
			break // running (next moves when it finishes), or nothing is waiting behind it
		} else if q.abandoned[q.next] || q.next < q.skipBelow {
			delete(q.abandoned, q.next)
		} else {
			break
		}
		q.next++
		q.waitedAt = m.now()
	}
	if len(q.refused) > 0 {
		// A gap timeout may have moved next past refused seq_ids: they settle nothing now.
		for s, e := range q.refused {
			if s < q.next {
				delete(q.refused, s)
				m.perTenant[e.rec.Tenant]--
			}
		}
	}
}

// Refuse settles the seq_id of an ordered operation that was refused at submission (bad
// input, an unsupported field), so that the queue's next operation does not wait for it:
// the SDK has reserved the seq_id and never sends it again. The refusal is recorded as a
// failed future (persisted, so a restart still knows the seq_id was used) and the queue
// skips the seq_id when its turn comes. It returns the future's id, or "" when there is
// nothing to settle: the seq_id is already executed, or already taken by a submitted
// operation. A refusal ahead of the queue's turn counts against the tenant's limit until
// its turn comes, so refusals cannot pile up without bound.
func (m *Manager) Refuse(ctx context.Context, t Task, reason Failure) (string, error) {
	if !t.Ordered || t.QueueKey == "" {
		return "", errors.New("futures: only an ordered operation has a seq_id to settle")
	}
	ik := indexKey(t.QueueKey, t.SeqID)
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return "", ErrShuttingDown
	}
	q := m.queue(t.QueueKey)
	if _, taken := m.byKey[ik]; taken || t.SeqID < q.next || m.inPrior(ik) {
		m.mu.Unlock()
		return "", nil
	}
	ahead := t.SeqID > q.next
	if ahead && m.perTenant[t.Tenant] >= m.o.MaxQueuedPerTenant {
		m.mu.Unlock()
		return "", &OverLimitError{Limit: m.o.MaxQueuedPerTenant, RetryAfter: time.Second}
	}
	now := m.now()
	e := &entry{
		rec: Record{ID: newID(), Owner: m.o.Owner, Tenant: t.Tenant, QueueKey: t.QueueKey, OpType: t.OpType, ModelID: t.ModelID, Pool: t.Pool,
			SeqID: t.SeqID, Ordered: true, Status: StatusFailed, PayloadHash: t.PayloadHash, CreatedAt: now, DoneAt: now,
			Failure: &reason, Refused: true},
		task: t, done: make(chan struct{}), queued: now, resultQueued: true,
	}
	e.task.Run = nil
	close(e.done)
	m.entries[e.rec.ID] = e
	m.byKey[ik] = e.rec.ID
	m.doneList = append(m.doneList, e)
	m.perTenant[t.Tenant]++
	q.refused[t.SeqID] = e
	delete(q.abandoned, t.SeqID)
	if t.InOrder && t.SeqID > q.skipBelow {
		q.skipBelow = t.SeqID
	}
	m.promote(t.QueueKey, q)
	rec := e.rec
	m.mu.Unlock()
	if err := m.persist(ctx, &rec); err != nil {
		// The seq_id is settled in memory all the same; only a restart would forget it.
		m.log.Error("persist refused operation", "request_id", rec.ID, "error", err)
	}
	m.ins.FuturesCompleted.Add(ctx, 1, telemetry.AddAttrs(telemetry.MAttrOperationType, t.OpType, telemetry.MAttrStatus, string(StatusFailed))...)
	return rec.ID, nil
}

// enqueue makes e runnable in its pool. Callers hold m.mu.
func (m *Manager) enqueue(e *entry) {
	p := m.pool(e.task.Pool)
	t := e.rec.Tenant
	if len(p.tenants[t]) == 0 {
		p.order = append(p.order, t)
	}
	p.tenants[t] = append(p.tenants[t], e)
	m.cond.Broadcast()
}

// next picks the next runnable entry of p, round-robin across tenants. Callers hold m.mu.
func (p *pool) next() *entry {
	if len(p.order) == 0 {
		return nil
	}
	if p.rr >= len(p.order) {
		p.rr = 0
	}
	t := p.order[p.rr]
	q := p.tenants[t]
	e := q[0]
	if len(q) == 1 {
		delete(p.tenants, t)
		p.order = append(p.order[:p.rr], p.order[p.rr+1:]...)
	} else {
		p.tenants[t] = q[1:]
		p.rr++
	}
	return e
}

func (m *Manager) worker(p *pool) {
	defer m.workers.Done()
	for {
		m.mu.Lock()
		var e *entry
		for {
			if m.closing {
				m.mu.Unlock()
				return
			}
			if e = p.next(); e != nil {
				break
			}
			m.cond.Wait()
		}
		p.running++
		m.running.Add(1)
		e.rec.Status, e.rec.StartedAt = StatusRunning, m.now()
		m.mu.Unlock()
		m.execute(e)
		m.mu.Lock()
		p.running--
		m.mu.Unlock()
		m.running.Done()
	}
}

// execute runs one task under its span and records its outcome.
func (m *Manager) execute(e *entry) {
	ctx := telemetry.WithKeys(context.Background(), e.keys)
	ctx = telemetry.WithKeys(ctx, telemetry.Keys{RequestID: e.rec.ID, OperationType: e.rec.OpType})
	wait := e.rec.StartedAt.Sub(e.queued)
	// The execution continues the enqueuing request's trace (so one trace runs from the
	// HTTP span down to the model executor) and also links to the enqueuing span, the
	// conventional marker of an asynchronous hand-off.
	var opts []trace.SpanStartOption
	switch {
	case e.link.IsSampled():
		ctx = trace.ContextWithRemoteSpanContext(ctx, e.link)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: e.link, Attributes: []attribute.KeyValue{attribute.String(telemetry.AttrLink, telemetry.LinkEnqueuedBy)}}))
	case e.link.IsValid():
		// Sampled out at the request, so sampled out here too: no link to build, but the
		// trace context stays for the logs of the execution.
		ctx = trace.ContextWithRemoteSpanContext(ctx, e.link)
	default:
		opts = append(opts, trace.WithNewRoot())
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	m.mu.Lock()
	e.cancel = cancel
	if e.cancelled {
		cancel(ErrCancelled)
	}
	m.mu.Unlock()
	ctx, span := m.tracer.Start(ctx, telemetry.SpanFutureExecute, opts...)
	if span.IsRecording() {
		attrs := telemetry.AppendKeyAttributes(make([]attribute.KeyValue, 0, telemetry.MaxKeyAttributes+3), telemetry.KeysFrom(ctx))
		attrs = append(attrs, attribute.String(telemetry.AttrModelID, e.rec.ModelID),
			attribute.Float64(telemetry.AttrQueueWaitMs, float64(wait.Microseconds())/1000))
		if e.rec.Ordered {
			attrs = append(attrs, attribute.Int64(telemetry.AttrSeqID, e.rec.SeqID))
		}
		span.SetAttributes(attrs...)
	}
	ins := m.ins
	opAttr := telemetry.RecordAttrs(telemetry.MAttrOperationType, e.rec.OpType)
	ins.FuturesWaitTime.Record(ctx, wait.Seconds(), opAttr...)

	start := time.Now()
	res, err := m.run(ctx, e)
	ins.FuturesExecutionTime.Record(ctx, time.Since(start).Seconds(), opAttr...)
	telemetry.End(span, err)

	m.mu.Lock()
	e.rec.DoneAt = m.now()
	if err != nil {
		e.rec.Status = StatusFailed
		e.rec.Failure = &Failure{Message: err.Error(), Category: CategoryOf(err)}
	} else {
		e.rec.Status = StatusReady
		e.rec.Result = &res
	}
	e.noteResultQueued()
	rec := e.rec
	m.mu.Unlock()
	// The result is persisted while the worker moves on: consecutive results then share
	// one store commit. Waiters are woken, and the queue's next seq_id released, only
	// once the result is durable.
	m.persistThen(context.Background(), &rec, func(perr error) {
		if perr != nil {
			m.log.Error("persist future result", "request_id", rec.ID, "error", perr)
		}
		m.finish(e, rec.Status)
	})
}

// run calls the task, turning a panic into a server failure.
func (m *Manager) run(ctx context.Context, e *entry) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			m.log.ErrorContext(ctx, "operation panicked", "request_id", e.rec.ID, "op", e.rec.OpType, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("internal error while running %s: %v", e.rec.OpType, v)
		}
	}()
	return e.task.Run(ctx)
}

// finish wakes waiters, frees the tenant's slot and lets the next seq_id run.
func (m *Manager) finish(e *entry, st Status) {
	m.mu.Lock()
	m.perTenant[e.rec.Tenant]--
	if e.rec.Ordered {
		q := m.queue(e.rec.QueueKey)
		if e.rec.SeqID >= q.next {
			// A failed operation consumes its seq_id too: otherwise the client's pipeline
			// (which already sent the next seq_id) would wait forever.
			q.next = e.rec.SeqID + 1
			q.waitedAt = m.now()
		}
		m.promote(e.rec.QueueKey, q)
	}
	close(e.done)
	e.task.Run = nil // release what the operation's closure holds (request data)
	m.doneList = append(m.doneList, e)
	m.mu.Unlock()
	ins := m.ins
	ins.FuturesQueueLength.Add(context.Background(), -1, telemetry.AddAttrs(telemetry.MAttrQueueState, QueueActive)...)
	ins.FuturesCompleted.Add(context.Background(), 1, telemetry.AddAttrs(telemetry.MAttrOperationType, e.rec.OpType, telemetry.MAttrStatus, string(st))...)
}

// fail resolves a not-yet-running entry as failed. Callers must not hold m.mu.
func (m *Manager) fail(e *entry, msg string) { m.failAs(e, msg, CategoryServer) }

// failAs is fail with the failure's category.
func (m *Manager) failAs(e *entry, msg string, cat Category) {
	m.mu.Lock()
	e.rec.Status, e.rec.DoneAt = StatusFailed, m.now()
	e.rec.Failure = &Failure{Message: msg, Category: cat}
	e.noteResultQueued()
	rec := e.rec
	m.mu.Unlock()
	if err := m.persist(context.Background(), &rec); err != nil {
		m.log.Error("persist failed future", "request_id", rec.ID, "error", err)
	}
	m.finish(e, StatusFailed)
}

// noteResultQueued records that the entry's final record is about to be written, so a
// pending acceptance write is skipped. Callers hold m.mu.
func (e *entry) noteResultQueued() {
	e.resultQueued = true
	if e.accept != nil {
		e.accept.Stop()
	}
}

// queueState describes why a pending entry has not run. Callers hold m.mu.
func (m *Manager) queueState(e *entry) string {
	switch e.rec.Status {
	case StatusRunning:
		return QueueActive
	case StatusPending:
	default:
		return ""
	}
	if m.perTenant[e.rec.Tenant] >= m.o.MaxQueuedPerTenant {
		return QueuePausedRateLimit
	}
	if e.rec.Ordered {
		if q := m.queues[e.rec.QueueKey]; q != nil && e.rec.SeqID > q.next {
			return QueuePausedCapacity // waiting for an earlier seq_id
		}
	}
	if p := m.pools[e.task.Pool]; p != nil {
		if q := p.tenants[e.rec.Tenant]; len(q) > 0 && q[0] == e && p.running < m.o.WorkersPerPool {
			return QueueActive
		}
		if p.running >= m.o.WorkersPerPool {
			return QueuePausedCapacity
		}
	}
	return QueueActive
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
		r.QueueState = m.queueState(e)
		return r, nil
	}
	m.mu.Unlock()
	b, err := m.o.Store.Get(ctx, keyFuture+id)
	if errors.Is(err, store.ErrNotFound) {
		if r, ok := m.lostFuture(tenant, id); ok {
			return r, nil
		}
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, fmt.Errorf("read future %s: %w", id, err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("future %s record is corrupt: %w", id, err)
	}
	if r.Tenant != tenant {
		// Answered exactly as an id that was never stored: another tenant cannot tell
		// whether the id exists.
		if lr, ok := m.lostFuture(tenant, id); ok {
			return lr, nil
		}
		return Record{}, ErrNotFound
	}
	return r, nil
}

// lostFuture answers for a future an earlier process accepted but crashed before
// recording (its acceptance was still in the store's write queue): the id's timestamp is
// from before this process started and within the TTL. It never ran to a durable result,
// so it is reported like the futures Recover abandons. Nothing about the id's owner is
// known or revealed: every caller gets the same answer.
func (m *Manager) lostFuture(tenant, id string) (Record, bool) {
	if !m.queued {
		return Record{}, false
	}
	created, ok := idTime(id)
	// Ids carry milliseconds: one made in the millisecond this process started is ours.
	start := m.started.Truncate(time.Millisecond)
	if !ok || !created.Before(start) || start.Sub(created) > m.o.TTL {
		return Record{}, false
	}
	return Record{ID: id, Tenant: tenant, Status: StatusFailed, Abandoned: true, CreatedAt: created, DoneAt: m.started,
		Failure: &Failure{Category: CategoryServer,
			Message: "the server restarted before this operation was recorded, so it never completed; submit it again"}}, true
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

// DropQueue fails every queued (not running) task of an ordered queue.
func (m *Manager) DropQueue(queueKey, reason string) {
	m.mu.Lock()
	var victims []*entry
	if q, ok := m.queues[queueKey]; ok {
		for _, e := range q.waiting {
			victims = append(victims, e)
		}
		q.waiting = map[int64]*entry{}
		for _, e := range q.refused { // already resolved: only their slots are freed
			m.perTenant[e.rec.Tenant]--
		}
		q.refused = map[int64]*entry{}
	}
	for _, p := range m.pools {
		for t, q := range p.tenants {
			keep := q[:0]
			for _, e := range q {
				if e.rec.QueueKey == queueKey {
					victims = append(victims, e)
				} else {
					keep = append(keep, e)
				}
			}
			if len(keep) == 0 {
				delete(p.tenants, t)
				for i, name := range p.order {
					if name == t {
						p.order = append(p.order[:i], p.order[i+1:]...)
						break
					}
				}
			} else {
				p.tenants[t] = keep
			}
		}
	}
	m.mu.Unlock()
	for _, e := range victims {
		m.fail(e, reason)
	}
}

// janitor fails ordered tasks whose predecessor never arrives, and forgets resolved
// futures from memory after the TTL (they stay in the store until it expires them).
func (m *Manager) janitor() {
	defer m.workers.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		now := m.now()
		var victims []*entry
		var missing []int64
		m.mu.Lock()
		for _, q := range m.queues {
			if len(q.waiting) > 0 && now.Sub(q.waitedAt) > m.o.SeqGapTimeout {
				for _, e := range q.waiting {
					victims = append(victims, e)
					missing = append(missing, q.next)
				}
				q.waiting = map[int64]*entry{}
			}
		}
		window := min(m.o.TTL, dedupeWindow)
		for ik, ref := range m.prior {
			if now.Sub(time.Unix(0, ref.done)) > window {
				delete(m.prior, ik)
			}
		}
		// Expire resolved entries oldest first; the walk stops at the first live one, so
		// the lock is held for the expired entries only, not for all of them.
		// After memoryTTL a result is served from the store; only its dedupe reference
		// stays in memory (until the TTL), which keeps the heap, and so the garbage
		// collector's work, bounded under load.
		keep := min(m.o.TTL, m.o.KeepInMemory)
		n := 0
		for _, e := range m.doneList {
			if now.Sub(e.rec.DoneAt) <= keep {
				break
			}
			n++
			delete(m.entries, e.rec.ID)
			if e.rec.QueueKey != "" {
				ik := indexKey(e.rec.QueueKey, e.rec.SeqID)
				if m.byKey[ik] == e.rec.ID {
					delete(m.byKey, ik)
					if now.Sub(e.rec.DoneAt) <= min(m.o.TTL, dedupeWindow) {
						if ref, ok := newPriorRef(e.rec.ID, e.rec.DoneAt); ok {
							m.prior[priorKeyOf(ik)] = ref
						}
					}
				}
			}
		}
		if n > 0 {
			m.doneList = append(m.doneList[:0:0], m.doneList[n:]...)
		}
		m.mu.Unlock()
		for i, e := range victims {
			m.fail(e, fmt.Sprintf("seq_id %d of %s waited %s for seq_id %d, which never arrived", e.rec.SeqID, e.rec.QueueKey, m.o.SeqGapTimeout, missing[i]))
		}
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
	var victims []*entry
	for _, q := range m.queues {
		for _, e := range q.waiting {
			victims = append(victims, e)
		}
		q.waiting = map[int64]*entry{}
	}
	for _, p := range m.pools {
		for _, q := range p.tenants {
			victims = append(victims, q...)
		}
		p.tenants, p.order = map[string][]*entry{}, nil
	}
	m.cond.Broadcast()
	m.mu.Unlock()
	close(m.stop)
	for _, e := range victims {
		m.fail(e, "the server is shutting down; submit the operation again")
	}
	done := make(chan struct{})
	go func() { m.running.Wait(); m.workers.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("operations still running at shutdown: %w", ctx.Err())
	}
}
