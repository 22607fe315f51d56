package futures

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/store/memory"
	"github.com/tuft-go/tuft/telemetry"
)

// testOptions fills o's zero numbers from config.Default() (New keeps no defaults of its
// own), and runs one worker per pool unless o asks for more: these tests are written
// against the order one worker gives.
func testOptions(o Options) Options {
	d := OptionsFrom(config.Default(""))
	if o.TTL == 0 {
		o.TTL = d.TTL
	}
	if o.MaxQueuedPerTenant == 0 {
		o.MaxQueuedPerTenant = d.MaxQueuedPerTenant
	}
	if o.SeqGapTimeout == 0 {
		o.SeqGapTimeout = d.SeqGapTimeout
	}
	if o.DefaultTimeout == 0 {
		o.DefaultTimeout = d.DefaultTimeout
	}
	if o.Workers == 0 {
		o.Workers = 1
	}
	return o
}

func newManager(t *testing.T, o Options) *Manager {
	t.Helper()
	if o.Store == nil {
		o.Store = memory.New()
	}
	m, err := New(testOptions(o))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Shutdown(ctx)
	})
	return m
}

func ok(body string) func(context.Context) (Result, error) {
	return func(context.Context) (Result, error) {
		return Result{ContentType: "application/json", Kind: "json", Body: []byte(body)}, nil
	}
}

func wait(t *testing.T, m *Manager, tenant, id string) Record {
	t.Helper()
	r, err := m.Wait(context.Background(), tenant, id, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Done() {
		t.Fatalf("future %s still %s", id, r.Status)
	}
	return r
}

func TestOrderedQueueRunsInSeqOrder(t *testing.T) {
	m := newManager(t, Options{})
	var mu sync.Mutex
	var order []int64
	ids := make([]string, 21)
	seqs := rand.Perm(20)
	var wg sync.WaitGroup
	for _, s := range seqs {
		seq := int64(s + 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := m.Submit(context.Background(), Task{Tenant: "a", QueueKey: "run", Ordered: true, SeqID: seq, Pool: "p", OpType: "forward",
				Run: func(context.Context) (Result, error) {
					mu.Lock()
					order = append(order, seq)
					mu.Unlock()
					return Result{}, nil
				}})
			if err != nil {
				t.Error(err)
			}
			ids[seq] = id
		}()
	}
	wg.Wait()
	for s := 1; s <= 20; s++ {
		wait(t, m, "a", ids[s])
	}
	for i, s := range order {
		if s != int64(i+1) {
			t.Fatalf("execution order %v", order)
		}
	}
	if m.NextSeq("run") != 21 {
		t.Fatalf("next seq %d", m.NextSeq("run"))
	}
}

func TestDedupeAndConflict(t *testing.T) {
	m := newManager(t, Options{})
	task := Task{Tenant: "a", QueueKey: "run", Ordered: true, SeqID: 1, Pool: "p", PayloadHash: "h1", Run: ok(`{}`)}
	id1, err := m.Submit(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := m.Submit(context.Background(), task)
	if err != nil || id1 != id2 {
		t.Fatalf("resubmission: %s %s %v", id1, id2, err)
	}
	task.PayloadHash = "h2"
	var ce *ConflictError
	if _, err := m.Submit(context.Background(), task); !errors.As(err, &ce) || ce.ExistingID != id1 {
		t.Fatalf("conflict: %v", err)
	}
	wait(t, m, "a", id1)
	// After it ran: a stale seq with a new payload is a SeqError or conflict, never a new run.
	task.SeqID, task.PayloadHash = 1, "h3"
	if _, err := m.Submit(context.Background(), task); err == nil {
		t.Fatal("an executed seq_id was accepted again")
	}
}

func TestLongPollTimesOutThenWakesOnCompletion(t *testing.T) {
	m := newManager(t, Options{})
	started, release := make(chan struct{}), make(chan struct{})
	id, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: func(context.Context) (Result, error) {
		close(started)
		<-release
		return Result{Body: []byte("x")}, nil
	}})
	start := time.Now()
	r, err := m.Wait(context.Background(), "a", id, 300*time.Millisecond)
	if err != nil || r.Done() || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("long poll: %+v %v after %v", r.Status, err, time.Since(start))
	}
	if r.QueueState == "" {
		t.Fatal("no queue state")
	}
	// The operation is running, unresolved: released now, it resolves while (or just
	// before) the long poll waits, and the poll answers at once either way.
	<-started
	go close(release)
	start = time.Now()
	r, _ = m.Wait(context.Background(), "a", id, 5*time.Second)
	if !r.Done() || time.Since(start) > 2*time.Second {
		t.Fatalf("did not wake promptly: %s after %v", r.Status, time.Since(start))
	}
}

type catErr struct{ c Category }

func (e catErr) Error() string      { return "bad input" }
func (e catErr) Category() Category { return e.c }

func TestFailuresCarryTheirCategory(t *testing.T) {
	m := newManager(t, Options{})
	u, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: func(context.Context) (Result, error) { return Result{}, catErr{CategoryUser} }})
	s, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: func(context.Context) (Result, error) { return Result{}, errors.New("disk full") }})
	p, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: func(context.Context) (Result, error) { panic("boom") }})
	for id, want := range map[string]Category{u: CategoryUser, s: CategoryServer, p: CategoryServer} {
		r := wait(t, m, "a", id)
		if r.Status != StatusFailed || r.Failure.Category != want {
			t.Fatalf("%s: %+v", id, r.Failure)
		}
	}
}

func TestOtherTenantsFutureIsNotFound(t *testing.T) {
	m := newManager(t, Options{})
	id, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: ok(`1`)})
	wait(t, m, "a", id)
	if _, err := m.Wait(context.Background(), "b", id, time.Millisecond); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other tenant: %v", err)
	}
	if _, err := m.Get(context.Background(), "a", "req_nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}

func TestFairShareAcrossTenants(t *testing.T) {
	m := newManager(t, Options{})
	var mu sync.Mutex
	var order []string
	// Tenant a's first operation holds the pool's only worker until all of a's queue and
	// then b's operation are submitted.
	gate := make(chan struct{})
	record := func(name string) func(context.Context) (Result, error) {
		return func(context.Context) (Result, error) {
			<-gate
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			return Result{}, nil
		}
	}
	var last string
	for i := 0; i < 50; i++ {
		last, _ = m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: record("a")})
	}
	b, _ := m.Submit(context.Background(), Task{Tenant: "b", Pool: "p", Run: record("b")})
	close(gate)
	wait(t, m, "b", b)
	mu.Lock()
	before := 0
	for _, n := range order {
		if n == "b" {
			break
		}
		before++
	}
	mu.Unlock()
	if before > 2 {
		t.Fatalf("tenant b waited behind %d of tenant a's operations", before)
	}
	wait(t, m, "a", last)
}

func TestTenantLimitIs429WithRetryAfter(t *testing.T) {
	m := newManager(t, Options{MaxQueuedPerTenant: 3})
	block := make(chan struct{})
	defer close(block)
	for i := 0; i < 3; i++ {
		if _, err := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: func(context.Context) (Result, error) { <-block; return Result{}, nil }}); err != nil {
			t.Fatal(err)
		}
	}
	var ol *OverLimitError
	if _, err := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: ok(`1`)}); !errors.As(err, &ol) || ol.RetryAfter < time.Second {
		t.Fatalf("over limit: %v", err)
	}
	if _, err := m.Submit(context.Background(), Task{Tenant: "b", Pool: "p", Run: ok(`1`)}); err != nil {
		t.Fatalf("another tenant is not limited: %v", err)
	}
}

func TestRecoverFailsInFlightAndKeepsResults(t *testing.T) {
	st := memory.New()
	m1, _ := New(testOptions(Options{Store: st}))
	done, _ := m1.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: ok(`"kept"`)})
	wait(t, m1, "a", done)
	pending, _ := m1.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 5, Pool: "p", Run: ok(`1`)})
	// The process "dies": a new manager on the same store.
	m2 := newManager(t, Options{Store: st})
	n, err := m2.Recover(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("recover: %d %v", n, err)
	}
	r, err := m2.Get(context.Background(), "a", pending)
	if err != nil || r.Status != StatusFailed || r.Failure.Category != CategoryServer {
		t.Fatalf("in-flight future after restart: %+v %v", r, err)
	}
	r, err = m2.Get(context.Background(), "a", done)
	if err != nil || string(r.Result.Body) != `"kept"` {
		t.Fatalf("completed future after restart: %+v %v", r, err)
	}
	// The failed seq_id may be submitted again.
	m2.SetNextSeq("r", 5)
	id, err := m2.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 5, Pool: "p", Run: ok(`2`)})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, m2, "a", id)
}

func TestSeqGapTimeoutFailsWaiters(t *testing.T) {
	m := newManager(t, Options{SeqGapTimeout: 200 * time.Millisecond})
	id, _ := m.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 3, Pool: "p", Run: ok(`1`)})
	r, err := m.Wait(context.Background(), "a", id, 5*time.Second)
	if err != nil || r.Status != StatusFailed || r.Failure == nil {
		t.Fatalf("gap: %+v %v", r, err)
	}
	if want := "seq_id 1"; !strings.Contains(r.Failure.Message, want) {
		t.Fatalf("message %q does not name the missing %s", r.Failure.Message, want)
	}
}

func TestShutdownFailsQueuedWork(t *testing.T) {
	m, _ := New(testOptions(Options{Store: memory.New()}))
	started, block := make(chan struct{}), make(chan struct{})
	running, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: func(context.Context) (Result, error) {
		close(started)
		<-block
		return Result{}, nil
	}})
	queued, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: ok(`1`)})
	<-started
	shut := make(chan error, 1)
	go func() { shut <- m.Shutdown(context.Background()) }()
	// Shutdown fails the queued operation first, then waits for the running one: only
	// then is the running one released.
	if r := wait(t, m, "a", queued); r.Status != StatusFailed || !strings.Contains(r.Failure.Message, "shutting down") {
		t.Fatalf("queued: %+v", r)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned while an operation was running: %v", err)
	default:
	}
	close(block)
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if r, _ := m.Get(context.Background(), "a", running); r.Status != StatusReady {
		t.Fatalf("running work must finish: %+v", r)
	}
	if _, err := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: ok(`1`)}); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("submit after shutdown: %v", err)
	}
}

func TestExecutionSpanIsLinkedToTheEnqueuingSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	m := newManager(t, Options{TracerProvider: tp})
	ctx, parent := tp.Tracer("test").Start(context.Background(), "POST /api/v1/forward_backward")
	ctx = telemetry.WithKeys(ctx, telemetry.Keys{TrainingRunID: "run-1", SessionID: "s-1"})
	id, _ := m.Submit(ctx, Task{Tenant: "a", QueueKey: "run-1", Ordered: true, SeqID: 1, Pool: "p", OpType: "forward_backward", ModelID: "run-1", Run: ok(`1`)})
	parent.End()
	wait(t, m, "a", id)
	var found bool
	for _, s := range rec.Ended() {
		if s.Name() != telemetry.SpanFutureExecute {
			continue
		}
		found = true
		if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != parent.SpanContext().SpanID() {
			t.Fatalf("links %+v", s.Links())
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.String()
		}
		for k, want := range map[string]string{telemetry.AttrRequestID: id, telemetry.AttrOperationType: "forward_backward",
			telemetry.AttrModelID: "run-1", telemetry.AttrTrainingRunID: "run-1", telemetry.AttrSessionID: "s-1", telemetry.AttrSeqID: "1"} {
			if attrs[k] != want {
				t.Fatalf("attribute %s = %q, want %q (all: %v)", k, attrs[k], want, attrs)
			}
		}
		if _, ok := attrs[telemetry.AttrQueueWaitMs]; !ok {
			t.Fatal("no queue wait attribute")
		}
	}
	if !found {
		t.Fatal("no execution span")
	}
}

func BenchmarkSubmitWait(b *testing.B) {
	m, _ := New(testOptions(Options{Store: memory.New(), MaxQueuedPerTenant: 1 << 20}))
	defer m.Shutdown(context.Background())
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			id, err := m.Submit(context.Background(), Task{Tenant: fmt.Sprint(i % 4), Pool: "p", Run: ok(`1`)})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := m.Wait(context.Background(), fmt.Sprint(i%4), id, time.Second); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// blocking returns a Run function that waits for release, and a function that releases it.
func blocking() (func(context.Context) (Result, error), func()) {
	ch := make(chan struct{})
	var once sync.Once
	return func(ctx context.Context) (Result, error) {
			select {
			case <-ch:
			case <-ctx.Done():
			}
			return Result{Body: []byte(`"released"`)}, nil
		}, func() {
			once.Do(func() { close(ch) })
		}
}

// A seq_id refused at submission is settled: the next seq_id runs as soon as its
// predecessors are done, without waiting for the refused one, and the refusal is a
// failed future that says why.
func TestRefusedSeqIDDoesNotHoldItsSuccessor(t *testing.T) {
	// A gap timeout far beyond the test: nothing may depend on it.
	m := newManager(t, Options{SeqGapTimeout: time.Hour})
	run, release := blocking()
	defer release()
	first, err := m.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 1, Pool: "p", Run: run})
	if err != nil {
		t.Fatal(err)
	}
	// seq 2 is refused while seq 1 still runs: it is settled when its turn comes.
	refused, err := m.Refuse(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 2, Pool: "p", PayloadHash: "bad"},
		Failure{Message: "unknown loss_fn \"nope\"", Category: CategoryUser})
	if err != nil || refused == "" {
		t.Fatalf("refuse: %q %v", refused, err)
	}
	third, err := m.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 3, Pool: "p", Run: ok(`3`)})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := m.Get(context.Background(), "a", third); r.Status != StatusPending {
		t.Fatalf("seq 3 ran before seq 1 finished: %s", r.Status)
	}
	release()
	wait(t, m, "a", first)
	if r := wait(t, m, "a", third); r.Status != StatusReady {
		t.Fatalf("seq 3 after a refused seq 2: %+v", r)
	}
	r := wait(t, m, "a", refused)
	if r.Status != StatusFailed || r.Failure.Category != CategoryUser || !strings.Contains(r.Failure.Message, "nope") || !r.Refused {
		t.Fatalf("refused future: %+v", r)
	}
	// Refusing at the queue's turn settles at once; a refusal of an executed or taken
	// seq_id settles nothing.
	if id, err := m.Refuse(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 4, Pool: "p"}, Failure{Message: "x"}); err != nil || id == "" {
		t.Fatalf("refuse at the turn: %q %v", id, err)
	}
	if n := m.NextSeq("r"); n != 5 {
		t.Fatalf("next seq after refusing the current one: %d, want 5", n)
	}
	for _, seq := range []int64{1, 3, 4} {
		if id, err := m.Refuse(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: seq, Pool: "p"}, Failure{Message: "x"}); err != nil || id != "" {
			t.Fatalf("refusing used seq %d: %q %v, want nothing to settle", seq, id, err)
		}
	}
	// Refused entries free their tenant slot.
	m.mu.Lock()
	n := m.sched.open["a"]
	m.mu.Unlock()
	if n != 0 {
		t.Fatalf("tenant slots held after everything settled: %d", n)
	}
}

// A refusal far ahead of the queue counts against the tenant's limit until its turn.
func TestRefusalsAheadCountAgainstTheTenantLimit(t *testing.T) {
	m := newManager(t, Options{MaxQueuedPerTenant: 2, SeqGapTimeout: time.Hour})
	for seq := int64(10); seq < 12; seq++ {
		if _, err := m.Refuse(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: seq, Pool: "p"}, Failure{Message: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	var ol *OverLimitError
	if _, err := m.Refuse(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 12, Pool: "p"}, Failure{Message: "x"}); !errors.As(err, &ol) {
		t.Fatalf("third refusal ahead: %v, want the tenant limit", err)
	}
	// DropQueue frees them.
	m.DropQueue("r", "gone")
	if _, err := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: ok(`1`)}); err != nil {
		t.Fatalf("slots not freed by DropQueue: %v", err)
	}
}

// After a restart, futures the restart failed do not hold their successors: the SDK saw
// the failure and sends the next seq_id, never the failed one again.
func TestAbandonedSeqIDsDoNotHoldLaterOnes(t *testing.T) {
	st := memory.New()
	m1, _ := New(testOptions(Options{Store: st}))
	t.Cleanup(func() { _ = m1.Shutdown(context.Background()) })
	id1, _ := m1.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 1, Pool: "p", Run: ok(`1`)})
	wait(t, m1, "a", id1)
	run, release := blocking()
	defer release()
	pending := []string{}
	for seq := int64(2); seq <= 3; seq++ {
		id, err := m1.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: seq, Pool: "p", Run: run})
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, id)
	}
	// The process "dies" with seq 2 running and seq 3 queued.
	m2 := newManager(t, Options{Store: st, SeqGapTimeout: time.Hour})
	if n, err := m2.Recover(context.Background()); err != nil || n != 2 {
		t.Fatalf("recover: %d %v", n, err)
	}
	m2.SetNextSeq("r", m2.RecoveredNextSeq("r"))
	if got := m2.NextSeq("r"); got != 2 {
		t.Fatalf("next after restart: %d, want 2 (abandoned seq_ids may be resubmitted)", got)
	}
	for _, id := range pending {
		if r, _ := m2.Get(context.Background(), "a", id); r.Status != StatusFailed || !r.Abandoned {
			t.Fatalf("abandoned future: %+v", r)
		}
	}
	id4, err := m2.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 4, Pool: "p", Run: ok(`4`)})
	if err != nil {
		t.Fatal(err)
	}
	if r := wait(t, m2, "a", id4); r.Status != StatusReady {
		t.Fatalf("seq 4 after abandoned 2 and 3: %+v", r)
	}
}

// A refusal is persisted: after a restart the queue continues after it.
func TestRefusalSurvivesRestart(t *testing.T) {
	st := memory.New()
	m1, _ := New(testOptions(Options{Store: st}))
	id1, _ := m1.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 1, Pool: "p", Run: ok(`1`)})
	wait(t, m1, "a", id1)
	if _, err := m1.Refuse(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 2, Pool: "p"}, Failure{Message: "bad", Category: CategoryUser}); err != nil {
		t.Fatal(err)
	}
	_ = m1.Shutdown(context.Background())
	m2 := newManager(t, Options{Store: st})
	if _, err := m2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := m2.RecoveredNextSeq("r"); got != 3 {
		t.Fatalf("recovered next seq: %d, want 3", got)
	}
}

// An in-order sender (the Tinker SDK) never sends a lower seq_id after a higher one: a
// seq_id it reserved but failed to send (a client-side error) does not hold the next.
// Other senders may arrive out of order, and the queue waits for them.
func TestInOrderSenderDoesNotWaitForUnsentSeqIDs(t *testing.T) {
	m := newManager(t, Options{SeqGapTimeout: time.Hour})
	run, release := blocking()
	defer release()
	first, _ := m.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 1, Pool: "p", InOrder: true, Run: run})
	// seq 2 arrives while seq 1 runs: it waits for seq 1, which is in flight.
	second, _ := m.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 2, Pool: "p", InOrder: true, Run: ok(`2`)})
	if r, _ := m.Get(context.Background(), "a", second); r.Status != StatusPending {
		t.Fatalf("seq 2 ran while seq 1 was running: %s", r.Status)
	}
	release()
	wait(t, m, "a", first)
	wait(t, m, "a", second)
	// seq 3 was reserved by the client and never sent: seq 4 runs at once.
	fourth, _ := m.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 4, Pool: "p", InOrder: true, Run: ok(`4`)})
	if r := wait(t, m, "a", fourth); r.Status != StatusReady {
		t.Fatalf("seq 4 after an unsent seq 3: %+v", r)
	}
	// An out-of-order sender's later seq_id waits for the missing one.
	sixth, _ := m.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 6, Pool: "p", Run: ok(`6`)})
	if r, _ := m.Wait(context.Background(), "a", sixth, 50*time.Millisecond); r.Status != StatusPending {
		t.Fatalf("an out-of-order seq 6 did not wait for seq 5: %s", r.Status)
	}
	fifth, _ := m.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 5, Pool: "p", Run: ok(`5`)})
	wait(t, m, "a", fifth)
	wait(t, m, "a", sixth)
}

// New keeps no defaults: a zero number is a wiring bug named by its config key, and
// OptionsFrom(config.Default()) builds a Manager.
func TestNewTakesItsNumbersFromTheConfig(t *testing.T) {
	o := OptionsFrom(config.Default(""))
	o.Store = memory.New()
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Shutdown(context.Background())
	o.TTL = 0
	if got := panicOf(func() { _, _ = New(o) }); !strings.Contains(got, "persistence.future_ttl_seconds") {
		t.Fatalf("New with a zero TTL: panic %q does not name persistence.future_ttl_seconds", got)
	}
}

func panicOf(f func()) (msg string) {
	defer func() { msg = fmt.Sprint(recover()) }()
	f()
	return ""
}
