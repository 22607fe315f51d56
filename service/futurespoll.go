package service

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/telemetry"
)

// retrieve_futures (SDK >= 0.26.2, when the server advertises sample_use_retrieve_futures):
// a SamplingClient holds one long-poll per sampling session (and per clone: cloned
// SamplingClients number their seq_ids from counter × 10^9) instead of one per request.
// The server keeps, per (sampling session, clone), a log of the sampling requests that
// resolved, each with a cursor; a poll returns the ones after the client's cursor and
// drops the ones at or before it (the client has seen them). The client then fetches
// each result with retrieve_future as before.
//
// Cursors come from one counter that starts at the process's start time in
// microseconds, so they only grow, across restarts too: a client's old cursor never
// hides a new event. A log keeps at most limits.max_completion_events_per_sampler events
// (the oldest go first, with a warning) and none older than persistence.future_ttl_seconds
// (by then the results themselves are gone).

// CloneStride is the seq_id stride of cloned sampling clients: clone n sends n × 10^9 + k.
const CloneStride = 1_000_000_000

type pollKey struct {
	sampler string
	clone   int64
}

// Completion is one resolved sampling request in a retrieve_futures reply.
type Completion struct {
	Cursor      int64
	RequestID   string
	Failed      bool
	PayloadSize int64 // bytes of the result (finished ones)
	at          time.Time
}

type completionLog struct {
	events  []Completion
	known   map[string]bool // request ids watched or in events: a replayed submission adds none
	wake    chan struct{}   // closed (and replaced) when an event is added
	touched time.Time
}

// completionLogs are every sampling session's logs.
type completionLogs struct {
	mu     sync.Mutex
	logs   map[pollKey]*completionLog
	cursor int64
	max    int           // limits.max_completion_events_per_sampler
	ttl    time.Duration // persistence.future_ttl_seconds
	fut    *futures.Manager
	log    *slog.Logger
	now    func() time.Time

	stop     chan struct{}
	watchers sync.WaitGroup
}

func newCompletionLogs(max int, ttl time.Duration, fut *futures.Manager, log *slog.Logger, now func() time.Time) *completionLogs {
	return &completionLogs{logs: map[pollKey]*completionLog{}, cursor: time.Now().UnixMicro(), max: max, ttl: ttl,
		fut: fut, log: log, now: now, stop: make(chan struct{})}
}

// close stops the watchers and waits for them.
func (c *completionLogs) close() {
	c.mu.Lock()
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.mu.Unlock()
	c.watchers.Wait()
}

// logOf returns k's log, creating it. Callers hold c.mu.
func (c *completionLogs) logOf(k pollKey, now time.Time) *completionLog {
	l, ok := c.logs[k]
	if !ok {
		l = &completionLog{known: map[string]bool{}, wake: make(chan struct{})}
		c.logs[k] = l
	}
	l.touched = now
	return l
}

// watch records a sampling request's resolution in its session's log when it
// comes. It waits in a goroutine of its own, so every way a future resolves (it ran,
// failed, was cancelled or dropped while queued) is reported alike.
func (c *completionLogs) watch(tenant, samplerID string, seq int64, requestID string) {
	k := pollKey{samplerID, seq / CloneStride}
	c.mu.Lock()
	select {
	case <-c.stop:
		c.mu.Unlock()
		return
	default:
	}
	l := c.logOf(k, c.now())
	if l.known[requestID] {
		c.mu.Unlock()
		return // a deduplicated resubmission: the first one watches
	}
	l.known[requestID] = true
	c.watchers.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.watchers.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-c.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		for {
			rec, err := c.fut.Wait(ctx, tenant, requestID, time.Minute)
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, futures.ErrNotFound):
				c.add(k, Completion{RequestID: requestID, Failed: true})
				return
			case err != nil:
				c.log.Warn("retrieve_futures: waiting for a sampling request failed", "request_id", requestID, "error", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				continue
			case rec.Done():
				ev := Completion{RequestID: requestID, Failed: rec.Status == futures.StatusFailed}
				if rec.Result != nil {
					ev.PayloadSize = int64(len(rec.Result.Body))
				}
				c.add(k, ev)
				return
			}
		}
	}()
}

// add appends a resolved request to k's log, dropping the oldest beyond the bound, and
// wakes k's pollers.
func (c *completionLogs) add(k pollKey, ev Completion) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.logOf(k, c.now())
	c.cursor++
	ev.Cursor, ev.at = c.cursor, c.now()
	l.events = append(l.events, ev)
	if n := len(l.events) - c.max; n > 0 {
		c.log.Warn("retrieve_futures: a sampling session's unacknowledged completions exceed limits.max_completion_events_per_sampler; the oldest are dropped",
			"sampling_session_id", k.sampler, "clone", k.clone, "dropped", n)
		for _, old := range l.events[:n] {
			delete(l.known, old.RequestID)
		}
		l.events = append(l.events[:0:0], l.events[n:]...)
	}
	close(l.wake)
	l.wake = make(chan struct{})
}

// RetrieveFutures answers a retrieve_futures poll of tenant's sampling session (clone
// clone): the completions after prevCursor, waiting up to wait for one when there are
// none. Those at or before prevCursor are dropped. The returned cursor is the last
// completion's, or prevCursor when there is none.
func (s *Service) RetrieveFutures(ctx context.Context, tenant, samplerID string, clone, prevCursor int64, wait time.Duration) ([]Completion, int64, error) {
	ctx = telemetry.WithKeys(ctx, telemetry.Keys{SamplingSessionID: samplerID})
	sm, err := s.GetSampler(tenant, samplerID)
	if err != nil {
		return nil, 0, err
	}
	s.lock(lkSessions)
	err = finishedErr(s.sessions.at(sm.SessionID))
	s.unlock(lkSessions)
	if err != nil {
		return nil, 0, err
	}
	if clone < 0 {
		return nil, 0, invalidf("target.cloned_sampler_id %d must not be negative", clone)
	}
	if prevCursor < 0 {
		return nil, 0, invalidf("prev_cursor %d must not be negative", prevCursor)
	}
	return s.polls.poll(ctx, pollKey{samplerID, clone}, prevCursor, wait)
}

// poll returns k's completions after prevCursor, waiting up to wait for one, and drops
// those at or before it (RetrieveFutures).
func (c *completionLogs) poll(ctx context.Context, k pollKey, prevCursor int64, wait time.Duration) ([]Completion, int64, error) {
	var timer <-chan time.Time
	for {
		c.mu.Lock()
		l := c.logOf(k, c.now())
		n := 0
		for n < len(l.events) && l.events[n].Cursor <= prevCursor {
			delete(l.known, l.events[n].RequestID)
			n++
		}
		if n > 0 {
			l.events = append(l.events[:0:0], l.events[n:]...)
		}
		if len(l.events) > 0 || wait <= 0 {
			out := append([]Completion(nil), l.events...)
			c.mu.Unlock()
			cursor := prevCursor
			if len(out) > 0 {
				cursor = out[len(out)-1].Cursor
			}
			return out, cursor, nil
		}
		wake := l.wake
		c.mu.Unlock()
		if timer == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-wake:
		case <-timer:
			wait = 0
		case <-ctx.Done():
			return nil, prevCursor, ctx.Err()
		}
	}
}

// expire drops events older than the futures' TTL and logs of sampling
// sessions nobody polled or watched for as long (the reaper calls it).
func (c *completionLogs) expire(now time.Time) {
	ttl := c.ttl
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, l := range c.logs {
		n := 0
		for n < len(l.events) && now.Sub(l.events[n].at) > ttl {
			delete(l.known, l.events[n].RequestID)
			n++
		}
		if n > 0 {
			l.events = append(l.events[:0:0], l.events[n:]...)
		}
		if len(l.events) == 0 && len(l.known) == 0 && now.Sub(l.touched) > ttl {
			delete(c.logs, k)
		}
	}
}
