package futures

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tuft-go/tuft/store/memory"
	"github.com/tuft-go/tuft/telemetry"
)

func newManager(t *testing.T, o Options) *Manager {
	t.Helper()
	if o.Store == nil {
		o.Store = memory.New()
	}
	m, err := New(o)
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
	release := make(chan struct{})
	id, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: func(context.Context) (Result, error) {
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
	go func() { time.Sleep(100 * time.Millisecond); close(release) }()
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
	slow := func(name string) func(context.Context) (Result, error) {
		return func(context.Context) (Result, error) {
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			return Result{}, nil
		}
	}
	var last string
	for i := 0; i < 50; i++ {
		last, _ = m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: slow("a")})
	}
	b, _ := m.Submit(context.Background(), Task{Tenant: "b", Pool: "p", Run: slow("b")})
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
	m1, _ := New(Options{Store: st})
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
	if want := "seq_id 1"; !containsStr(r.Failure.Message, want) {
		t.Fatalf("message %q does not name the missing %s", r.Failure.Message, want)
	}
}

func TestShutdownFailsQueuedWork(t *testing.T) {
	m, _ := New(Options{Store: memory.New()})
	block := make(chan struct{})
	running, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: func(context.Context) (Result, error) { <-block; return Result{}, nil }})
	queued, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: ok(`1`)})
	time.Sleep(50 * time.Millisecond)
	go func() { time.Sleep(100 * time.Millisecond); close(block) }()
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, _ := m.Get(context.Background(), "a", queued); r.Status != StatusFailed || !containsStr(r.Failure.Message, "shutting down") {
		t.Fatalf("queued: %+v", r)
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

func containsStr(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func BenchmarkSubmitWait(b *testing.B) {
	m, _ := New(Options{Store: memory.New(), MaxQueuedPerTenant: 1 << 20})
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
