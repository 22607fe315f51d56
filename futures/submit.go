package futures

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/telemetry"
)

// Submission. Submit decides under the lock (queue admission: shutdown, dedupe, the seq_id, the
// tenant's limit), persists the acceptance without holding it, then schedules under it.
// Refuse settles the seq_id of an operation refused before it could be submitted.

// queueAdmission is Submit's decision, taken under the lock (queue admission: whether an
// operation enters the futures queues; see the glossary in docs/architecture.md): an
// answer (id or err), an earlier submission to look up in the store first, or an
// admitted entry to persist and schedule.
type queueAdmission struct {
	id  string
	err error
	// stored: a future only the store holds may be an earlier submission of the same
	// (queue, seq_id); dedupeStored decides. When it is not, behind is the answer (an
	// ordered seq_id the queue has passed), or, when nil, the task is admitted after all.
	stored *priorRef
	behind error
	// e is the admitted entry, counted and indexed, not yet scheduled; rec is its
	// record as accepted.
	e   *entry
	rec Record
}

// Submit queues a task and returns its request id.
func (m *Manager) Submit(ctx context.Context, t Task) (string, error) {
	if (t.Run == nil) == (t.Start == nil) {
		return "", errors.New("futures: a task needs exactly one body, Run or Start")
	}
	m.mu.Lock()
	a := m.admitToQueue(ctx, t, true)
	m.mu.Unlock()
	if a.stored != nil {
		if id, hit, err := m.dedupeStored(ctx, t, *a.stored); hit {
			return id, err
		}
		if a.behind != nil {
			return "", a.behind
		}
		m.mu.Lock()
		a = m.admitToQueue(ctx, t, false)
		m.mu.Unlock()
	}
	if a.e == nil {
		return a.id, a.err
	}
	e, id := a.e, a.rec.ID
	// Where the store queues writes in order, the acceptance is queued, not waited for
	// (admitToQueue set its timer): the result is written after it, and only the result must be
	// durable before anyone sees it. A crash before the acceptance commits looks, after
	// the restart, like a future the restart abandoned (see lostFuture). Other stores
	// write it now.
	if !m.queued {
		if err := m.persist(ctx, &a.rec); err != nil {
			m.mu.Lock()
			m.withdraw(e)
			m.mu.Unlock()
			return "", fmt.Errorf("persist future: %w", err)
		}
	}
	m.created(ctx, t)

	m.mu.Lock()
	if m.closing {
		// Shutdown drained the operation scheduler while this one was being persisted.
		m.mu.Unlock()
		m.fail(e, shutdownMessage)
		return id, nil
	}
	m.sched.add(e)
	m.wake()
	m.mu.Unlock()
	return id, nil
}

// admitToQueue checks t under the lock: the Manager is open, t is not a resubmission, an
// ordered seq_id is not behind its queue, the tenant is under its limit. It then
// registers t's entry and counts it against the tenant. lookStored: a resubmission of a
// future only the store holds is still to be looked for. Callers hold m.mu.
func (m *Manager) admitToQueue(ctx context.Context, t Task, lookStored bool) queueAdmission {
	if m.closing {
		return queueAdmission{err: ErrShuttingDown}
	}
	if id, hit, err := m.dedupe(t); hit {
		return queueAdmission{id: id, err: err}
	}
	var ik string
	if t.QueueKey != "" {
		ik = indexKey(t.QueueKey, t.SeqID)
	}
	switch {
	case t.Ordered:
		if next := m.sched.nextSeq(t.QueueKey); t.SeqID < next {
			// Behind the queue: a resubmission of an operation resolved earlier (long ago, or
			// before a restart) gets its id, anything else a SeqError.
			behind := &SeqError{QueueKey: t.QueueKey, SeqID: t.SeqID, Next: next}
			if ref, ok := m.index.stored(ik); ok {
				return queueAdmission{stored: &ref, behind: behind}
			}
			return queueAdmission{err: behind}
		}
	case lookStored && ik != "" && !m.index.taken(ik):
		if ref, ok := m.index.stored(ik); ok {
			return queueAdmission{stored: &ref}
		}
	}
	if m.sched.full(t.Tenant) {
		return queueAdmission{err: &OverLimitError{Limit: m.o.MaxQueuedPerTenant, RetryAfter: m.sched.retryAfter(t.Pool)}}
	}
	now := m.now()
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = m.o.DefaultTimeout
	}
	e := &entry{
		rec: Record{ID: newID(), Owner: m.o.Owner, Tenant: t.Tenant, QueueKey: t.QueueKey, OpType: t.OpType, ModelID: t.ModelID, Pool: t.Pool,
			SeqID: t.SeqID, Ordered: t.Ordered, Status: StatusPending, QueueState: QueueActive, PayloadHash: t.PayloadHash, CreatedAt: now,
			Deadline: now.Add(timeout)},
		task: t, link: trace.SpanContextFromContext(ctx), keys: telemetry.KeysFrom(ctx), done: make(chan struct{}), queued: now,
		blocking: t.Run != nil,
	}
	m.entries[e.rec.ID] = e
	if ik != "" {
		m.index.hold(ik, e.rec.ID)
	}
	m.sched.reserve(t.Tenant)
	m.addWeight(t.Pool, t.Tenant, t.Weight)
	if m.queued {
		e.accept = time.AfterFunc(acceptDelay, func() { m.persistAccepted(e) })
	}
	return queueAdmission{e: e, rec: e.rec}
}

// withdraw undoes the queue admission of an entry whose acceptance could not be persisted.
// Callers hold m.mu.
func (m *Manager) withdraw(e *entry) {
	delete(m.entries, e.rec.ID)
	if e.rec.QueueKey != "" {
		m.index.remove(indexKey(e.rec.QueueKey, e.rec.SeqID), e.rec.ID)
	}
	m.sched.release(e.rec.Tenant)
	m.addWeight(e.task.Pool, e.rec.Tenant, -e.task.Weight)
}

// Refuse settles the seq_id of an ordered operation that was refused at submission (bad
// input, an unsupported field), so that the queue's next operation does not wait for it:
// the SDK has reserved the seq_id and never sends it again. The refusal is recorded as a
// failed future (persisted, so a restart still knows the seq_id was used) and the queue
// skips the seq_id when its turn comes. It returns the future's id, or "" when there is
// nothing to settle: the seq_id is already executed, or already taken by a submitted
// operation. A refusal ahead of the queue's turn counts against the tenant's limit until
// its turn comes, so refusals cannot pile up without bound.
func (m *Manager) Refuse(ctx context.Context, t Task, reason Failure) (string, error) {
	if !t.Ordered || t.QueueKey == "" {
		return "", errors.New("futures: only an ordered operation has a seq_id to settle")
	}
	rec, err := m.refuse(t, reason)
	if err != nil || rec.ID == "" {
		return "", err
	}
	if err := m.persist(ctx, &rec); err != nil {
		// The seq_id is settled in memory all the same; only a restart would forget it.
		m.log.Error("persist refused operation", "request_id", rec.ID, "error", err)
	}
	m.completed(ctx, t.OpType, StatusFailed)
	return rec.ID, nil
}

// refuse is Refuse's part under the lock: it records the refusal as a resolved entry and
// hands its seq_id to the operation scheduler to settle. The record is zero when there is nothing
// to settle.
func (m *Manager) refuse(t Task, reason Failure) (Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return Record{}, ErrShuttingDown
	}
	ik := indexKey(t.QueueKey, t.SeqID)
	next := m.sched.nextSeq(t.QueueKey)
	if _, stored := m.index.stored(ik); m.index.taken(ik) || t.SeqID < next || stored {
		return Record{}, nil
	}
	if t.SeqID > next && m.sched.full(t.Tenant) {
		return Record{}, &OverLimitError{Limit: m.o.MaxQueuedPerTenant, RetryAfter: time.Second}
	}
	now := m.now()
	e := &entry{
		rec: Record{ID: newID(), Owner: m.o.Owner, Tenant: t.Tenant, QueueKey: t.QueueKey, OpType: t.OpType, ModelID: t.ModelID, Pool: t.Pool,
			SeqID: t.SeqID, Ordered: true, Status: StatusFailed, PayloadHash: t.PayloadHash, CreatedAt: now, DoneAt: now,
			Failure: &reason, Refused: true},
		task: t, done: make(chan struct{}), queued: now, resultQueued: true,
	}
	e.task.Run, e.task.Start = nil, nil
	close(e.done)
	m.entries[e.rec.ID] = e
	m.index.hold(ik, e.rec.ID)
	m.doneList = append(m.doneList, e)
	m.sched.reserve(t.Tenant)
	m.sched.refuse(e)
	m.wake()
	return e.rec, nil
}
