package backend

import (
	"context"
	"sync"
)

// slotLock is an adapter's lock without a parked goroutine: training operations hold it
// exclusively, samples share it, and a waiter is a function the releaser starts, in
// arrival order (a waiting exclusive holder keeps later shared ones out, as
// sync.RWMutex does). An operation of Local's Async forms takes it and submits itself
// to the model's loop in that function, and releases it in its done callback, so a
// thousand queued operations on one adapter cost a thousand closures, not goroutines.
//
// A waiter does not watch its context: it waits for the operations on the same adapter
// queued before it (the callers' own), then the loop drops it if its context ended.
type slotLock struct {
	mu      sync.Mutex
	readers int
	writer  bool
	waiting []slotWaiter
}

type slotWaiter struct {
	write bool
	run   func()
}

// acquire runs run holding the lock (shared unless write): at once on this goroutine
// when it is free, else on the goroutine of the release that frees it.
func (s *slotLock) acquire(write bool, run func()) {
	s.mu.Lock()
	if len(s.waiting) == 0 && !s.writer && (!write || s.readers == 0) {
		s.take(write)
		s.mu.Unlock()
		run()
		return
	}
	s.waiting = append(s.waiting, slotWaiter{write, run})
	s.mu.Unlock()
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
	var next []func()
	for len(s.waiting) > 0 {
		w := s.waiting[0]
		if s.writer || (w.write && s.readers > 0) {
			break
		}
		s.waiting = s.waiting[1:]
		s.take(w.write)
		next = append(next, w.run)
	}
	s.mu.Unlock()
	for _, run := range next {
		run()
	}
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
