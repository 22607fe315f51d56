package setup

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/tuft-go/tuft/telemetry"
)

// The session-span processor turns the SDK on with telemetry disabled, hands the sink
// every ended span that has a tenant (from its start context or its tuft.tenant
// attribute) and a session, run or sampler id, and nothing else.
func TestSessionSpansGoToTheSink(t *testing.T) {
	before := runtime.NumGoroutine()
	var mu sync.Mutex
	var got []telemetry.SessionSpan
	sink := &telemetry.SpanSink{}
	sink.Set(func(s telemetry.SessionSpan) { mu.Lock(); got = append(got, s); mu.Unlock() })
	tel, err := New(context.Background(), telemetry.DefaultConfig(), "server", WithSessionSpans(sink), WithLogWriter(&strings.Builder{}))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if tel.SessionSpans() != sink {
		t.Fatal("SessionSpans is not the option's sink")
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("session spans without an exporter started %d goroutines", n-before)
	}
	tr := tel.TracerProvider().Tracer("t")

	// A server span: the tenant arrives as an attribute after its start.
	ctx, http := tr.Start(context.Background(), "POST /api/v1/forward_backward")
	http.SetAttributes(attribute.String(telemetry.AttrTenant, "alice"), attribute.String(telemetry.AttrTrainingRunID, "run-1"))
	// A child started with the tenant in its context, naming the session, failing.
	cctx := telemetry.WithKeys(telemetry.WithTenant(ctx, "alice"), telemetry.Keys{SessionID: "s-1"})
	_, child := telemetry.StartSpan(cctx, tr, "training_controller.run_forward_backward", attribute.Int("tuft.seq_id", 3))
	telemetry.End(child, errors.New("boom"))
	// Not recorded: a tenant's span of no session, and a session span of no tenant.
	_, none := telemetry.StartSpan(telemetry.WithTenant(ctx, "alice"), tr, "store.GET")
	none.End()
	_, anon := telemetry.StartSpan(telemetry.WithKeys(context.Background(), telemetry.Keys{SessionID: "s-1"}), tr, "anon")
	anon.End()
	http.End()

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("recorded %d spans, want 2: %+v", len(got), got)
	}
	c, h := got[0], got[1]
	if c.Name != "training_controller.run_forward_backward" || c.Tenant != "alice" || c.SessionID != "s-1" || !c.Error ||
		c.StatusMessage != "boom" || c.ParentSpanID != http.SpanContext().SpanID().String() || c.Attributes["tuft.seq_id"] != int64(3) ||
		c.TraceID != http.SpanContext().TraceID().String() || c.End.Before(c.Start) {
		t.Fatalf("child: %+v", c)
	}
	if h.Tenant != "alice" || h.TrainingRunID != "run-1" || h.ParentSpanID != "" || h.Error {
		t.Fatalf("server span: %+v", h)
	}
	if _, ok := h.Attributes[telemetry.AttrTenant]; ok {
		t.Fatalf("the tenant is repeated among the attributes: %v", h.Attributes)
	}
	sink.Set(nil)
	_, late := telemetry.StartSpan(cctx, tr, "late")
	late.End()
	if len(got) != 2 {
		t.Fatal("a span reached a cleared sink")
	}
}
