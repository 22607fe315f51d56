package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Request traces multi-stage work in the FastDeploy/SGLang slice model (spec §8): one span
// for the request, and one child span per named slice (stage). When the request span is
// not recording (tracing off or sampled out) slices, events and attributes cost nothing.
// It is not safe for concurrent use; carry it across a goroutine or process boundary
// with Carrier and ResumeRequest.
type Request struct {
	ctx   context.Context
	span  trace.Span
	tr    trace.Tracer
	slice trace.Span
	on    bool
}

// StartRequest opens the request span, with the correlation keys of ctx and attrs.
func StartRequest(ctx context.Context, tr trace.Tracer, name string, attrs ...attribute.KeyValue) *Request {
	ctx, sp := StartSpan(ctx, tr, name, attrs...)
	return &Request{ctx: ctx, span: sp, tr: tr, on: sp.IsRecording()}
}

// ResumeRequest continues a request whose Carrier crossed a boundary: slices started
// here are children of the original request span.
func ResumeRequest(ctx context.Context, tr trace.Tracer, carrier map[string]string) *Request {
	ctx = Extract(ctx, carrier)
	sc := trace.SpanContextFromContext(ctx)
	return &Request{ctx: ctx, span: trace.SpanFromContext(ctx), tr: tr, on: sc.IsSampled()}
}

// StartSlice ends the current slice, if any, and opens a new one.
func (r *Request) StartSlice(name string, attrs ...attribute.KeyValue) {
	if !r.on {
		return
	}
	r.EndSlice()
	_, r.slice = StartSpan(r.ctx, r.tr, name, attrs...)
}

// EndSlice ends the current slice, adding attrs to it first.
func (r *Request) EndSlice(attrs ...attribute.KeyValue) {
	if r.slice == nil {
		return
	}
	if len(attrs) > 0 && r.slice.IsRecording() {
		r.slice.SetAttributes(attrs...)
	}
	r.slice.End()
	r.slice = nil
}

// Event adds an event to the current slice (or to the request span between slices).
func (r *Request) Event(name string, attrs ...attribute.KeyValue) {
	if !r.on {
		return
	}
	sp := r.slice
	if sp == nil {
		sp = r.span
	}
	sp.AddEvent(name, trace.WithAttributes(attrs...))
}

// SetAttributes sets attributes on the current slice (or the request span).
func (r *Request) SetAttributes(attrs ...attribute.KeyValue) {
	sp := r.slice
	if sp == nil {
		sp = r.span
	}
	if sp.IsRecording() {
		sp.SetAttributes(attrs...)
	}
}

// Recording reports whether the request span records (so attributes are worth building).
func (r *Request) Recording() bool { return r.on }

// Context is the request span's context.
func (r *Request) Context() context.Context { return r.ctx }

// Carrier serialises the request's trace context for another goroutine or process.
func (r *Request) Carrier() map[string]string { return Inject(r.ctx) }

// End ends the open slice and the request span, setting attrs on the request span and
// recording err.
func (r *Request) End(err error, attrs ...attribute.KeyValue) {
	r.EndSlice()
	if len(attrs) > 0 && r.span.IsRecording() {
		r.span.SetAttributes(attrs...)
	}
	End(r.span, err)
}
