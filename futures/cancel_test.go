package futures

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Cancel: a running task's context ends with ErrCancelled (the task decides its
// outcome), a queued one fails at once without running, a resolved one is left alone,
// an ordered one is refused, and another tenant's is not found.
func TestCancel(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Options{WorkersPerPool: 1})
	started := make(chan struct{})
	running, err := m.Submit(ctx, Task{Tenant: "a", QueueKey: "s", OpType: "sample", Pool: "p", Run: func(ctx context.Context) (Result, error) {
		close(started)
		<-ctx.Done()
		return Result{}, UserError(context.Cause(ctx))
	}})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	ran := false
	queued, err := m.Submit(ctx, Task{Tenant: "a", QueueKey: "s", SeqID: 1, OpType: "sample", Pool: "p", Run: func(context.Context) (Result, error) {
		ran = true
		return Result{}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Cancel(ctx, "b", queued, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another tenant's cancel: %v", err)
	}
	if out, err := m.Cancel(ctx, "a", queued, "cancelled by the client"); err != nil || out != CancelledQueued {
		t.Fatalf("queued: %v %v", out, err)
	}
	r := wait(t, m, "a", queued)
	if r.Status != StatusFailed || r.Failure.Category != CategoryUser || !strings.Contains(r.Failure.Message, "cancelled") {
		t.Fatalf("queued future after cancel: %+v", r)
	}
	if out, err := m.Cancel(ctx, "a", running, "x"); err != nil || out != CancelledRunning {
		t.Fatalf("running: %v %v", out, err)
	}
	r = wait(t, m, "a", running)
	if r.Status != StatusFailed || !strings.Contains(r.Failure.Message, ErrCancelled.Error()) {
		t.Fatalf("running future after cancel: %+v", r)
	}
	if out, err := m.Cancel(ctx, "a", running, "x"); err != nil || out != AlreadyDone {
		t.Fatalf("done: %v %v", out, err)
	}
	// The next task of the pool runs normally: the cancelled one freed its slot.
	next, _ := m.Submit(ctx, Task{Tenant: "a", QueueKey: "s", SeqID: 2, OpType: "sample", Pool: "p", Run: ok(`{}`)})
	if r := wait(t, m, "a", next); r.Status != StatusReady || ran {
		t.Fatalf("after cancels: %+v (cancelled task ran: %v)", r, ran)
	}
	block := make(chan struct{})
	ordered, _ := m.Submit(ctx, Task{Tenant: "a", QueueKey: "run", Ordered: true, SeqID: 1, OpType: "optim_step", Pool: "p",
		Run: func(context.Context) (Result, error) { <-block; return Result{}, nil }})
	if _, err := m.Cancel(ctx, "a", ordered, "x"); err == nil || CategoryOf(err) != CategoryUser {
		t.Fatalf("ordered cancel: %v", err)
	}
	close(block)
	wait(t, m, "a", ordered)
	if _, err := m.Cancel(ctx, "a", "req_nope", "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
}
