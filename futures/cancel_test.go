package futures

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// blocker occupies a pool's only worker until released.
func blocker(t *testing.T, m *Manager, pool string) (release func()) {
	t.Helper()
	started, gate := make(chan struct{}), make(chan struct{})
	if _, err := m.Submit(context.Background(), Task{Tenant: "other", Pool: pool, OpType: "sample", Run: func(context.Context) (Result, error) {
		close(started)
		<-gate
		return Result{}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	<-started
	return func() { close(gate) }
}

// A queued future cancelled by its tenant fails at once without running; another
// tenant cannot cancel it; cancelling a finished one changes nothing.
func TestCancelQueuedFuture(t *testing.T) {
	m := newManager(t, Options{})
	release := blocker(t, m, "p")
	var ran atomic.Bool
	id, err := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", OpType: "sample", Run: func(context.Context) (Result, error) {
		ran.Store(true)
		return Result{}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Cancel(context.Background(), "b", id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another tenant's cancel: %v", err)
	}
	r, err := m.Cancel(context.Background(), "a", id)
	if err != nil || r.Status != StatusFailed || r.Failure.Category != CategoryUser || !strings.Contains(r.Failure.Message, "cancelled") {
		t.Fatalf("cancelled queued future: %+v, %v", r, err)
	}
	release()
	done, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", OpType: "sample", Run: ok(`{}`)})
	wait(t, m, "a", done)
	if ran.Load() {
		t.Fatal("a cancelled future ran")
	}
	if r, err := m.Cancel(context.Background(), "a", done); err != nil || r.Status != StatusReady {
		t.Fatalf("cancelling a finished future: %+v, %v", r, err)
	}
}

// A running future's context ends when it is cancelled (with ErrCancelled as the cause)
// and the future fails saying so.
func TestCancelRunningFuture(t *testing.T) {
	m := newManager(t, Options{})
	started := make(chan struct{})
	var cause error
	id, err := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", OpType: "sample", Run: func(ctx context.Context) (Result, error) {
		close(started)
		<-ctx.Done()
		cause = context.Cause(ctx)
		return Result{}, ctx.Err()
	}})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := m.Cancel(context.Background(), "a", id); err != nil {
		t.Fatal(err)
	}
	r := wait(t, m, "a", id)
	if r.Status != StatusFailed || r.Failure.Category != CategoryUser || !strings.Contains(r.Failure.Message, "cancelled by the client while it ran") {
		t.Fatalf("cancelled running future: %+v", r.Failure)
	}
	if !errors.Is(cause, ErrCancelled) {
		t.Fatalf("context cause %v", cause)
	}
}

// Every future has a deadline: a running one sees its context end at it, a queued one
// past it fails without running, and the failure names the limit.
func TestDeadlines(t *testing.T) {
	m := newManager(t, Options{})
	id, err := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", OpType: "sample", Timeout: 20 * time.Millisecond,
		Run: func(ctx context.Context) (Result, error) {
			<-ctx.Done()
			return Result{}, ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	r := wait(t, m, "a", id)
	if r.Status != StatusFailed || r.Failure.Category != CategoryServer || !strings.Contains(r.Failure.Message, "deadline") ||
		!strings.Contains(r.Failure.Message, "limits.sample_timeout_seconds") || r.Deadline.IsZero() {
		t.Fatalf("running past its deadline: %+v %+v", r, r.Failure)
	}

	now := time.Now()
	var mu atomic.Int64
	mu.Store(now.UnixNano())
	m2 := newManager(t, Options{Now: func() time.Time { return time.Unix(0, mu.Load()) }})
	release := blocker(t, m2, "p")
	var ran atomic.Bool
	queued, _ := m2.Submit(context.Background(), Task{Tenant: "a", Pool: "p", OpType: "forward_backward", Timeout: time.Minute,
		Run: func(context.Context) (Result, error) { ran.Store(true); return Result{}, nil }})
	mu.Add(int64(2 * time.Minute)) // the clock passes its deadline while it waits
	release()
	r = wait(t, m2, "a", queued)
	if ran.Load() || r.Status != StatusFailed || !strings.Contains(r.Failure.Message, "deadline") {
		t.Fatalf("queued past its deadline: ran %v, %+v", ran.Load(), r.Failure)
	}
	if d := r.Deadline.Sub(r.CreatedAt); d != time.Minute {
		t.Fatalf("deadline %s after creation, want 1m", d)
	}
}

// An ordered future cancelled while it waits for an earlier seq_id fails when its turn
// comes, without running, and the queue goes on in order.
func TestCancelOrderedFutureKeepsTheOrder(t *testing.T) {
	m := newManager(t, Options{})
	var ran []int64
	run := func(seq int64) func(context.Context) (Result, error) {
		return func(context.Context) (Result, error) { ran = append(ran, seq); return Result{}, nil }
	}
	id2, _ := m.Submit(context.Background(), Task{Tenant: "a", QueueKey: "run", Ordered: true, SeqID: 2, Pool: "p", OpType: "forward_backward", Run: run(2)})
	if r, err := m.Cancel(context.Background(), "a", id2); err != nil || r.Done() {
		t.Fatalf("cancel of a future waiting for seq_id 1: %+v %v (it must wait for its turn)", r, err)
	}
	id1, _ := m.Submit(context.Background(), Task{Tenant: "a", QueueKey: "run", Ordered: true, SeqID: 1, Pool: "p", OpType: "forward_backward", Run: run(1)})
	id3, _ := m.Submit(context.Background(), Task{Tenant: "a", QueueKey: "run", Ordered: true, SeqID: 3, Pool: "p", OpType: "forward_backward", Run: run(3)})
	wait(t, m, "a", id1)
	if r := wait(t, m, "a", id2); r.Status != StatusFailed || !strings.Contains(r.Failure.Message, "cancelled") {
		t.Fatalf("seq 2: %+v", r.Failure)
	}
	wait(t, m, "a", id3)
	if len(ran) != 2 || ran[0] != 1 || ran[1] != 3 {
		t.Fatalf("ran %v, want [1 3]", ran)
	}
}

// With a running bound per tenant, one tenant's flood leaves workers for another
// tenant, whose task runs at once; the flood's waiting tasks report paused_capacity.
func TestRunningBoundPerTenant(t *testing.T) {
	m := newManager(t, Options{Workers: 4, MaxRunningPerTenant: 2})
	gate := make(chan struct{})
	var running atomic.Int32
	var ids []string
	for i := 0; i < 5; i++ {
		id, err := m.Submit(context.Background(), Task{Tenant: "flood", Pool: "p", OpType: "forward_backward", Run: func(context.Context) (Result, error) {
			running.Add(1)
			<-gate
			return Result{}, nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	victim, _ := m.Submit(context.Background(), Task{Tenant: "victim", Pool: "p", OpType: "forward_backward", Run: ok(`{}`)})
	if r := wait(t, m, "victim", victim); r.Status != StatusReady {
		t.Fatalf("victim: %+v", r)
	}
	if n := running.Load(); n > 2 {
		t.Fatalf("%d of the flood's tasks ran at once, bound 2", n)
	}
	r, _ := m.Get(context.Background(), "flood", ids[4])
	if r.QueueState != QueuePausedCapacity {
		t.Fatalf("a flood task over the bound reports %q", r.QueueState)
	}
	close(gate)
	for _, id := range ids {
		wait(t, m, "flood", id)
	}
}
