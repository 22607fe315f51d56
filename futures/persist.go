package futures

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tuft-go/tuft/store"
)

// Persistence and recovery. Every future is a JSON Record under keyFuture+id: written
// when accepted (see acceptDelay for stores that queue writes) and when resolved, with
// the TTL from then on. A restart fails what an earlier process left unresolved
// (Recover) and answers for what it accepted but never recorded (lostFuture).

const keyFuture = "future/"

// acceptDelay is how long an operation may stay unresolved before its acceptance is
// written to a store that queues writes. Most control-plane operations resolve sooner,
// so they cost one write (the result), not two.
const acceptDelay = 20 * time.Millisecond

func (m *Manager) persist(ctx context.Context, rec *Record) error {
	b, ttl, err := m.encode(rec)
	if err != nil {
		return err
	}
	return m.o.Store.Set(ctx, keyFuture+rec.ID, b, ttl)
}

func (m *Manager) encode(rec *Record) ([]byte, time.Duration, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, 0, fmt.Errorf("encode future %s: %w", rec.ID, err)
	}
	var ttl time.Duration
	if rec.Done() {
		ttl = m.o.TTL
	}
	return b, ttl, nil
}

// load reads a future's record from the store (an error that wraps store.ErrNotFound
// when there is none).
func (m *Manager) load(ctx context.Context, id string) (Record, error) {
	b, err := m.o.Store.Get(ctx, keyFuture+id)
	if err != nil {
		return Record{}, fmt.Errorf("read future %s: %w", id, err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("future %s record is corrupt: %w", id, err)
	}
	return r, nil
}

// persistAccepted writes a still-unresolved entry's record, unless its result is
// already queued (which it must never overwrite). The write is queued under m.mu, so a
// result queued later lands after it.
func (m *Manager) persistAccepted(e *entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.resultQueued {
		return
	}
	rec := e.rec
	rec.QueueState = ""
	id := rec.ID
	m.persistThen(context.Background(), &rec, func(err error) {
		if err != nil {
			m.log.Error("persist accepted future", "request_id", id, "error", err)
		}
	})
}

// persistThen writes rec and calls then with the outcome once it is durable: without
// blocking the caller through the store's write queue where it has one (then runs on
// the commit goroutine), else at once on the caller's goroutine (a blocking or
// completion worker, never a model's loop).
func (m *Manager) persistThen(ctx context.Context, rec *Record, then func(error)) {
	m.running.Add(1)
	b, ttl, err := m.encode(rec)
	if err != nil {
		then(err)
		m.running.Done()
		return
	}
	if m.queued {
		store.SetQueued(ctx, m.o.Store, keyFuture+rec.ID, b, ttl, func(err error) {
			then(err)
			m.running.Done()
		})
		return
	}
	defer m.running.Done()
	then(m.o.Store.Set(ctx, keyFuture+rec.ID, b, ttl))
}

// Recover resolves every future a previous process left pending or running: it fails
// them with a message that says the server restarted. Their seq_ids may be submitted
// again, but never hold up the queue: a later seq_id skips them (the SDK, having seen the
// failure, never resends one). It returns how many it failed.
func (m *Manager) Recover(ctx context.Context) (int, error) {
	var stale []Record
	hw := map[string]int64{}
	abandoned := map[string][]int64{}
	prior := map[priorKey]priorRef{}
	err := m.o.Store.Scan(ctx, keyFuture, func(_ string, v []byte) error {
		var r Record
		if err := json.Unmarshal(v, &r); err != nil {
			m.log.Warn("skipping unreadable future record", "error", err)
			return nil
		}
		if r.Owner != "" && r.Owner != m.o.Owner {
			return nil // another replica's: alive there, not abandoned
		}
		switch {
		case !r.Done():
			stale = append(stale, r)
		case r.Abandoned: // never ran: skippable, see orderedQueue.abandoned
			if r.Ordered {
				abandoned[r.QueueKey] = append(abandoned[r.QueueKey], r.SeqID)
			}
		default:
			if r.Ordered && r.SeqID+1 > hw[r.QueueKey] {
				hw[r.QueueKey] = r.SeqID + 1
			}
			if r.QueueKey != "" {
				if ref, ok := newPriorRef(r.ID, r.DoneAt); ok {
					prior[priorKeyOf(indexKey(r.QueueKey, r.SeqID))] = ref
				}
			}
		}
		return nil
	})
	for _, r := range stale {
		if r.Ordered {
			abandoned[r.QueueKey] = append(abandoned[r.QueueKey], r.SeqID)
		}
	}
	m.mu.Lock()
	m.recovered = hw
	m.index.restore(prior)
	for key, seqs := range abandoned {
		m.sched.abandon(key, seqs)
	}
	m.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("scan futures: %w", err)
	}
	for i := range stale {
		r := &stale[i]
		r.Status, r.Abandoned = StatusFailed, true
		r.DoneAt = m.now()
		r.Failure = &Failure{Category: CategoryServer,
			Message: fmt.Sprintf("the server restarted while this %s operation was pending, so it never ran; submit it again", r.OpType)}
		b, err := json.Marshal(r)
		if err != nil {
			return i, err
		}
		if err := m.o.Store.Set(ctx, keyFuture+r.ID, b, m.o.TTL); err != nil {
			return i, fmt.Errorf("fail stale future %s: %w", r.ID, err)
		}
	}
	return len(stale), nil
}

// RecoveredNextSeq is one past the highest seq_id of queueKey that was resolved before
// the restart Recover handled (0 when none): the persisted results are the ground truth
// of how far an ordered queue got.
func (m *Manager) RecoveredNextSeq(queueKey string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recovered[queueKey]
}

// lostFuture answers for a future an earlier process accepted but crashed before
// recording (its acceptance was still in the store's write queue): the id's timestamp is
// from before this process started and within the TTL. It never ran to a durable result,
// so it is reported like the futures Recover abandons. Nothing about the id's owner is
// known or revealed: every caller gets the same answer.
func (m *Manager) lostFuture(tenant, id string) (Record, bool) {
	if !m.queued {
		return Record{}, false
	}
	created, ok := idTime(id)
	// Ids carry milliseconds: one made in the millisecond this process started is ours.
	start := m.started.Truncate(time.Millisecond)
	if !ok || !created.Before(start) || start.Sub(created) > m.o.TTL {
		return Record{}, false
	}
	return Record{ID: id, Tenant: tenant, Status: StatusFailed, Abandoned: true, CreatedAt: created, DoneAt: m.started,
		Failure: &Failure{Category: CategoryServer,
			Message: "the server restarted before this operation was recorded, so it never completed; submit it again"}}, true
}
