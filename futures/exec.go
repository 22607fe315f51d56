package futures

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/telemetry"
)

// Execution: each pool has Options.WorkersPerPool workers, started with the pool's first
// task. A worker takes the operation scheduler's next entry, runs it under its span, persists the
// outcome and only then resolves the future (finish), which frees the tenant's slot and
// releases the queue's next seq_id.

// startWorkers starts the workers of the named pool on its first task. Callers hold m.mu.
func (m *Manager) startWorkers(name string) {
	if m.withWorkers[name] {
		return
	}
	m.withWorkers[name] = true
	p := m.sched.pool(name)
	for range m.o.WorkersPerPool {
		m.workers.Add(1)
		go m.worker(p)
	}
}

func (m *Manager) worker(p *pool) {
	defer m.workers.Done()
	for {
		m.mu.Lock()
		var e *entry
		for {
			if m.closing {
				m.mu.Unlock()
				return
			}
			if e = m.sched.take(p); e != nil {
				break
			}
			m.cond.Wait()
		}
		if why, cat := m.ended(e); why != "" {
			// Cancelled or past its deadline while it waited for its turn: it never runs.
			m.sched.ran(p, e)
			m.mu.Unlock()
			m.failWith(e, why, cat)
			continue
		}
		m.running.Add(1)
		e.rec.Status, e.rec.StartedAt = StatusRunning, m.now()
		// The operation's context: its deadline, and e.cancel ends it early, for whoever
		// must stop it (Cancel, with ErrCancelled as the cause).
		ctx, cancel := runContext(e)
		e.cancel = cancel
		m.mu.Unlock()
		m.execute(ctx, e)
		m.mu.Lock()
		m.sched.ran(p, e)
		e.cancel = nil
		m.cond.Broadcast() // a tenant at its running bound may go on
		m.mu.Unlock()
		cancel()
		m.running.Done()
	}
}

// execute runs one task under its span and records its outcome.
func (m *Manager) execute(ctx context.Context, e *entry) {
	ctx = telemetry.WithKeys(ctx, e.keys)
	ctx = telemetry.WithKeys(ctx, telemetry.Keys{RequestID: e.rec.ID, OperationType: e.rec.OpType})
	ctx = telemetry.WithTenant(ctx, e.rec.Tenant) // for the session-span record
	wait := e.rec.StartedAt.Sub(e.queued)
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
			attribute.Float64(telemetry.AttrQueueWaitMs, float64(wait.Microseconds())/1000))
		if e.rec.Ordered {
			attrs = append(attrs, attribute.Int64(telemetry.AttrSeqID, e.rec.SeqID))
		}
		span.SetAttributes(attrs...)
	}
	ins := m.ins
	opAttr := telemetry.RecordAttrs(telemetry.MAttrOperationType, e.rec.OpType)
	ins.FuturesWaitTime.Record(ctx, wait.Seconds(), opAttr...)

	start := time.Now()
	res, err := m.run(ctx, e)
	err = m.endedError(ctx, e, err)
	ins.FuturesExecutionTime.Record(ctx, time.Since(start).Seconds(), opAttr...)
	telemetry.End(span, err)

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
	// The result is persisted while the worker moves on: consecutive results then share
	// one store commit. Waiters are woken, and the queue's next seq_id released, only
	// once the result is durable.
	m.persistThen(context.Background(), &rec, func(perr error) {
		if perr != nil {
			m.log.Error("persist future result", "request_id", rec.ID, "error", perr)
		}
		m.finish(e, rec.Status)
	})
}

// run calls the task, turning a panic into a server failure.
func (m *Manager) run(ctx context.Context, e *entry) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			m.log.ErrorContext(ctx, "operation panicked", "request_id", e.rec.ID, "op", e.rec.OpType, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("internal error while running %s: %v", e.rec.OpType, v)
		}
	}()
	return e.task.Run(ctx)
}

// finish wakes waiters, frees the tenant's slot and lets the next seq_id run.
func (m *Manager) finish(e *entry, st Status) {
	m.mu.Lock()
	m.addWeight(e.task.Pool, e.rec.Tenant, -e.task.Weight)
	if m.sched.done(e) {
		m.cond.Broadcast()
	}
	close(e.done)
	e.task.Run = nil // release what the operation's closure holds (request data)
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
