package telemetry

import (
	"context"
	"sync/atomic"
	"time"
)

// The per-session span record (docs/observability.md, "Session spans"): this server's own
// spans of the requests that belong to a client session, kept for the session's owner
// (GET /api/v1/sessions/{id}/spans and its Perfetto export). A span processor of the SDK
// (telemetry/setup's WithSessionSpans) turns each ended span into a SessionSpan and hands
// it to a SpanSink, which the server points at the service that keeps them.

// SessionSpan is one ended span, as the session record keeps it. Only the processor's
// inputs are filled here (Tenant from the context the span started in; the correlation
// ids from its attributes); which session it belongs to, if any, the receiver decides.
type SessionSpan struct {
	// Tenant is the tenant whose request the span served (WithTenant on its start context).
	Tenant            string
	SessionID         string // tuft.session_id
	TrainingRunID     string // tuft.training_run_id
	SamplingSessionID string // tuft.sampling_session_id
	TraceID           string
	SpanID            string
	ParentSpanID      string // "" for a root
	Name              string
	Start, End        time.Time
	Error             bool   // status ERROR
	StatusMessage     string // the error's description
	// Attributes are the span's attributes (string, bool, int64, float64 or a slice of
	// one of those).
	Attributes map[string]any
}

// SpanSink receives the session spans of the processor. It is safe for concurrent use;
// spans recorded before Set are dropped (the server is still starting).
type SpanSink struct {
	f atomic.Pointer[func(SessionSpan)]
}

// Set makes f the receiver of every later span (nil: none).
func (s *SpanSink) Set(f func(SessionSpan)) {
	if f == nil {
		s.f.Store(nil)
		return
	}
	s.f.Store(&f)
}

// Record hands sp to the receiver, if any.
func (s *SpanSink) Record(sp SessionSpan) {
	if f := s.f.Load(); f != nil {
		(*f)(sp)
	}
}

type tenantCtx struct{}

// WithTenant records in ctx the tenant a request serves, for the session-span processor
// (it never becomes a span attribute: a tenant's spans are found by its session).
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantCtx{}, tenant)
}

// TenantFrom returns the tenant WithTenant put in ctx ("" if none).
func TenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(tenantCtx{}).(string)
	return t
}
