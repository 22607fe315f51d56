package futures

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// Dedupe. A client that got no answer resubmits (the Tinker SDK retries a submission for
// minutes): a resubmission of the same (queue, seq_id) with the same payload hash is
// answered with the first submission's request id, one with another payload with a
// ConflictError. The index lives in memory only: it is rebuilt from the future records on
// restart (Recover), so a write costs one key, not two.

// dedupeWindow bounds how long a resolved operation's (queue, seq_id) is remembered for
// dedupe once it lives only in the store: clients resubmit within seconds or minutes (the
// SDK's retries), and the memory this takes grows with the operation rate. After it, a
// resubmission of a finished seq_id is refused as already executed instead of answered
// with the old request id; the result itself stays retrievable for the future TTL.
const dedupeWindow = time.Hour

// dedupeIndex maps each submitted (queue, seq_id) to the future that holds it. Manager.mu
// guards it.
type dedupeIndex struct {
	byKey map[string]string     // queue/seq → id of a future in Manager.entries
	prior map[priorKey]priorRef // queue/seq → future resolved earlier, only in the store now
}

func newDedupeIndex() dedupeIndex {
	return dedupeIndex{byKey: map[string]string{}, prior: map[priorKey]priorRef{}}
}

// indexKey names an ordered operation for dedupe.
func indexKey(queue string, seq int64) string { return queue + "/" + strconv.FormatInt(seq, 10) }

// priorRef points at a resolved future that lives only in the store, for dedupe of
// resubmissions. It holds no pointers (nor does its map key, a hash of the queue and
// seq_id), so the garbage collector never scans the index however large it grows; a
// hash collision is caught by checking the record found.
type priorRef struct {
	id   [idLen]byte // the request id without "req_"
	done int64       // unix nanoseconds
}

type priorKey [16]byte

func priorKeyOf(ik string) priorKey {
	var k priorKey
	h1, h2 := fnv.New64a(), fnv.New64()
	h1.Write([]byte(ik))
	h2.Write([]byte(ik))
	binary.LittleEndian.PutUint64(k[:8], h1.Sum64())
	binary.LittleEndian.PutUint64(k[8:], h2.Sum64())
	return k
}

func newPriorRef(id string, done time.Time) (priorRef, bool) {
	var r priorRef
	s, ok := strings.CutPrefix(id, "req_")
	if !ok || len(s) != len(r.id) {
		return r, false
	}
	copy(r.id[:], s)
	r.done = done.UnixNano()
	return r, true
}

func (r priorRef) requestID() string { return "req_" + string(r.id[:]) }

// stored returns the store-only reference of ik, if there is one.
func (x *dedupeIndex) stored(ik string) (priorRef, bool) {
	ref, ok := x.prior[priorKeyOf(ik)]
	return ref, ok
}

// taken reports whether a future in memory holds ik.
func (x *dedupeIndex) taken(ik string) bool {
	_, ok := x.byKey[ik]
	return ok
}

// hold records that the future id, in memory, holds ik.
func (x *dedupeIndex) hold(ik, id string) { x.byKey[ik] = id }

// restore adds store-only references found by Recover.
func (x *dedupeIndex) restore(prior map[priorKey]priorRef) {
	for k, ref := range prior {
		x.prior[k] = ref
	}
}

// remove forgets that id holds ik (an admission that could not be persisted).
func (x *dedupeIndex) remove(ik, id string) {
	if x.byKey[ik] == id {
		delete(x.byKey, ik)
	}
}

// retire moves id's hold on ik from memory to the store-only index, as its future leaves
// memory; a future resolved longer than window ago is forgotten instead.
func (x *dedupeIndex) retire(ik, id string, done, now time.Time, window time.Duration) {
	if x.byKey[ik] != id {
		return
	}
	delete(x.byKey, ik)
	if now.Sub(done) <= window {
		if ref, ok := newPriorRef(id, done); ok {
			x.prior[priorKeyOf(ik)] = ref
		}
	}
}

// dedupe finds an earlier submission of t's (queue, seq_id) by its tenant among the
// futures in memory: hit, answered with its request id when the payload is the same and
// with a ConflictError when not. Callers hold m.mu.
func (m *Manager) dedupe(t Task) (id string, hit bool, err error) {
	if t.QueueKey == "" {
		return "", false, nil
	}
	id, ok := m.index.byKey[indexKey(t.QueueKey, t.SeqID)]
	if !ok {
		return "", false, nil
	}
	e, ok := m.entries[id]
	if !ok || e.rec.Tenant != t.Tenant {
		return "", false, nil
	}
	id, err = resubmitted(t, id, e.rec.PayloadHash)
	return id, true, err
}

// dedupeStored is dedupe for a future resolved earlier that lives only in the store
// (before a restart, or long enough ago to have left memory), found through ref. It reads
// the store, so callers do not hold m.mu.
func (m *Manager) dedupeStored(ctx context.Context, t Task, ref priorRef) (id string, hit bool, err error) {
	r, err := m.load(ctx, ref.requestID())
	if err != nil || r.Tenant != t.Tenant || indexKey(r.QueueKey, r.SeqID) != indexKey(t.QueueKey, t.SeqID) {
		return "", false, nil // gone, another tenant's, or a hash collision
	}
	id, err = resubmitted(t, r.ID, r.PayloadHash)
	return id, true, err
}

// resubmitted answers a resubmission of t's (queue, seq_id), first submitted as id with
// payload hash.
func resubmitted(t Task, id, hash string) (string, error) {
	if hash == t.PayloadHash {
		return id, nil
	}
	return "", &ConflictError{QueueKey: t.QueueKey, SeqID: t.SeqID, ExistingID: id}
}

// pruneDedupe forgets the store-only references older than the dedupe window: one of the
// janitor's sweeps. Callers hold m.mu.
func (m *Manager) pruneDedupe(now time.Time) { m.index.prune(now, min(m.o.TTL, dedupeWindow)) }

// prune forgets the store-only references of futures resolved longer than window ago.
func (x *dedupeIndex) prune(now time.Time, window time.Duration) {
	for k, ref := range x.prior {
		if now.Sub(time.Unix(0, ref.done)) > window {
			delete(x.prior, k)
		}
	}
}
