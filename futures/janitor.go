package futures

import (
	"fmt"
	"time"
)

// The janitor runs three unrelated sweeps once a second: it fails ordered tasks whose
// predecessor never arrives (failSeqGaps), forgets old dedupe references (pruneDedupe)
// and moves resolved futures out of memory (expireResolved); they stay in the store until
// it expires them.

func (m *Manager) janitor() {
	defer m.workers.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.sweep(m.now())
	}
}

// sweep runs the janitor's sweeps once, as of now.
func (m *Manager) sweep(now time.Time) {
	m.mu.Lock()
	victims, missing := m.sched.overdue(now, m.o.SeqGapTimeout)
	expired := m.sched.expired(now)
	m.pruneDedupe(now)
	m.expireResolved(now)
	m.mu.Unlock()
	m.failSeqGaps(victims, missing)
	for _, e := range expired {
		m.fail(e, deadlineMessage(e))
	}
}

// failSeqGaps fails the ordered tasks that waited longer than Options.SeqGapTimeout for
// an earlier seq_id (the operation scheduler's overdue entries, and the seq_id each waited for).
func (m *Manager) failSeqGaps(victims []*entry, missing []int64) {
	for i, e := range victims {
		m.fail(e, fmt.Sprintf("seq_id %d of %s waited %s for seq_id %d, which never arrived", e.rec.SeqID, e.rec.QueueKey, m.o.SeqGapTimeout, missing[i]))
	}
}

// expireResolved forgets resolved entries from memory after KeepInMemory (at most the
// TTL), oldest first: a result is then served from the store, and only its dedupe
// reference stays in memory (until the dedupe window), which keeps the heap, and so the
// garbage collector's work, bounded under load. The walk stops at the first live entry,
// so the lock is held for the expired entries only. Callers hold m.mu.
func (m *Manager) expireResolved(now time.Time) {
	keep := min(m.o.TTL, m.o.KeepInMemory)
	window := min(m.o.TTL, dedupeWindow)
	n := 0
	for _, e := range m.doneList {
		if now.Sub(e.rec.DoneAt) <= keep {
			break
		}
		n++
		delete(m.entries, e.rec.ID)
		if e.rec.QueueKey != "" {
			m.index.retire(indexKey(e.rec.QueueKey, e.rec.SeqID), e.rec.ID, e.rec.DoneAt, now, window)
		}
	}
	if n > 0 {
		m.doneList = append(m.doneList[:0:0], m.doneList[n:]...)
	}
}
