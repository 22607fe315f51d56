package futures

import (
	"slices"
	"testing"
	"time"
)

// The operation scheduler's decisions, step by step: no goroutines, no store, a clock the test
// moves.

type schedFixture struct {
	t     *testing.T
	s     *opScheduler
	clock time.Time
}

func newSchedFixture(t *testing.T, maxQueued, workers int) *schedFixture {
	f := &schedFixture{t: t, clock: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	f.s = newOpScheduler(func() time.Time { return f.clock }, maxQueued, workers, 0)
	return f
}

// newEntry makes an entry of a blocking task of model "p" as Submit admits it: ordered
// when queue is not "". Blocking tasks share the blocking pool's workers, so these tests
// see the pool's order.
func newEntry(tenant, queue string, seq int64) *entry {
	return &entry{
		rec:      Record{ID: newID(), Tenant: tenant, QueueKey: queue, SeqID: seq, Ordered: queue != "", Status: StatusPending, Pool: "p"},
		task:     Task{Tenant: tenant, QueueKey: queue, SeqID: seq, Ordered: queue != "", Pool: "p"},
		blocking: true,
	}
}

// modelEntry is newEntry for an asynchronous task (model work), run from model p's pool.
func modelEntry(tenant, queue string, seq int64) *entry {
	e := newEntry(tenant, queue, seq)
	e.blocking = false
	return e
}

func inOrder(e *entry) *entry { e.task.InOrder = true; return e }

// submit admits e as Submit does (its tenant's slot, then the operation scheduler).
func (f *schedFixture) submit(e *entry) bool {
	f.s.reserve(e.rec.Tenant)
	return f.s.add(e)
}

// take takes the blocking pool's next entry and marks it running.
func (f *schedFixture) take() *entry {
	e := f.s.take(f.s.pool(blockingPool))
	if e != nil {
		e.rec.Status = StatusRunning
	}
	return e
}

// finish resolves a taken entry as a worker and finish do.
func (f *schedFixture) finish(e *entry) bool {
	f.s.ran(e)
	e.rec.Status = StatusReady
	return f.s.done(e)
}

// drainPool runs the pool's entries one after another to completion and lists them in
// the order they ran: queue/seq_id for ordered entries, the tenant for the others.
func (f *schedFixture) drainPool() []string {
	var got []string
	for e := f.take(); e != nil; e = f.take() {
		if e.rec.Ordered {
			got = append(got, indexKey(e.rec.QueueKey, e.rec.SeqID))
		} else {
			got = append(got, e.rec.Tenant)
		}
		f.finish(e)
	}
	return got
}

func TestOpSchedulerRunsAnOrderedQueueInSeqOrder(t *testing.T) {
	f := newSchedFixture(t, 100, 1)
	for _, seq := range []int64{3, 5, 2, 4} {
		if f.submit(newEntry("a", "r", seq)) {
			t.Fatalf("seq %d became runnable before seq 1 arrived", seq)
		}
	}
	if e := f.take(); e != nil {
		t.Fatalf("took seq %d with seq 1 missing", e.rec.SeqID)
	}
	if !f.submit(newEntry("a", "r", 1)) {
		t.Fatal("seq 1 did not become runnable")
	}
	one := f.take()
	// While seq 1 runs, nothing else of the queue runs, whatever arrives.
	if f.submit(newEntry("a", "r", 6)) || f.take() != nil {
		t.Fatal("a later seq_id ran while seq 1 was running")
	}
	if got := f.s.nextSeq("r"); got != 1 {
		t.Fatalf("next while seq 1 runs: %d", got)
	}
	if !f.finish(one) {
		t.Fatal("finishing seq 1 did not release seq 2")
	}
	if got, want := f.drainPool(), []string{"r/2", "r/3", "r/4", "r/5", "r/6"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if got := f.s.nextSeq("r"); got != 7 {
		t.Fatalf("next after seq 6: %d", got)
	}
	if n := len(f.s.open); n != 0 {
		t.Fatalf("slots still open: %v", f.s.open)
	}
}

func TestOpSchedulerSharesAPoolRoundRobinAcrossTenants(t *testing.T) {
	f := newSchedFixture(t, 100, 1)
	for _, tenant := range []string{"a", "a", "a", "a", "a", "b", "b", "c"} {
		f.submit(newEntry(tenant, "", 0))
	}
	want := []string{"a", "b", "c", "a", "b", "a", "a", "a"}
	if got := f.drainPool(); !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	// A tenant arriving behind a long queue runs within one turn of the ring.
	for range 10 {
		f.submit(newEntry("a", "", 0))
	}
	f.take()
	f.submit(newEntry("b", "", 0))
	if got := f.drainPool(); slices.Index(got, "b") > 1 {
		t.Fatalf("late tenant b waited: %v", got)
	}
}

// An ordered queue's operations reach the pool one at a time, so another tenant's
// operation is never behind more than one of them.
func TestOpSchedulerOrderedAndUnorderedShareThePool(t *testing.T) {
	f := newSchedFixture(t, 100, 1)
	for seq := int64(1); seq <= 3; seq++ {
		f.submit(newEntry("a", "r", seq))
	}
	f.submit(newEntry("b", "", 0))
	if got, want := f.drainPool(), []string{"r/1", "b", "r/2", "r/3"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestOpSchedulerSeqGapsGoOverdue(t *testing.T) {
	const gap = time.Minute
	f := newSchedFixture(t, 100, 1)
	three, four := newEntry("a", "r", 3), newEntry("a", "r", 4)
	f.submit(three)
	f.submit(four)
	f.clock = f.clock.Add(gap)
	if v, _ := f.s.overdue(f.clock, gap); len(v) != 0 {
		t.Fatalf("overdue at exactly the gap timeout: %d", len(v))
	}
	f.clock = f.clock.Add(time.Nanosecond)
	victims, missing := f.s.overdue(f.clock, gap)
	if len(victims) != 2 || !slices.Contains(victims, three) || !slices.Contains(victims, four) || !slices.Equal(missing, []int64{1, 1}) {
		t.Fatalf("overdue: %d victims, missing %v", len(victims), missing)
	}
	if v, _ := f.s.overdue(f.clock.Add(time.Hour), gap); len(v) != 0 {
		t.Fatal("overdue entries were not taken out")
	}
	// Failing them consumes their seq_ids: the queue continues after them.
	f.s.done(three)
	f.s.done(four)
	if got := f.s.nextSeq("r"); got != 5 {
		t.Fatalf("next after failed gap waiters: %d", got)
	}
	// A queue that moves is never overdue: each step restarts its wait.
	f.submit(newEntry("a", "r", 7))
	f.clock = f.clock.Add(gap / 2)
	f.submit(newEntry("a", "r", 5))
	f.finish(f.take())
	f.clock = f.clock.Add(gap/2 + time.Second)
	if v, _ := f.s.overdue(f.clock, gap); len(v) != 0 {
		t.Fatal("a queue that moved half a gap ago went overdue")
	}
}

func TestOpSchedulerSkipsRefusedSeqIDs(t *testing.T) {
	f := newSchedFixture(t, 100, 1)
	f.submit(newEntry("a", "r", 1))
	one := f.take()
	// seq 2 is refused while seq 1 runs: settled when its turn comes.
	refused := newEntry("a", "r", 2)
	f.s.reserve("a")
	if f.s.refuse(refused) {
		t.Fatal("a refusal made something runnable while seq 1 runs")
	}
	f.submit(newEntry("a", "r", 3))
	if f.s.open["a"] != 3 {
		t.Fatalf("open slots %d, want 3 (running, refused ahead, waiting)", f.s.open["a"])
	}
	f.finish(one)
	if got, want := f.drainPool(), []string{"r/3"}; !slices.Equal(got, want) {
		t.Fatalf("after a refused seq 2: %v, want %v", got, want)
	}
	if len(f.s.open) != 0 {
		t.Fatalf("slots held after everything settled: %v", f.s.open)
	}
	// A refusal at the queue's turn settles at once.
	at := newEntry("a", "r", 4)
	f.s.reserve("a")
	f.s.refuse(at)
	if got := f.s.nextSeq("r"); got != 5 {
		t.Fatalf("next after refusing the current seq: %d", got)
	}
	// A refusal ahead that a gap timeout passes over frees its slot.
	f.s.reserve("a")
	f.s.refuse(newEntry("a", "r", 7))
	f.submit(newEntry("a", "r", 8))
	f.clock = f.clock.Add(time.Hour)
	victims, _ := f.s.overdue(f.clock, time.Minute)
	for _, e := range victims {
		f.s.done(e)
	}
	if len(f.s.open) != 0 {
		t.Fatalf("a refusal passed by the gap timeout still holds a slot: %v", f.s.open)
	}
}

func TestOpSchedulerSkipsAbandonedSeqIDsOnlyWhenALaterOneWaits(t *testing.T) {
	f := newSchedFixture(t, 100, 1)
	f.s.setNext("r", 2)
	f.s.abandon("r", []int64{2, 3})
	// A resubmission of an abandoned seq_id that comes first runs.
	if !f.submit(newEntry("a", "r", 2)) {
		t.Fatal("the resubmitted seq 2 did not run")
	}
	f.finish(f.take())
	// seq 3 is abandoned and not resubmitted: seq 4 runs without waiting for it.
	if !f.submit(newEntry("a", "r", 4)) {
		t.Fatal("seq 4 waited for the abandoned seq 3")
	}
	if got, want := f.drainPool(), []string{"r/4"}; !slices.Equal(got, want) {
		t.Fatalf("order %v", got)
	}
	// Without a later seq_id waiting, the queue stays at an abandoned seq_id.
	f.s.abandon("r", []int64{5})
	f.s.promote(f.s.queue("r"))
	if got := f.s.nextSeq("r"); got != 5 {
		t.Fatalf("next moved past an abandoned seq_id with nothing behind it: %d", got)
	}
}

func TestOpSchedulerInOrderSenderNeverWaitsForAGap(t *testing.T) {
	f := newSchedFixture(t, 100, 1)
	f.submit(inOrder(newEntry("a", "r", 1)))
	one := f.take()
	// seq 1 is in flight, not missing: the next seq_id waits for it.
	if f.submit(inOrder(newEntry("a", "r", 2))) || f.take() != nil {
		t.Fatal("seq 2 ran while seq 1 was running")
	}
	f.finish(one)
	f.finish(f.take())
	// seq 3 was reserved by the client and never sent.
	if !f.submit(inOrder(newEntry("a", "r", 4))) {
		t.Fatal("an in-order seq 4 waited for seq 3")
	}
	f.finish(f.take())
	// Another sender's seq_id waits for the gap below it.
	if f.submit(newEntry("a", "r", 6)) {
		t.Fatal("an out-of-order seq 6 did not wait for seq 5")
	}
	f.submit(newEntry("a", "r", 5))
	if got, want := f.drainPool(), []string{"r/5", "r/6"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestOpSchedulerDropTakesOnlyTheQueuesQueuedEntries(t *testing.T) {
	f := newSchedFixture(t, 100, 1)
	f.submit(newEntry("a", "r", 1))
	running := f.take()
	f.submit(newEntry("a", "r", 3))     // waiting for seq 2
	f.submit(newEntry("a", "other", 1)) // in the pool, another queue
	f.submit(newEntry("b", "", 0))      // in the pool, unordered
	f.s.reserve("a")
	f.s.refuse(newEntry("a", "r", 5)) // a refusal ahead holds a slot
	victims := f.s.drop("r")
	if len(victims) != 1 || victims[0].rec.SeqID != 3 {
		t.Fatalf("victims %v", victims)
	}
	for _, e := range victims {
		f.s.done(e)
	}
	if f.s.open["a"] != 2 { // running seq 1 and the other queue's seq 1
		t.Fatalf("open slots of a: %d, want 2", f.s.open["a"])
	}
	f.finish(running)
	if got, want := f.drainPool(), []string{"other/1", "b"}; !slices.Equal(got, want) {
		t.Fatalf("left in the pool: %v, want %v", got, want)
	}
	// A dropped queue's pooled entry leaves the ring with its tenant.
	f.submit(newEntry("c", "q", 1))
	f.submit(newEntry("d", "", 0))
	if v := f.s.drop("q"); len(v) != 1 {
		t.Fatalf("pooled victims %d", len(v))
	}
	if got := f.s.pool(blockingPool).order; !slices.Equal(got, []string{"d"}) {
		t.Fatalf("ring after drop: %v", got)
	}
}

func TestOpSchedulerDrainTakesEverythingQueued(t *testing.T) {
	f := newSchedFixture(t, 100, 1)
	f.submit(newEntry("a", "r", 1))
	running := f.take()
	f.submit(newEntry("a", "r", 2))
	f.submit(newEntry("a", "r", 4))
	f.submit(newEntry("b", "", 0))
	victims := f.s.drain()
	if len(victims) != 3 || slices.Contains(victims, running) {
		t.Fatalf("drained %d entries (running one included: %v)", len(victims), slices.Contains(victims, running))
	}
	if f.take() != nil {
		t.Fatal("the pool still has work after drain")
	}
}

func TestOpSchedulerLimitAndQueueStates(t *testing.T) {
	f := newSchedFixture(t, 3, 1)
	first, second, ahead := newEntry("a", "r", 1), newEntry("a", "", 0), newEntry("a", "r", 3)
	f.submit(first)
	f.submit(second)
	if f.s.full("a") {
		t.Fatal("full at 2 of 3")
	}
	if got := f.s.state(first); got != QueueActive {
		t.Fatalf("head of the pool: %s", got)
	}
	f.take()
	if got := f.s.state(second); got != QueuePausedCapacity {
		t.Fatalf("behind the pool's only busy worker: %s", got)
	}
	f.submit(ahead)
	if !f.s.full("a") || f.s.full("b") {
		t.Fatal("the limit is per tenant")
	}
	if got := f.s.state(ahead); got != QueuePausedRateLimit {
		t.Fatalf("tenant at its limit: %s", got)
	}
	f.s.maxQueued = 100
	if got := f.s.state(ahead); got != QueuePausedCapacity {
		t.Fatalf("waiting for an earlier seq_id: %s", got)
	}
	first.rec.Status = StatusReady
	if got := f.s.state(first); got != "" {
		t.Fatalf("resolved entry: %q", got)
	}
}

func TestOpSchedulerRetryAfterGrowsWithTheBacklog(t *testing.T) {
	f := newSchedFixture(t, 1000, 1)
	if got := f.s.retryAfter("p"); got != time.Second {
		t.Fatalf("empty pool: %s", got)
	}
	for range 50 {
		f.submit(newEntry("a", "", 0))
	}
	if got := f.s.retryAfter("p"); got != 5*time.Second {
		t.Fatalf("50 queued: %s", got)
	}
	for range 500 {
		f.submit(newEntry("b", "", 0))
	}
	if got := f.s.retryAfter("p"); got != 30*time.Second {
		t.Fatalf("550 queued: %s, want the 30 s cap", got)
	}
}

// With a running bound per tenant, a tenant at its bound is passed over (its next entry
// reports paused_capacity) until one of its entries ran; an expired queued entry leaves
// its pool.
func TestRunningBoundAndExpiry(t *testing.T) {
	f := newSchedFixture(t, 100, 8)
	f.s.maxRunning = 2
	var flood []*entry
	for range 4 {
		e := newEntry("flood", "", 0)
		flood = append(flood, e)
		f.submit(e)
	}
	a, b := f.take(), f.take()
	if a != flood[0] || b != flood[1] {
		t.Fatal("the flood's first two entries should run")
	}
	if e := f.take(); e != nil {
		t.Fatalf("a third entry of a tenant at its bound ran: %+v", e.rec)
	}
	if st := f.s.state(flood[2]); st != QueuePausedCapacity {
		t.Fatalf("an entry over the bound reports %q", st)
	}
	victim := newEntry("victim", "", 0)
	f.submit(victim)
	if e := f.take(); e != victim {
		t.Fatal("another tenant's entry did not run while the flood was at its bound")
	}
	f.finish(a)
	if e := f.take(); e != flood[2] {
		t.Fatal("the flood did not go on once one of its entries ran")
	}
	flood[3].rec.Deadline = f.clock.Add(time.Minute)
	if got := f.s.expired(f.clock.Add(2 * time.Minute)); len(got) != 1 || got[0] != flood[3] {
		t.Fatalf("expired %v, want the flood's last entry", got)
	}
	if e := f.take(); e != nil {
		t.Fatal("an expired entry stayed in its pool")
	}
}

// A model's pool hands every runnable entry out at once, whatever the number of blocking
// workers, but for a tenant at its running bound, which goes on once one of its entries ran.
func TestOpSchedulerStartsModelWorkAtOnce(t *testing.T) {
	f := newSchedFixture(t, 100, 1)
	f.s.maxRunning = 3
	var flood []*entry
	for range 5 {
		e := modelEntry("flood", "", 0)
		flood = append(flood, e)
		f.submit(e)
	}
	f.submit(modelEntry("a", "r", 1))
	f.submit(modelEntry("a", "r", 2)) // waits for seq_id 1
	f.submit(modelEntry("b", "", 0))
	if !f.s.wakeModel || f.s.wakeBlocking {
		t.Fatal("model work did not note the model pools (and only them) runnable")
	}
	got := f.s.takeModelWork(nil)
	if len(got) != 5 { // the flood's 3, r/1 and b's
		t.Fatalf("took %d entries, want 5", len(got))
	}
	if st := f.s.state(flood[3]); st != QueuePausedCapacity {
		t.Fatalf("an entry over the running bound reports %q", st)
	}
	for _, e := range got {
		e.rec.Status = StatusRunning
		if st := f.s.state(e); st != QueueActive {
			t.Fatalf("a taken entry reports %q", st)
		}
	}
	f.s.wakeModel = false
	f.s.ran(flood[0])
	if !f.s.wakeModel {
		t.Fatal("a tenant leaving its running bound did not wake the dispatcher")
	}
	if more := f.s.takeModelWork(nil); len(more) != 1 || more[0] != flood[3] {
		t.Fatalf("after one of the flood's entries ran: %v", more)
	}
	if f.take() != nil {
		t.Fatal("the blocking pool's workers see model work")
	}
}
