package service_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/store/memory"
	"github.com/tuft-go/tuft/telemetry"
)

// The recorder's queue holds at most limits.max_spans_per_session spans per tenant, so one
// tenant's burst never drops another's; a span is kept only for the tenant that owns its
// session, whichever id names the session (its own, its run's, its sampler's).
func TestSessionSpanQueueIsBoundedPerTenant(t *testing.T) {
	ctx := context.Background()
	ck := &clock{t: time.Unix(1_800_000_000, 0)}
	svc := newQuotaService(t, &countingStore{Store: memory.New()}, ck, func(c *config.Config) {
		c.Sessions.RecordSpans = true
		c.Limits.MaxSpansPerSession = 3
	})
	sa, err := svc.CreateSession(ctx, "alice", service.CreateSessionInput{})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := svc.CreateSession(ctx, "bob", service.CreateSessionInput{})
	if err != nil {
		t.Fatal(err)
	}
	span := func(tenant, sess, name string) telemetry.SessionSpan {
		t0 := ck.now()
		return telemetry.SessionSpan{Tenant: tenant, SessionID: sess, TraceID: "0123456789abcdef0123456789abcdef", SpanID: "00000000000000" + name[:2],
			Name: name, Start: t0, End: t0.Add(time.Millisecond)}
	}
	release := svc.HoldSpanRecorder()
	for i := range 10 {
		svc.RecordSessionSpan(span("alice", sa.ID, fmt.Sprintf("a%d", i)))
	}
	svc.RecordSessionSpan(span("bob", sb.ID, "b0"))
	svc.RecordSessionSpan(span("bob", sa.ID, "bx")) // bob naming alice's session
	svc.RecordSessionSpan(span("", sa.ID, "nx"))    // no tenant
	release()

	a, err := svc.SessionSpans(ctx, "alice", sa.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Spans) != 3 || a.Spans[0].Name != "a0" || a.Spans[2].Name != "a2" || a.Dropped != 0 {
		t.Fatalf("alice's record: %+v", a)
	}
	b, err := svc.SessionSpans(ctx, "bob", sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Spans) != 1 || b.Spans[0].Name != "b0" || b.Spans[0].Status != "ok" || b.Spans[0].DurationMs != 1 {
		t.Fatalf("bob's record: %+v", b)
	}
	var se *service.Error
	if _, err := svc.SessionSpans(ctx, "bob", sa.ID); !errors.As(err, &se) || se.Kind != service.KindNotFound {
		t.Fatalf("bob reading alice's record: %v", err)
	}
	if _, err := svc.SessionSpans(ctx, "alice", "../"+sa.ID); !errors.As(err, &se) || se.Kind != service.KindNotFound {
		t.Fatalf("a malformed id: %v", err)
	}
}
