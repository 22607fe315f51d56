package setup

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// sampledProvider wraps the SDK's tracer provider so that spans the sampler would drop
// cost nothing. Our sampler is ParentBased(TraceIDRatioBased(ratio)): a child of a valid
// parent that is not sampled is always dropped, and with ratio 0 so is every root. The
// SDK still allocates a non-recording span (and a context) for each of those; on the
// control plane's hot path that is a measurable share of a request. Here such a Start
// returns the caller's context and its current span unchanged: the trace context (and
// so log correlation and propagation to workers) stays that of the parent, and the
// sampling decision is exactly the SDK's.
type sampledProvider struct {
	embedded.TracerProvider
	sdk       trace.TracerProvider
	neverRoot bool     // sampling ratio 0: a root span is never sampled
	tracers   sync.Map // name → *sampledTracer, for tracers asked for without options
}

// Tracer implements trace.TracerProvider. Instrumented code asks for its tracer per
// span (telemetry.Tracer(scope)), so the common form, a name without options, is cached.
func (p *sampledProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	if len(opts) == 0 {
		if t, ok := p.tracers.Load(name); ok {
			return t.(*sampledTracer)
		}
	}
	t := &sampledTracer{sdk: p.sdk.Tracer(name, opts...), neverRoot: p.neverRoot}
	if len(opts) == 0 {
		p.tracers.Store(name, t)
	}
	return t
}

type sampledTracer struct {
	embedded.Tracer
	sdk       trace.Tracer
	neverRoot bool
}

// Start implements trace.Tracer.
func (t *sampledTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t.dropped(ctx, opts) {
		// Never hand out a live span as the caller's own: a record-only parent (from another
		// provider or sampler) would be ended by the caller. The SDK decides those.
		if parent := trace.SpanFromContext(ctx); !parent.IsRecording() {
			return ctx, parent
		}
	}
	return t.sdk.Start(ctx, name, opts...)
}

// dropped reports whether ParentBased(TraceIDRatioBased) is certain to drop the span.
func (t *sampledTracer) dropped(ctx context.Context, opts []trace.SpanStartOption) bool {
	psc := trace.SpanContextFromContext(ctx)
	if !psc.IsValid() {
		// A root: only ratio 0 decides without the trace id. A root can carry links
		// or attributes for the sampler, but TraceIDRatioBased reads neither.
		return t.neverRoot
	}
	if psc.IsSampled() {
		return false
	}
	if len(opts) > 0 {
		if cfg := trace.NewSpanStartConfig(opts...); cfg.NewRoot() {
			return t.neverRoot // WithNewRoot ignores the parent
		}
	}
	return true
}
