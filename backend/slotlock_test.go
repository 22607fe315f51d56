package backend

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// The adapter lock without goroutines: exclusive holders exclude everyone, shared ones
// share, waiters go in arrival order (a waiting writer keeps later readers out), and a
// waiter whose context ends leaves the line, is refused with its error, and lets in the
// readers it was keeping out.
func TestSlotLockOrderAndCancellation(t *testing.T) {
	var l slotLock
	var mu sync.Mutex
	var ran []string
	note := func(s string) func() { return func() { mu.Lock(); ran = append(ran, s); mu.Unlock() } }
	refused := make(chan error, 1)
	ctx := context.Background()
	l.acquire(ctx, false, note("r1"), nil) // free: runs at once
	l.acquire(ctx, false, note("r2"), nil) // shared: runs at once
	cctx, cancel := context.WithCancel(ctx)
	l.acquire(cctx, true, note("w1"), func(err error) { refused <- err }) // waits for the readers
	l.acquire(ctx, false, note("r3"), nil)                                // waits behind w1
	l.acquire(ctx, true, note("w2"), nil)                                 // waits behind r3
	if !slices.Equal(ran, []string{"r1", "r2"}) {
		t.Fatalf("ran %v, want r1 r2 at once and the rest waiting", ran)
	}
	cancel()
	select {
	case err := <-refused:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled waiter was never refused")
	}
	mu.Lock()
	got := slices.Clone(ran)
	mu.Unlock()
	if !slices.Equal(got, []string{"r1", "r2", "r3"}) {
		t.Fatalf("after w1 left: ran %v, want r3 let in beside the readers", got)
	}
	l.release(false)
	l.release(false)
	if !slices.Equal(ran, []string{"r1", "r2", "r3"}) {
		t.Fatalf("w2 ran while r3 held the lock: %v", ran)
	}
	l.release(false) // r3
	if !slices.Equal(ran, []string{"r1", "r2", "r3", "w2"}) {
		t.Fatalf("ran %v, want w2 last", ran)
	}
	l.acquire(ctx, false, note("r4"), nil)
	l.release(true) // w2
	if !slices.Equal(ran, []string{"r1", "r2", "r3", "w2", "r4"}) {
		t.Fatalf("ran %v, want r4 after w2", ran)
	}
}
