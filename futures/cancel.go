package futures

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Deadlines and cancellation. Every future has a deadline (Task.Timeout, else
// Options.DefaultTimeout, from its submission) and can be cancelled by its tenant
// (Cancel). A future that has not started fails at once: unordered ones, and ordered
// ones whose turn has come, leave their pool's queue; an ordered one still waiting for
// an earlier seq_id fails when its turn comes, so the queue's order holds. A running
// one sees its context end: the executor drops it at its next unit of work (a decode
// step or a training pack) and the future fails saying why.

// ErrCancelled is the cause of a running operation's context when its future is
// cancelled.
var ErrCancelled = errors.New("the operation was cancelled")

// endedErr is a running operation's failure when its context ended: its deadline
// passed (category server: retrying may succeed) or its tenant cancelled it (user).
type endedErr struct {
	msg string
	cat Category
}

func (e *endedErr) Error() string      { return e.msg }
func (e *endedErr) Category() Category { return e.cat }

// Cancel cancels a tenant's future and returns its record as it stands. A finished
// future is returned unchanged; another tenant's, or a missing one, is ErrNotFound.
func (m *Manager) Cancel(ctx context.Context, tenant, id string) (Record, error) {
	m.mu.Lock()
	e, ok := m.entries[id]
	if !ok || e.rec.Tenant != tenant {
		m.mu.Unlock()
		return m.Get(ctx, tenant, id)
	}
	if e.rec.Done() {
		r := e.rec
		m.mu.Unlock()
		return r, nil
	}
	e.cancelled = true
	removed := false
	switch e.rec.Status {
	case StatusRunning:
		if e.cancel != nil {
			e.cancel()
		}
	case StatusPending:
		removed = m.sched.unqueue(e)
	}
	m.mu.Unlock()
	if removed {
		m.failWith(e, cancelMessage(e)+" before it started", CategoryUser)
	}
	return m.Get(ctx, tenant, id)
}

// unqueue takes a queued entry out of its pool; false when it is not there (an ordered
// entry waiting for an earlier seq_id: it fails at its turn).
func (s *opScheduler) unqueue(e *entry) bool {
	p := s.pools[e.poolName()]
	if p == nil {
		return false
	}
	i := slices.Index(p.tenants[e.rec.Tenant], e)
	if i < 0 {
		return false
	}
	p.remove(e.rec.Tenant, i)
	return true
}

// remove takes entry i out of tenant t's queue, and t out of the ring when it empties.
func (p *pool) remove(t string, i int) {
	q := slices.Delete(p.tenants[t], i, i+1)
	if len(q) > 0 {
		p.tenants[t] = q
		return
	}
	delete(p.tenants, t)
	if k := slices.Index(p.order, t); k >= 0 {
		p.order = slices.Delete(p.order, k, k+1)
		if p.rr > k {
			p.rr--
		}
	}
}

// expired takes the queued entries past their deadline out of the pools and returns
// them, to be failed. (Ordered entries still waiting for an earlier seq_id fail at their
// turn: the worker checks the deadline before running anything.)
func (s *opScheduler) expired(now time.Time) []*entry {
	var out []*entry
	for _, p := range s.pools {
		for t, q := range p.tenants {
			for i := 0; i < len(q); {
				if e := q[i]; !e.rec.Deadline.IsZero() && !now.Before(e.rec.Deadline) {
					out = append(out, e)
					p.remove(t, i)
					q = p.tenants[t]
					continue
				}
				i++
			}
		}
	}
	return out
}

// ended says why an entry a worker took must not run: cancelled, or past its deadline.
// Callers hold m.mu.
func (m *Manager) ended(e *entry) (string, Category) {
	switch {
	case e.cancelled:
		return cancelMessage(e) + " before it started", CategoryUser
	case !e.rec.Deadline.IsZero() && !m.now().Before(e.rec.Deadline):
		return deadlineMessage(e), CategoryServer
	}
	return "", ""
}

// runContext is a running operation's context: it ends at the deadline, or when the
// returned function is called (with ErrCancelled as its cause).
func runContext(e *entry) (context.Context, context.CancelFunc) {
	ctx, cancelCause := context.WithCancelCause(context.Background())
	ctx, cancel := context.WithDeadlineCause(ctx, e.rec.Deadline,
		fmt.Errorf("%w: the deadline of %s passed", context.DeadlineExceeded, e.rec.Deadline.Format(time.RFC3339)))
	return ctx, func() { cancelCause(ErrCancelled); cancel() }
}

// endedError is a finished task's error: when its context ended (deadline,
// cancellation) and it failed, the failure says so instead of whatever the executor
// said.
func (m *Manager) endedError(ctx context.Context, e *entry, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	m.mu.Lock()
	cancelled := e.cancelled
	m.mu.Unlock()
	if cancelled {
		return &endedErr{msg: cancelMessage(e) + " while it ran", cat: CategoryUser}
	}
	return &endedErr{msg: deadlineMessage(e), cat: CategoryServer}
}

func cancelMessage(e *entry) string {
	return fmt.Sprintf("%s operation %s was cancelled by the client", e.rec.OpType, e.rec.ID)
}

func deadlineMessage(e *entry) string {
	return fmt.Sprintf("%s operation %s did not finish within its deadline of %s after submission (limits.sample_timeout_seconds, limits.future_timeout_seconds)",
		e.rec.OpType, e.rec.ID, e.rec.Deadline.Sub(e.rec.CreatedAt).Round(time.Second))
}

// addWeight adds w to a tenant's backlog in a pool. Callers hold m.mu.
func (m *Manager) addWeight(pool, tenant string, w int) {
	if w == 0 {
		return
	}
	if m.backlog == nil {
		m.backlog = map[string]map[string]int{}
	}
	b := m.backlog[pool]
	if b == nil {
		b = map[string]int{}
		m.backlog[pool] = b
	}
	if b[tenant] += w; b[tenant] <= 0 {
		delete(b, tenant)
	}
}

// Backlog is the weight of a pool's unfinished tasks (queued or running), in all and
// per tenant: what a server bounds to answer with backpressure instead of queueing
// without end.
func (m *Manager) Backlog(pool string) (total int, byTenant map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	byTenant = make(map[string]int, len(m.backlog[pool]))
	for t, w := range m.backlog[pool] {
		byTenant[t] = w
		total += w
	}
	return total, byTenant
}

// OpenOperations is each tenant's unfinished operations (queued or running, plus
// refusals ahead of their turn): what limits.max_queued_per_tenant bounds.
func (m *Manager) OpenOperations() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(m.sched.open))
	for t, n := range m.sched.open {
		out[t] = n
	}
	return out
}
