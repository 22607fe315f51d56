package backend

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// slotLock is an adapter's lock without a parked goroutine: training operations hold it
// exclusively, samples share it, and a waiter is a function the releaser starts, in
// arrival order (a waiting exclusive holder keeps later shared ones out, as
// sync.RWMutex does). An operation of Local's Async forms takes it and submits itself
// to the model's loop in that function, and releases it in its done callback, so a
// thousand queued operations on one adapter cost a thousand closures, not goroutines.
//
// A waiter whose context ends leaves the line and is refused with the context's error
// (context.AfterFunc: a goroutine only once the context has ended).
type slotLock struct {
	mu      sync.Mutex
	readers int
	writer  bool
	waiting []*slotWaiter
}

type slotWaiter struct {
	write bool
	run   func()
	stop  func() bool // stops the context watch
}

// acquire runs run holding the lock (shared unless write): at once on this goroutine
// when it is free, else on the goroutine of the release that frees it; if ctx ends
// first, refuse gets its error instead (on the context's goroutine).
func (s *slotLock) acquire(ctx context.Context, write bool, run func(), refuse func(error)) {
	s.mu.Lock()
	if len(s.waiting) == 0 && !s.writer && (!write || s.readers == 0) {
		s.take(write)
		s.mu.Unlock()
		run()
		return
	}
	w := &slotWaiter{write: write, run: run}
	s.waiting = append(s.waiting, w)
	defer s.mu.Unlock() // after w.stop is set: admit reads it (the watch waits for s.mu)
	w.stop = context.AfterFunc(ctx, func() {
		s.mu.Lock()
		i := slices.Index(s.waiting, w)
		if i < 0 {
			s.mu.Unlock()
			return // it got the lock first
		}
		s.waiting = slices.Delete(s.waiting, i, i+1)
		next := s.admit() // a waiting writer may have kept readers behind it
		s.mu.Unlock()
		// The waiters it let in start first, so whoever hears the refusal sees them running.
		for _, run := range next {
			run()
		}
		refuse(fmt.Errorf("waiting for the adapter's earlier operations: %w", context.Cause(ctx)))
	})
}

func (s *slotLock) take(write bool) {
	if write {
		s.writer = true
	} else {
		s.readers++
	}
}

// release gives the lock back and starts the waiters it lets in.
func (s *slotLock) release(write bool) {
	s.mu.Lock()
	if write {
		s.writer = false
	} else {
		s.readers--
	}
	next := s.admit()
	s.mu.Unlock()
	for _, run := range next {
		run()
	}
}

// admit takes the lock for the waiters at the head of the line that may hold it now and
// returns their functions, to run without s.mu. Callers hold s.mu.
func (s *slotLock) admit() []func() {
	var next []func()
	for len(s.waiting) > 0 {
		w := s.waiting[0]
		if s.writer || (w.write && s.readers > 0) {
			break
		}
		s.waiting = s.waiting[1:]
		s.take(w.write)
		w.stop()
		next = append(next, w.run)
	}
	return next
}

// wait is a blocking call over an asynchronous one: start gets the done callback.
func wait[T any](start func(done func(T, error))) (T, error) {
	type outcome struct {
		v   T
		err error
	}
	ch := make(chan outcome, 1)
	start(func(v T, err error) { ch <- outcome{v, err} })
	o := <-ch
	return o.v, o.err
}

// wait1 is wait for an operation without a result.
func wait1(start func(done func(error))) error {
	_, err := wait(func(done func(struct{}, error)) { start(func(err error) { done(struct{}{}, err) }) })
	return err
}

// goAsync runs a blocking call on a goroutine of its own and hands its outcome to done:
// the Async form of an executor whose every call needs a goroutine anyway (a gRPC call,
// a test's executor).
func goAsync[T any](ctx context.Context, call func(context.Context) (T, error), done func(T, error)) {
	go func() { done(call(ctx)) }()
}
