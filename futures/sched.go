package futures

import "time"

// opScheduler is the futures operation scheduler: it decides when a queued Tinker
// operation (a future) may run. It does not decide tenant fairness for model work: that
// is the backend's token scheduler's alone (deficit round robin in tokens, one per
// model), which every runnable model operation reaches at once. It holds the ordered
// queues (one per training run: operations run in seq_id order), one pool per base
// model (its runnable asynchronous operations, all handed to the executor at once but
// for a tenant at Options.MaxRunningPerTenant) and the blocking pool (the runnable
// blocking operations of every model, taken by its Options.Workers workers round-robin
// across tenants), and counts each tenant's open operations against
// Options.MaxQueuedPerTenant.
//
// It is plain data: no goroutines, no store, no lock of its own (Manager.mu guards it)
// and no clock but the one it is given, so each decision can be tested step by step
// (sched_test.go). Methods that may make an entry runnable report it, and note which
// kind of pool it is in (wakeBlocking, wakeModel), so the Manager wakes the dispatcher
// or the blocking workers only then.
type opScheduler struct {
	now       func() time.Time
	maxQueued int // open operations per tenant
	workers   int // the blocking pool's workers, for queue states
	// maxRunning bounds one tenant's running entries per pool (0: no bound).
	maxRunning int
	queues     map[string]*orderedQueue
	pools      map[string]*pool
	// open counts each tenant's unfinished operations, plus its refusals ahead of their
	// turn (see refuse): what the tenant's queue limit bounds.
	open map[string]int
	// wakeBlocking and wakeModel note that the blocking pool, or a model's pool, may have
	// an entry to take since the Manager last looked (Manager.wake clears them).
	wakeBlocking, wakeModel bool
}

// blockingPool names the pool of every blocking task (Task.Run), whatever its model.
const blockingPool = "\x00blocking"

// poolName is the pool e runs from: its model's for an asynchronous task, the blocking
// pool for a blocking one.
func (e *entry) poolName() string {
	if e.blocking {
		return blockingPool
	}
	return e.task.Pool
}

func newOpScheduler(now func() time.Time, maxQueuedPerTenant, workersPerPool, maxRunningPerTenant int) *opScheduler {
	return &opScheduler{now: now, maxQueued: maxQueuedPerTenant, workers: workersPerPool, maxRunning: maxRunningPerTenant,
		queues: map[string]*orderedQueue{}, pools: map[string]*pool{}, open: map[string]int{}}
}

// orderedQueue buffers the tasks of one ordering domain until their turn.
type orderedQueue struct {
	next     int64
	waiting  map[int64]*entry
	waitedAt time.Time // when the queue started waiting for next
	// promoted holds the seq_ids handed to their pool and not yet done: the queue's turn
	// stays at one until it finishes (a failed operation consumes its seq_id too).
	promoted map[int64]bool
	// refused holds seq_ids refused at submission, ahead of next: each is skipped when
	// its turn comes (the entry is already resolved, failed).
	refused map[int64]*entry
	// abandoned holds seq_ids whose futures a restart failed before they ran: the queue
	// skips one as soon as a later seq_id waits, since the client saw the failure and will
	// not resend it, but a resubmission that comes first runs.
	abandoned map[int64]bool
	// skipBelow: an in-order sender (Task.InOrder) has submitted seq_ids up to here, so
	// any lower seq_id that never arrived never will; the queue moves past them.
	skipBelow int64
}

// sent notes a submission (run or refused) of seq by t's sender.
func (q *orderedQueue) sent(t Task) {
	if t.InOrder && t.SeqID > q.skipBelow {
		q.skipBelow = t.SeqID
	}
}

// pool holds the runnable tasks of one pool, per tenant: the blocking pool's workers take
// them round-robin across tenants; a model's pool hands them all out at once, in the same
// order, but for a tenant at its running bound.
type pool struct {
	name     string
	tenants  map[string][]*entry // runnable FIFO per tenant
	order    []string            // round-robin ring of tenants with runnable work
	rr       int
	running  int            // entries taken and not yet ran
	byTenant map[string]int // the same, per tenant
}

// next picks the next runnable entry of p, round-robin across the tenants below
// maxRunning running entries (0: no bound).
func (p *pool) next(maxRunning int) *entry {
	if len(p.order) == 0 {
		return nil
	}
	if p.rr >= len(p.order) {
		p.rr = 0
	}
	k := 0
	for ; k < len(p.order); k++ {
		if t := p.order[(p.rr+k)%len(p.order)]; maxRunning <= 0 || p.byTenant[t] < maxRunning {
			break
		}
	}
	if k == len(p.order) {
		return nil
	}
	p.rr = (p.rr + k) % len(p.order)
	t := p.order[p.rr]
	q := p.tenants[t]
	e := q[0]
	if len(q) == 1 {
		delete(p.tenants, t)
		p.order = append(p.order[:p.rr], p.order[p.rr+1:]...)
	} else {
		p.tenants[t] = q[1:]
		p.rr++
	}
	return e
}

// queue returns the ordered queue of key, creating it (expecting seq_id 1) if needed.
func (s *opScheduler) queue(key string) *orderedQueue {
	q, ok := s.queues[key]
	if !ok {
		q = &orderedQueue{next: 1, waiting: map[int64]*entry{}, waitedAt: s.now(), promoted: map[int64]bool{},
			refused: map[int64]*entry{}, abandoned: map[int64]bool{}}
		s.queues[key] = q
	}
	return q
}

// pool returns the pool of name, creating it if needed.
func (s *opScheduler) pool(name string) *pool {
	p, ok := s.pools[name]
	if !ok {
		p = &pool{name: name, tenants: map[string][]*entry{}, byTenant: map[string]int{}}
		s.pools[name] = p
	}
	return p
}

// full reports whether tenant has as many open operations as it may.
func (s *opScheduler) full(tenant string) bool { return s.open[tenant] >= s.maxQueued }

// reserve counts one more open operation of tenant (an admitted or refused one).
func (s *opScheduler) reserve(tenant string) { s.open[tenant]++ }

// release counts one open operation of tenant less.
func (s *opScheduler) release(tenant string) {
	if s.open[tenant]--; s.open[tenant] <= 0 {
		delete(s.open, tenant)
	}
}

// add schedules an admitted entry: an ordered one waits for its turn, an unordered one
// joins its pool at once.
func (s *opScheduler) add(e *entry) (runnable bool) {
	if !e.rec.Ordered {
		s.enqueue(e)
		return true
	}
	q := s.queue(e.rec.QueueKey)
	q.waiting[e.rec.SeqID] = e
	q.sent(e.task)
	return s.promote(q)
}

// refuse settles the seq_id of an ordered operation refused at submission (its entry is
// already resolved): the queue moves past it when its turn comes. The caller has
// reserved a slot for it, which stays taken until then.
func (s *opScheduler) refuse(e *entry) (runnable bool) {
	q := s.queue(e.rec.QueueKey)
	q.refused[e.rec.SeqID] = e
	delete(q.abandoned, e.rec.SeqID)
	q.sent(e.task)
	return s.promote(q)
}

// abandon marks seq_ids of queue key that a restart failed before they ran.
func (s *opScheduler) abandon(key string, seqs []int64) {
	q := s.queue(key)
	for _, seq := range seqs {
		q.abandoned[seq] = true
	}
}

// setNext sets the next expected seq_id of queue key.
func (s *opScheduler) setNext(key string, next int64) (runnable bool) {
	q := s.queue(key)
	q.next = next
	q.waitedAt = s.now()
	return s.promote(q)
}

// nextSeq is the next expected seq_id of queue key.
func (s *opScheduler) nextSeq(key string) int64 { return s.queue(key).next }

// promote moves the ordered queue's next task, if it has arrived, to its pool, first
// moving past seq_ids that are settled without running: refused at submission, abandoned
// by a restart, or never sent by an in-order sender, while a later seq_id waits.
func (s *opScheduler) promote(q *orderedQueue) (runnable bool) {
	for {
		if e, ok := q.waiting[q.next]; ok {
			delete(q.waiting, q.next)
			delete(q.abandoned, q.next)
			q.promoted[q.next] = true
			s.enqueue(e)
			runnable = true
			break
		}
		if e, ok := q.refused[q.next]; ok {
			delete(q.refused, q.next)
			s.release(e.rec.Tenant)
		} else if q.promoted[q.next] || len(q.waiting) == 0 {
			break // running (next moves when it finishes), or nothing is waiting behind it
		} else if q.abandoned[q.next] || q.next < q.skipBelow {
			delete(q.abandoned, q.next)
		} else {
			break
		}
		q.next++
		q.waitedAt = s.now()
	}
	if len(q.refused) > 0 {
		// A gap timeout may have moved next past refused seq_ids: they settle nothing now.
		for seq, e := range q.refused {
			if seq < q.next {
				delete(q.refused, seq)
				s.release(e.rec.Tenant)
			}
		}
	}
	return runnable
}

// enqueue makes e runnable in its pool.
func (s *opScheduler) enqueue(e *entry) {
	s.noteRunnable(e)
	p := s.pool(e.poolName())
	t := e.rec.Tenant
	if len(p.tenants[t]) == 0 {
		p.order = append(p.order, t)
	}
	p.tenants[t] = append(p.tenants[t], e)
}

// noteRunnable notes that e's pool may have an entry to take.
func (s *opScheduler) noteRunnable(e *entry) {
	if e.blocking {
		s.wakeBlocking = true
	} else {
		s.wakeModel = true
	}
}

// take hands p's next runnable entry to a worker, counting it as running until ran.
func (s *opScheduler) take(p *pool) *entry {
	e := p.next(s.maxRunning)
	if e != nil {
		p.running++
		p.byTenant[e.rec.Tenant]++
	}
	return e
}

// takeModelWork appends to out every entry the models' pools may start now (all their
// runnable entries but those of a tenant at its running bound), each counted as running
// until ran.
func (s *opScheduler) takeModelWork(out []*entry) []*entry {
	for name, p := range s.pools {
		if name == blockingPool {
			continue
		}
		for e := s.take(p); e != nil; e = s.take(p) {
			out = append(out, e)
		}
	}
	return out
}

// ran notes that the entry e, taken from its pool, has finished running: its tenant may
// have another entry taken.
func (s *opScheduler) ran(e *entry) {
	p := s.pool(e.poolName())
	if s.maxRunning > 0 && p.byTenant[e.rec.Tenant] >= s.maxRunning && len(p.tenants[e.rec.Tenant]) > 0 {
		s.noteRunnable(e) // the tenant was at its running bound with more queued
	}
	p.running--
	if p.byTenant[e.rec.Tenant]--; p.byTenant[e.rec.Tenant] <= 0 {
		delete(p.byTenant, e.rec.Tenant)
	}
}

// done notes that e has resolved: its tenant's slot is free and, for an ordered entry,
// the queue's turn moves past its seq_id.
func (s *opScheduler) done(e *entry) (runnable bool) {
	s.release(e.rec.Tenant)
	if !e.rec.Ordered {
		return false
	}
	q := s.queue(e.rec.QueueKey)
	delete(q.promoted, e.rec.SeqID)
	if e.rec.SeqID >= q.next {
		// A failed operation consumes its seq_id too: otherwise the client's pipeline
		// (which already sent the next seq_id) would wait forever.
		q.next = e.rec.SeqID + 1
		q.waitedAt = s.now()
	}
	return s.promote(q)
}

// drop takes every queued (not running) entry of queue key out of the operation scheduler and
// returns them, to be failed; its refusals ahead of their turn free their slots.
func (s *opScheduler) drop(key string) []*entry {
	var victims []*entry
	if q, ok := s.queues[key]; ok {
		for _, e := range q.waiting {
			victims = append(victims, e)
		}
		q.waiting = map[int64]*entry{}
		for _, e := range q.refused { // already resolved: only their slots are freed
			s.release(e.rec.Tenant)
		}
		q.refused = map[int64]*entry{}
	}
	for _, p := range s.pools {
		for t, q := range p.tenants {
			keep := q[:0]
			for _, e := range q {
				if e.rec.QueueKey == key {
					victims = append(victims, e)
				} else {
					keep = append(keep, e)
				}
			}
			if len(keep) == 0 {
				delete(p.tenants, t)
				for i, name := range p.order {
					if name == t {
						p.order = append(p.order[:i], p.order[i+1:]...)
						break
					}
				}
			} else {
				p.tenants[t] = keep
			}
		}
	}
	return victims
}

// drain takes every queued (not running) entry out of the operation scheduler and returns them.
func (s *opScheduler) drain() []*entry {
	var victims []*entry
	for _, q := range s.queues {
		for _, e := range q.waiting {
			victims = append(victims, e)
		}
		q.waiting = map[int64]*entry{}
	}
	for _, p := range s.pools {
		for _, q := range p.tenants {
			victims = append(victims, q...)
		}
		p.tenants, p.order = map[string][]*entry{}, nil
	}
	return victims
}

// overdue takes out the waiting entries of every ordered queue that has waited longer
// than gap for its next seq_id, and returns them with the seq_id each waited for.
func (s *opScheduler) overdue(now time.Time, gap time.Duration) (victims []*entry, missing []int64) {
	for _, q := range s.queues {
		if len(q.waiting) > 0 && now.Sub(q.waitedAt) > gap {
			for _, e := range q.waiting {
				victims = append(victims, e)
				missing = append(missing, q.next)
			}
			q.waiting = map[int64]*entry{}
		}
	}
	return victims, missing
}

// state describes why an unfinished entry has not run (a Queue* value; "" once done).
func (s *opScheduler) state(e *entry) string {
	switch e.rec.Status {
	case StatusRunning:
		return QueueActive
	case StatusPending:
	default:
		return ""
	}
	if s.full(e.rec.Tenant) {
		return QueuePausedRateLimit
	}
	if e.rec.Ordered {
		if q := s.queues[e.rec.QueueKey]; q != nil && e.rec.SeqID > q.next {
			return QueuePausedCapacity // waiting for an earlier seq_id
		}
	}
	if p := s.pools[e.poolName()]; p != nil {
		if s.maxRunning > 0 && p.byTenant[e.rec.Tenant] >= s.maxRunning {
			return QueuePausedCapacity // the tenant's running bound
		}
		if !e.blocking {
			return QueueActive // a model's pool starts everything else at once
		}
		if q := p.tenants[e.rec.Tenant]; len(q) > 0 && q[0] == e && p.running < s.workers {
			return QueueActive
		}
		if p.running >= s.workers {
			return QueuePausedCapacity // every blocking worker is busy
		}
	}
	return QueueActive
}

// retryAfter estimates when a tenant over its limit may try again, from the operations
// of the model poolName queued ahead (in its pool and in the blocking pool).
func (s *opScheduler) retryAfter(poolName string) time.Duration {
	d := time.Second
	n := 0
	if p, ok := s.pools[poolName]; ok {
		for _, q := range p.tenants {
			n += len(q)
		}
	}
	if p, ok := s.pools[blockingPool]; ok {
		for _, q := range p.tenants {
			for _, e := range q {
				if e.task.Pool == poolName {
					n++
				}
			}
		}
	}
	// A rough estimate: a tenth of a second per queued operation ahead, capped.
	if est := time.Duration(n) * 100 * time.Millisecond; est > d {
		d = est
	}
	return min(d, 30*time.Second)
}
