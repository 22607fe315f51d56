package futures

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testClock is a clock the test moves; the janitor's own ticks then change nothing the
// test has not moved past.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *testClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Add moves the clock by d and returns the new time.
func (c *testClock) Add(d time.Duration) time.Time { return time.Unix(0, c.ns.Add(int64(d))) }

func TestSweepFailsSeqGapsAtTheTimeout(t *testing.T) {
	clock := newTestClock()
	m := newManager(t, Options{SeqGapTimeout: time.Minute, Now: clock.Now})
	id, _ := m.Submit(context.Background(), Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 3, Pool: "p", Run: ok(`1`)})
	m.sweep(clock.Add(time.Minute))
	if r, _ := m.Get(context.Background(), "a", id); r.Status != StatusPending {
		t.Fatalf("failed at exactly the gap timeout: %+v", r)
	}
	m.sweep(clock.Add(time.Millisecond))
	r := wait(t, m, "a", id)
	if r.Status != StatusFailed || !strings.Contains(r.Failure.Message, "seq_id 1") {
		t.Fatalf("after the gap timeout: %+v", r)
	}
	if got := m.NextSeq("r"); got != 4 {
		t.Fatalf("next after the failed waiter: %d", got)
	}
}

// A resolved future's dedupe reference outlives its stay in memory until the dedupe
// window (or the TTL) ends; after it, a resubmission is behind the queue.
func TestSweepForgetsDedupeReferencesAfterTheWindow(t *testing.T) {
	clock := newTestClock()
	m := newManager(t, Options{KeepInMemory: time.Second, Now: clock.Now})
	task := Task{Tenant: "a", QueueKey: "r", Ordered: true, SeqID: 1, Pool: "p", PayloadHash: "h", Run: ok(`1`)}
	id, _ := m.Submit(context.Background(), task)
	wait(t, m, "a", id)
	m.sweep(clock.Add(2 * time.Second)) // out of memory, into the store-only index
	if again, err := m.Submit(context.Background(), task); err != nil || again != id {
		t.Fatalf("resubmission from the store-only index: %q %v, want %q", again, err, id)
	}
	m.sweep(clock.Add(dedupeWindow))
	var se *SeqError
	if _, err := m.Submit(context.Background(), task); !errors.As(err, &se) || se.Next != 2 {
		t.Fatalf("resubmission after the dedupe window: %v, want a SeqError", err)
	}
}
