package futures

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tuft-go/tuft/internal/testenv/check"
	"github.com/tuft-go/tuft/store/memory"
	"github.com/tuft-go/tuft/telemetry"
)

// loopExec is an executor shaped like a model's loop (backend.Local's): submit queues the
// work and returns at once; one loop goroutine runs the queued work once the test opens
// it, drops work whose context ended (as the token scheduler does at its next step), and
// calls done on the loop goroutine, as the backend's Async methods do.
type loopExec struct {
	mu      sync.Mutex
	queue   []loopItem
	ran     []string // labels, in the order the loop ran them
	opened  bool
	kick    chan struct{}
	stopped chan struct{}
}

type loopItem struct {
	ctx   context.Context
	label string
	done  func(string, error)
}

func newLoopExec(t *testing.T) *loopExec {
	x := &loopExec{kick: make(chan struct{}, 1), stopped: make(chan struct{})}
	quit := make(chan struct{})
	go func() {
		defer close(x.stopped)
		for {
			select {
			case <-quit:
				return
			case <-x.kick:
			}
			for {
				x.mu.Lock()
				if !x.opened || len(x.queue) == 0 {
					x.mu.Unlock()
					break
				}
				it := x.queue[0]
				x.queue = x.queue[1:]
				if it.ctx.Err() == nil {
					x.ran = append(x.ran, it.label)
				}
				x.mu.Unlock()
				if err := it.ctx.Err(); err != nil {
					it.done("", err)
				} else {
					it.done(it.label, nil)
				}
			}
		}
	}()
	t.Cleanup(func() { close(quit); <-x.stopped })
	return x
}

// submit queues work; it never waits.
func (x *loopExec) submit(ctx context.Context, label string, done func(string, error)) {
	x.mu.Lock()
	x.queue = append(x.queue, loopItem{ctx, label, done})
	x.mu.Unlock()
	x.poke()
}

func (x *loopExec) poke() {
	select {
	case x.kick <- struct{}{}:
	default:
	}
}

// open lets the loop run what is queued and whatever comes later.
func (x *loopExec) open() {
	x.mu.Lock()
	x.opened = true
	x.mu.Unlock()
	x.poke()
}

func (x *loopExec) pending() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.queue)
}

func (x *loopExec) order() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]string(nil), x.ran...)
}

// modelTask is an asynchronous task whose work loopExec runs; its continuation (on a
// completion worker) encodes the loop's answer.
func modelTask(x *loopExec, tenant, queue string, seq int64, label string) Task {
	return Task{Tenant: tenant, QueueKey: queue, Ordered: queue != "", SeqID: seq, Pool: "p", OpType: "forward_backward", ModelID: "m",
		Start: func(ctx context.Context, c *Completion) {
			x.submit(ctx, label, func(out string, err error) {
				c.Finish(func() (Result, error) {
					if err != nil {
						return Result{}, err
					}
					return Result{Kind: "json", Body: []byte(fmt.Sprintf("%q", out))}, nil
				})
			})
		}}
}

// Queued and running model operations hold no goroutine each: with n of them across
// tenants handed to the executor or waiting for their seq_id's turn, the process has the
// goroutines it had before they were submitted, whether n is 50 or 500. Each run's
// operations still reach the executor in seq_id order, and every one resolves.
func TestQueuedModelOperationsHoldNoGoroutines(t *testing.T) {
	const tenants = 10
	held := func(n int) int {
		m := newManager(t, Options{MaxQueuedPerTenant: n, Workers: 4})
		x := newLoopExec(t)
		base := runtime.NumGoroutine()
		var ids []string
		ordered := map[string][]string{} // queue → labels in seq_id order
		for i := range n {
			tenant := fmt.Sprintf("t%d", i%tenants)
			var task Task
			if i%3 == 0 {
				queue := "run-" + tenant
				seq := int64(len(ordered[queue]) + 1)
				label := fmt.Sprintf("%s/%d", queue, seq)
				ordered[queue] = append(ordered[queue], label)
				task = modelTask(x, tenant, queue, seq, label)
			} else {
				task = modelTask(x, tenant, "", 0, fmt.Sprintf("%s/u%d", tenant, i))
			}
			id, err := m.Submit(context.Background(), task)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		// Every unordered operation and the first of each run are with the executor.
		started := n - (n+2)/3 + len(ordered)
		check.Eventually(t, 10*time.Second, fmt.Sprintf("%d operations with the executor", started), func() bool { return x.pending() == started })
		extra := runtime.NumGoroutine() - base
		x.open()
		for i, id := range ids {
			if r := wait(t, m, fmt.Sprintf("t%d", i%tenants), id); r.Status != StatusReady {
				t.Fatalf("operation %d: %+v", i, r.Failure)
			}
		}
		pos := map[string]int{}
		for i, l := range x.order() {
			pos[l] = i
		}
		for q, labels := range ordered {
			for k := 1; k < len(labels); k++ {
				if pos[labels[k]] < pos[labels[k-1]] {
					t.Fatalf("%s: %s ran before %s", q, labels[k], labels[k-1])
				}
			}
		}
		return extra
	}
	small, large := held(50), held(500)
	// A goroutine may be winding down from the previous round; none may grow with n.
	if large > 2 || large > small+2 {
		t.Fatalf("goroutines beyond the Manager's own: %d with 50 operations, %d with 500", small, large)
	}
}

// Model work does not need a blocking worker: with the only one held by a blocking task,
// a model operation still starts and resolves.
func TestModelWorkDoesNotWaitForTheBlockingPool(t *testing.T) {
	m := newManager(t, Options{})
	release := blocker(t, m, "p")
	defer release()
	x := newLoopExec(t)
	x.open()
	id, err := m.Submit(context.Background(), modelTask(x, "a", "", 0, "fb"))
	if err != nil {
		t.Fatal(err)
	}
	if r := wait(t, m, "a", id); r.Status != StatusReady || string(r.Result.Body) != `"fb"` {
		t.Fatalf("model operation: %+v", r)
	}
}

// Cancelling a running model operation ends the context the executor holds (cause
// ErrCancelled); the executor drops it and the future fails saying so.
func TestCancelRunningModelOperation(t *testing.T) {
	m := newManager(t, Options{})
	x := newLoopExec(t)
	var cause error
	id, err := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", OpType: "sample",
		Start: func(ctx context.Context, c *Completion) {
			x.submit(ctx, "s", func(_ string, err error) {
				cause = context.Cause(ctx)
				c.Done(Result{}, err)
			})
		}})
	if err != nil {
		t.Fatal(err)
	}
	check.Eventually(t, 10*time.Second, "the operation with the executor", func() bool { return x.pending() == 1 })
	if r, _ := m.Get(context.Background(), "a", id); r.Status != StatusRunning {
		t.Fatalf("handed to the executor but %s", r.Status)
	}
	if _, err := m.Cancel(context.Background(), "a", id); err != nil {
		t.Fatal(err)
	}
	x.open()
	r := wait(t, m, "a", id)
	if r.Status != StatusFailed || r.Failure.Category != CategoryUser || !strings.Contains(r.Failure.Message, "cancelled by the client while it ran") {
		t.Fatalf("cancelled running operation: %+v", r.Failure)
	}
	if !errors.Is(cause, ErrCancelled) {
		t.Fatalf("context cause %v", cause)
	}
	if len(x.order()) != 0 {
		t.Fatal("the executor ran a cancelled operation")
	}
}

// An executor may answer before Start returns (an immediate refusal); a second answer
// is ignored; a panicking Start or continuation fails the operation, not the process.
func TestCompletionEdgeCases(t *testing.T) {
	m := newManager(t, Options{})
	refused, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Start: func(_ context.Context, c *Completion) {
		c.Done(Result{}, catErr{CategoryUser})
		c.Done(Result{Body: []byte(`"late"`)}, nil)
	}})
	if r := wait(t, m, "a", refused); r.Status != StatusFailed || r.Failure.Category != CategoryUser {
		t.Fatalf("immediate refusal: %+v", r)
	}
	boom, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", OpType: "sample", Start: func(context.Context, *Completion) { panic("boom") }})
	if r := wait(t, m, "a", boom); r.Status != StatusFailed || !strings.Contains(r.Failure.Message, "internal error while running sample") {
		t.Fatalf("panicking Start: %+v", r)
	}
	late, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", OpType: "sample", Start: func(_ context.Context, c *Completion) {
		c.Finish(func() (Result, error) { panic("boom") })
	}})
	if r := wait(t, m, "a", late); r.Status != StatusFailed || !strings.Contains(r.Failure.Message, "boom") {
		t.Fatalf("panicking continuation: %+v", r)
	}
}

// With a running bound per tenant, a flood's model operations beyond it wait (and say
// paused_capacity) while another tenant's start at once.
func TestModelRunningBoundPerTenant(t *testing.T) {
	m := newManager(t, Options{MaxRunningPerTenant: 2})
	x := newLoopExec(t)
	var ids []string
	for i := range 5 {
		id, err := m.Submit(context.Background(), modelTask(x, "flood", "", 0, fmt.Sprint("f", i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	victim, _ := m.Submit(context.Background(), modelTask(x, "victim", "", 0, "v"))
	check.Eventually(t, 10*time.Second, "the flood's 2 operations and the victim's with the executor", func() bool { return x.pending() == 3 })
	if r, _ := m.Get(context.Background(), "victim", victim); r.Status != StatusRunning {
		t.Fatalf("victim %s", r.Status)
	}
	if r, _ := m.Get(context.Background(), "flood", ids[4]); r.QueueState != QueuePausedCapacity {
		t.Fatalf("a flood operation over the bound reports %q", r.QueueState)
	}
	x.open()
	for _, id := range ids {
		wait(t, m, "flood", id)
	}
	wait(t, m, "victim", victim)
}

// An asynchronous operation's execution span is the one a blocking one has: linked to
// the enqueuing span, with the request's keys, and ended when the continuation resolved.
func TestModelOperationExecutionSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	m := newManager(t, Options{TracerProvider: tp})
	x := newLoopExec(t)
	x.open()
	ctx, parent := tp.Tracer("test").Start(context.Background(), "POST /api/v1/forward_backward")
	ctx = telemetry.WithKeys(ctx, telemetry.Keys{TrainingRunID: "run-1", SessionID: "s-1"})
	task := modelTask(x, "a", "run-1", 1, "fb")
	task.ModelID = "run-1"
	id, _ := m.Submit(ctx, task)
	parent.End()
	wait(t, m, "a", id)
	for _, s := range rec.Ended() {
		if s.Name() != telemetry.SpanFutureExecute {
			continue
		}
		if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != parent.SpanContext().SpanID() {
			t.Fatalf("links %+v", s.Links())
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.String()
		}
		for k, want := range map[string]string{telemetry.AttrRequestID: id, telemetry.AttrOperationType: "forward_backward",
			telemetry.AttrModelID: "run-1", telemetry.AttrTrainingRunID: "run-1", telemetry.AttrSeqID: "1"} {
			if attrs[k] != want {
				t.Fatalf("attribute %s = %q, want %q (all: %v)", k, attrs[k], want, attrs)
			}
		}
		return
	}
	t.Fatal("no execution span")
}

// BenchmarkSubmitWaitModel is BenchmarkSubmitWait for model operations (Task.Start): the
// executor answers at once, so this is the futures side's own cost per operation.
func BenchmarkSubmitWaitModel(b *testing.B) {
	m, _ := New(testOptions(Options{Store: memory.New(), MaxQueuedPerTenant: 1 << 20}))
	defer m.Shutdown(context.Background())
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			id, err := m.Submit(context.Background(), Task{Tenant: fmt.Sprint(i % 4), Pool: "p", Start: func(_ context.Context, c *Completion) {
				c.Done(ok(`1`)(context.Background()))
			}})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := m.Wait(context.Background(), fmt.Sprint(i%4), id, time.Second); err != nil {
				b.Fatal(err)
			}
		}
	})
}
