package futures

import (
	"context"
	"errors"
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
		e.cancelled = true
		if e.cancel != nil {
			e.cancel(ErrCancelled)
		}
		m.mu.Unlock()
		return CancelledRunning, nil
	}
	// Pending: take it out of its pool's runnable queue, so no worker picks it.
	removed := false
	if p := m.pools[e.task.Pool]; p != nil {
		q := p.tenants[e.rec.Tenant]
		for i, x := range q {
			if x == e {
				q = append(q[:i:i], q[i+1:]...)
				removed = true
				break
			}
		}
		if removed {
			if len(q) == 0 {
				delete(p.tenants, e.rec.Tenant)
				for i, t := range p.order {
					if t == e.rec.Tenant {
						p.order = append(p.order[:i], p.order[i+1:]...)
						break
					}
				}
			} else {
				p.tenants[e.rec.Tenant] = q
			}
		}
	}
	if !removed {
		// Accepted but not yet runnable (its acceptance is being recorded): it fails as
		// soon as it starts, before doing any work.
		e.cancelled = true
		m.mu.Unlock()
		return CancelledRunning, nil
	}
	m.mu.Unlock()
	m.failAs(e, reason, CategoryUser)
	return CancelledQueued, nil
}
