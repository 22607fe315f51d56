package setup

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func newSampled(ratio float64) (*sampledProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithSpanProcessor(rec))
	return &sampledProvider{sdk: sdk, neverRoot: ratio <= 0}, rec
}

func remoteParent(sampled bool) context.Context {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, Remote: true,
	})
	if sampled {
		sc = sc.WithTraceFlags(trace.FlagsSampled)
	}
	return trace.ContextWithRemoteSpanContext(context.Background(), sc)
}

// The wrapper must take exactly the SDK sampler's decisions, only more cheaply.
func TestSampledProviderFollowsTheSampler(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		ratio     float64
		parent    context.Context
		opts      []trace.SpanStartOption
		recorded  bool
		sameCtx   bool // the dropped span is served without the SDK
		wantTrace trace.TraceID
	}{
		{"ratio 0 root", 0, context.Background(), nil, false, true, trace.TraceID{}},
		{"ratio 0 under a sampled parent", 0, remoteParent(true), nil, true, false, trace.TraceID{1, 2, 3}},
		{"ratio 0 under an unsampled parent", 0, remoteParent(false), nil, false, true, trace.TraceID{1, 2, 3}},
		{"ratio 1 root", 1, context.Background(), nil, true, false, trace.TraceID{}},
		{"ratio 1 under an unsampled parent", 1, remoteParent(false), nil, false, true, trace.TraceID{1, 2, 3}},
		{"ratio 1 new root under an unsampled parent", 1, remoteParent(false), []trace.SpanStartOption{trace.WithNewRoot()}, true, false, trace.TraceID{}},
		{"ratio 0 new root under a sampled parent", 0, remoteParent(true), []trace.SpanStartOption{trace.WithNewRoot()}, false, false, trace.TraceID{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, rec := newSampled(c.ratio)
			ctx, sp := p.Tracer("test").Start(c.parent, "op", c.opts...)
			sp.End()
			if got := len(rec.Ended()) == 1; got != c.recorded {
				t.Fatalf("recorded = %v, want %v", got, c.recorded)
			}
			if (ctx == c.parent) != c.sameCtx {
				t.Fatalf("context returned unchanged = %v, want %v", ctx == c.parent, c.sameCtx)
			}
			if sp.IsRecording() != false {
				t.Fatal("span still recording after End")
			}
			if c.wantTrace.IsValid() && trace.SpanContextFromContext(ctx).TraceID() != c.wantTrace {
				t.Fatalf("trace id %v, want the parent's %v", trace.SpanContextFromContext(ctx).TraceID(), c.wantTrace)
			}
		})
	}
}

func TestSampledProviderCachesTracers(t *testing.T) {
	p, _ := newSampled(1)
	if p.Tracer("a") != p.Tracer("a") {
		t.Fatal("the same name gave two tracers")
	}
	if p.Tracer("a") == p.Tracer("b") {
		t.Fatal("two names share a tracer")
	}
	ctx := remoteParent(false)
	allocs := testing.AllocsPerRun(100, func() {
		_, sp := p.Tracer("a").Start(ctx, "op")
		sp.End()
	})
	if allocs != 0 {
		t.Fatalf("a sampled-out child span costs %.0f allocations, want 0", allocs)
	}
}

// A parent that records without being sampled (another provider's RecordOnly decision) is
// not handed to the caller as its own span: ending the child must not end the parent.
func TestSampledProviderKeepsRecordOnlyParentsAlive(t *testing.T) {
	t.Parallel()
	recordOnly := sdktrace.NewTracerProvider(sdktrace.WithSampler(recordOnlySampler{}))
	ctx, parent := recordOnly.Tracer("other").Start(context.Background(), "parent")
	if !parent.IsRecording() || parent.SpanContext().IsSampled() {
		t.Fatal("test set-up: the parent should record without being sampled")
	}
	p, _ := newSampled(1)
	_, child := p.Tracer("test").Start(ctx, "child")
	child.End()
	if !parent.IsRecording() {
		t.Fatal("ending the child ended the record-only parent")
	}
	parent.End()
}

type recordOnlySampler struct{}

func (recordOnlySampler) ShouldSample(sdktrace.SamplingParameters) sdktrace.SamplingResult {
	return sdktrace.SamplingResult{Decision: sdktrace.RecordOnly}
}
func (recordOnlySampler) Description() string { return "record only" }
