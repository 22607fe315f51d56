package futures

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/telemetry"
)

// Execution. A runnable task runs one of two ways, and neither parks a goroutine per
// operation:
//
//   - An asynchronous task (Task.Start: model work) is started by the dispatcher, one
//     goroutine, the moment it is runnable (its seq_id's turn, its tenant under
//     Options.MaxRunningPerTenant): Start hands the work to the executor and returns, and
//     the executor reports the outcome through the task's Completion, which only queues
//     it. Tenant fairness for model work is decided once, by the model's token scheduler
//     (backend: deficit round robin in tokens), not here.
//   - A blocking task (Task.Run: create, save, load, unload, CPU or IO work) runs on one
//     of Options.Workers blocking workers, taken round-robin across tenants.
//
// The outcome of either ends the execution span, is persisted, and only then resolves
// the future (finish), which frees the tenant's slot and releases the queue's next
// seq_id. For an asynchronous task this happens on one of Options.Workers completion
// workers, which also run the continuations tasks queue (Completion.Finish and Step):
// an executor calls back from its model loop, which must never wait on a store.
//
// The Manager's goroutines are therefore fixed at New: the janitor, the dispatcher and
// 2 × Options.Workers workers, however many operations are queued or running
// (tests/layers TestNoParkedGoroutinePerOperation keeps it so).

// startGoroutines starts the Manager's fixed goroutines (called once, by New).
func (m *Manager) startGoroutines() {
	m.workers.Add(2 + 2*m.o.Workers)
	go m.janitor()
	go m.dispatcher()
	for range m.o.Workers {
		go m.blockingWorker()
		go m.completionWorker()
	}
}

// wake wakes whoever takes the entries the operation scheduler noted runnable: the
// dispatcher for a model's pool, the blocking workers for theirs. Callers hold m.mu.
func (m *Manager) wake() {
	if m.sched.wakeModel {
		m.sched.wakeModel = false
		m.models.Signal()
	}
	if m.sched.wakeBlocking {
		m.sched.wakeBlocking = false
		m.cond.Broadcast()
	}
}

// dispatcher starts every runnable asynchronous task as soon as it is runnable.
func (m *Manager) dispatcher() {
	defer m.workers.Done()
	var batch []*entry
	var ended []endedEntry
	var starts []*Completion
	for {
		m.mu.Lock()
		for {
			if m.closing {
				m.mu.Unlock()
				return
			}
			if batch = m.sched.takeModelWork(batch[:0]); len(batch) > 0 {
				break
			}
			m.models.Wait()
		}
		ended, starts = ended[:0], starts[:0]
		for _, e := range batch {
			if why, cat := m.ended(e); why != "" {
				m.sched.ran(e)
				ended = append(ended, endedEntry{e, why, cat})
				continue
			}
			starts = append(starts, m.begin(e))
		}
		m.wake()
		m.mu.Unlock()
		for _, x := range ended {
			// Cancelled or past its deadline while it waited for its turn: it never runs.
			m.failWith(x.e, x.why, x.cat)
		}
		for _, c := range starts {
			m.start(c)
		}
		clear(batch)
		clear(ended)
		clear(starts)
	}
}

// endedEntry is an entry that must not run, and why (Manager.ended).
type endedEntry struct {
	e   *entry
	why string
	cat Category
}

// start calls an asynchronous task's Start under its span. It never waits: Start hands
// the work over and returns.
func (m *Manager) start(c *Completion) {
	m.open(c)
	defer func() {
		if v := recover(); v != nil {
			c.Done(Result{}, m.panicked(c.ctx, c.e, v))
		}
	}()
	c.e.task.Start(c.ctx, c)
}

// blockingWorker runs blocking tasks, one after another.
func (m *Manager) blockingWorker() {
	defer m.workers.Done()
	for {
		m.mu.Lock()
		var e *entry
		for {
			if m.closing {
				m.mu.Unlock()
				return
			}
			if e = m.sched.take(m.sched.pool(blockingPool)); e != nil {
				break
			}
			m.cond.Wait()
		}
		if why, cat := m.ended(e); why != "" {
			// Cancelled or past its deadline while it waited for its turn: it never runs.
			m.sched.ran(e)
			m.wake()
			m.mu.Unlock()
			m.failWith(e, why, cat)
			continue
		}
		c := m.begin(e)
		m.mu.Unlock()
		m.open(c)
		res, err := m.run(c.ctx, e)
		c.complete(res, err)
	}
}

// completionWorker runs the completion queue: asynchronous operations' outcomes and
// continuations.
func (m *Manager) completionWorker() {
	defer m.workers.Done()
	for {
		m.wmu.Lock()
		for len(m.work) == 0 && !m.workStop {
			m.wcond.Wait()
		}
		if len(m.work) == 0 {
			m.wmu.Unlock()
			return
		}
		f := m.work[0]
		m.work[0] = nil
		m.work = m.work[1:]
		m.wmu.Unlock()
		f()
	}
}

// queueWork appends f to the completion queue. It never waits (beyond a short lock), so
// an executor may call it from its model loop.
func (m *Manager) queueWork(f func()) {
	m.wmu.Lock()
	m.work = append(m.work, f)
	m.wmu.Unlock()
	m.wcond.Signal()
}

// stopCompletions ends the completion workers once their queue is empty (Shutdown, when
// no operation runs any more).
func (m *Manager) stopCompletions() {
	m.wmu.Lock()
	m.workStop = true
	m.wmu.Unlock()
	m.wcond.Broadcast()
}

// Completion is a started operation's way back to its Manager: the executor (or the
// continuation that follows it) reports the outcome exactly once, through Done or
// Finish. None of its methods waits, so they may be called from a model's loop.
type Completion struct {
	m      *Manager
	e      *entry
	ctx    context.Context // the operation's: its deadline, its cancellation, its span
	cancel context.CancelFunc
	span   trace.Span
	wait   time.Duration // queue wait, from submission to start
	start  time.Time
	done   atomic.Bool
}

// Done resolves the operation with its outcome. Only the first call counts.
func (c *Completion) Done(res Result, err error) {
	if !c.done.CompareAndSwap(false, true) {
		c.m.log.ErrorContext(c.ctx, "operation reported its outcome twice", "request_id", c.e.rec.ID, "op", c.e.rec.OpType)
		return
	}
	c.m.queueWork(func() { c.complete(res, err) })
}

// Finish runs cont on a completion worker and resolves the operation with what it
// returns: the rest of an operation after the executor's part (encoding its result,
// recording what it changed), which may wait on a store but not on a model.
func (c *Completion) Finish(cont func() (Result, error)) {
	c.Step(func() {
		res, err := cont()
		c.Done(res, err)
	})
}

// Step runs step on a completion worker: a part of the operation that may wait on a store
// but not on a model, and that ends by reporting the outcome (Done, Finish) or by handing
// more work to an executor whose callback does. A panic fails the operation.
func (c *Completion) Step(step func()) {
	c.m.queueWork(func() {
		defer func() {
			if v := recover(); v != nil {
				c.Done(Result{}, c.m.panicked(c.ctx, c.e, v))
			}
		}()
		step()
	})
}

// begin marks a taken entry running and makes its Completion. Callers hold m.mu.
func (m *Manager) begin(e *entry) *Completion {
	m.running.Add(1)
	e.rec.Status, e.rec.StartedAt = StatusRunning, m.now()
	// The operation's context: its deadline, and e.cancel ends it early, for whoever
	// must stop it (Cancel, with ErrCancelled as the cause).
	ctx, cancel := runContext(e)
	e.cancel = cancel
	return &Completion{m: m, e: e, ctx: ctx, cancel: cancel, wait: e.rec.StartedAt.Sub(e.queued)}
}

// open starts the operation's execution span and records its queue wait.
func (m *Manager) open(c *Completion) {
	e := c.e
	ctx := telemetry.WithKeys(c.ctx, e.keys)
	ctx = telemetry.WithKeys(ctx, telemetry.Keys{RequestID: e.rec.ID, OperationType: e.rec.OpType})
	ctx = telemetry.WithTenant(ctx, e.rec.Tenant) // for the session-span record
	// The execution continues the enqueuing request's trace (so one trace runs from the
	// HTTP span down to the model executor) and also links to the enqueuing span, the
	// conventional marker of an asynchronous hand-off.
	var opts []trace.SpanStartOption
	switch {
	case e.link.IsSampled():
		ctx = trace.ContextWithRemoteSpanContext(ctx, e.link)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: e.link, Attributes: []attribute.KeyValue{attribute.String(telemetry.AttrLink, telemetry.LinkEnqueuedBy)}}))
	case e.link.IsValid():
		// Sampled out at the request, so sampled out here too: no link to build, but the
		// trace context stays for the logs of the execution.
		ctx = trace.ContextWithRemoteSpanContext(ctx, e.link)
	default:
		opts = append(opts, trace.WithNewRoot())
	}
	ctx, span := m.tracer.Start(ctx, telemetry.SpanFutureExecute, opts...)
	if span.IsRecording() {
		attrs := telemetry.AppendKeyAttributes(make([]attribute.KeyValue, 0, telemetry.MaxKeyAttributes+3), telemetry.KeysFrom(ctx))
		attrs = append(attrs, attribute.String(telemetry.AttrModelID, e.rec.ModelID),
			attribute.Float64(telemetry.AttrQueueWaitMs, float64(c.wait.Microseconds())/1000))
		if e.rec.Ordered {
			attrs = append(attrs, attribute.Int64(telemetry.AttrSeqID, e.rec.SeqID))
		}
		span.SetAttributes(attrs...)
	}
	m.ins.FuturesWaitTime.Record(ctx, c.wait.Seconds(), telemetry.RecordAttrs(telemetry.MAttrOperationType, e.rec.OpType)...)
	c.ctx, c.span, c.start = ctx, span, time.Now()
}

// complete records a finished operation's outcome: its span and duration, then its
// result, persisted before the future resolves; the entry leaves the running count.
func (c *Completion) complete(res Result, err error) {
	m, e := c.m, c.e
	err = m.endedError(c.ctx, e, err)
	m.ins.FuturesExecutionTime.Record(c.ctx, time.Since(c.start).Seconds(), telemetry.RecordAttrs(telemetry.MAttrOperationType, e.rec.OpType)...)
	telemetry.End(c.span, err)

	m.mu.Lock()
	e.rec.DoneAt = m.now()
	if err != nil {
		e.rec.Status = StatusFailed
		e.rec.Failure = &Failure{Message: err.Error(), Category: CategoryOf(err)}
	} else {
		e.rec.Status = StatusReady
		e.rec.Result = &res
	}
	e.noteResultQueued()
	rec := e.rec
	m.mu.Unlock()
	// Where the store queues writes, the result is persisted while the worker moves on:
	// consecutive results then share one store commit. Waiters are woken, and the
	// queue's next seq_id released, only once the result is durable.
	m.persistThen(context.Background(), &rec, func(perr error) {
		if perr != nil {
			m.log.Error("persist future result", "request_id", rec.ID, "error", perr)
		}
		m.finish(e, rec.Status)
	})
	m.mu.Lock()
	m.sched.ran(e)
	e.cancel = nil
	m.wake() // a tenant at its running bound may go on
	m.mu.Unlock()
	c.cancel()
	m.running.Done()
}

// panicked logs a task's panic and turns it into a server failure.
func (m *Manager) panicked(ctx context.Context, e *entry, v any) error {
	m.log.ErrorContext(ctx, "operation panicked", "request_id", e.rec.ID, "op", e.rec.OpType, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	return fmt.Errorf("internal error while running %s: %v", e.rec.OpType, v)
}

// run calls the task, turning a panic into a server failure.
func (m *Manager) run(ctx context.Context, e *entry) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = m.panicked(ctx, e, v)
		}
	}()
	return e.task.Run(ctx)
}

// finish wakes waiters, frees the tenant's slot and lets the next seq_id run.
func (m *Manager) finish(e *entry, st Status) {
	m.mu.Lock()
	m.addWeight(e.task.Pool, e.rec.Tenant, -e.task.Weight)
	m.sched.done(e)
	m.wake()
	close(e.done)
	e.task.Run, e.task.Start = nil, nil // release what the operation's closure holds (request data)
	m.doneList = append(m.doneList, e)
	m.mu.Unlock()
	m.ins.FuturesQueueLength.Add(context.Background(), -1, telemetry.AddAttrs(telemetry.MAttrQueueState, QueueActive)...)
	m.completed(context.Background(), e.rec.OpType, st)
}

// fail resolves a not-yet-running entry as failed. Callers must not hold m.mu.
func (m *Manager) fail(e *entry, msg string) { m.failWith(e, msg, CategoryServer) }

// failWith is fail with the failure's category.
func (m *Manager) failWith(e *entry, msg string, cat Category) {
	m.mu.Lock()
	e.rec.Status, e.rec.DoneAt = StatusFailed, m.now()
	e.rec.Failure = &Failure{Message: msg, Category: cat}
	e.noteResultQueued()
	rec := e.rec
	m.mu.Unlock()
	if err := m.persist(context.Background(), &rec); err != nil {
		m.log.Error("persist failed future", "request_id", rec.ID, "error", err)
	}
	m.finish(e, StatusFailed)
}

// created counts an admitted operation, queued.
func (m *Manager) created(ctx context.Context, t Task) {
	attrs := telemetry.AddAttrs(telemetry.MAttrOperationType, t.OpType)
	if m.ins.ModelIDAttribute && t.ModelID != "" {
		attrs = telemetry.AddAttrs(telemetry.MAttrOperationType, t.OpType, telemetry.MAttrModelID, t.ModelID)
	}
	m.ins.FuturesCreated.Add(ctx, 1, attrs...)
	m.ins.FuturesQueueLength.Add(ctx, 1, telemetry.AddAttrs(telemetry.MAttrQueueState, QueueActive)...)
}

// completed counts a resolved operation.
func (m *Manager) completed(ctx context.Context, op string, st Status) {
	m.ins.FuturesCompleted.Add(ctx, 1, telemetry.AddAttrs(telemetry.MAttrOperationType, op, telemetry.MAttrStatus, string(st))...)
}
