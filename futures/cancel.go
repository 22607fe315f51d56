package futures

import (
	"context"
	"errors"
	"fmt"
)

// ErrCancelled is the cause of a running task's context cancelled by Cancel: a task can
// tell it (context.Cause) from other ends of its context.
var ErrCancelled = errors.New("cancelled by the client")

// CancelOutcome says what Cancel did.
type CancelOutcome int

// Cancel's outcomes.
const (
	// CancelledQueued: the task had not started; it was failed at once and will not run.
	CancelledQueued CancelOutcome = iota + 1
	// CancelledRunning: the task is running; its context was cancelled with ErrCancelled
	// and its future resolves when the task returns.
	CancelledRunning
	// AlreadyDone: the future had resolved; nothing changed.
	AlreadyDone
)

// Cancel stops tenant's future id: a task still queued is removed from its queue and
// failed at once with reason (category user); a running task's context is cancelled with
// ErrCancelled, and the task decides how it ends (a sample stops at its next step). Only
// unordered tasks may be cancelled: an ordered one holds its queue's seq_id order, which
// the client drives. A future of another tenant is ErrNotFound.
func (m *Manager) Cancel(ctx context.Context, tenant, id, reason string) (CancelOutcome, error) {
	m.mu.Lock()
	e, ok := m.entries[id]
	if !ok || e.rec.Tenant != tenant {
		m.mu.Unlock()
		rec, err := m.Get(ctx, tenant, id) // resolved and evicted, or unknown
		if err != nil {
			return 0, err
		}
		if rec.Done() {
			return AlreadyDone, nil
		}
		return 0, ErrNotFound
	}
	switch {
	case e.rec.Done():
		m.mu.Unlock()
		return AlreadyDone, nil
	case e.rec.Ordered:
		m.mu.Unlock()
		return 0, UserError(errors.New("operations of a training run cannot be cancelled (they run in seq_id order); only sampling requests can"))
	case e.rec.Status == StatusRunning:
		if e.cancel != nil {
			e.cancel(ErrCancelled)
		}
		m.mu.Unlock()
		return CancelledRunning, nil
	}
	// Pending: take it out of its pool's runnable queue, so no worker picks it.
	removed := m.sched.remove(e)
	m.mu.Unlock()
	if !removed {
		return 0, fmt.Errorf("future %s is pending but not in its pool's queue", id)
	}
	m.failAs(e, reason, CategoryUser)
	return CancelledQueued, nil
}
