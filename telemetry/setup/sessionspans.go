package setup

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/telemetry"
)

// WithSessionSpans records this process's spans of requests that belong to a client
// session (sessions.record_spans): each ended span that names a session, a training run
// or a sampling session, and whose tenant is known, goes to sink as a
// telemetry.SessionSpan. Like a test's span processor it turns the SDK on even with
// telemetry disabled (no exporter is built then); sampled-out spans are not recorded.
func WithSessionSpans(sink *telemetry.SpanSink) Option {
	return func(o *options) {
		o.spanProcs = append(o.spanProcs, newSessionSpans(sink))
		o.forceLocal = true
		o.sessionSpans = sink
	}
}

// SessionSpans is the sink WithSessionSpans gave (nil without it).
func (t *Telemetry) SessionSpans() *telemetry.SpanSink { return t.sessionSpans }

// sessionSpans is the span processor of WithSessionSpans. A span's tenant is read from
// the context it started in (telemetry.WithTenant: the API's tenant layer and the
// futures executor put it there) and held until the span ends; the request's server span,
// started before the tenant is known, carries it as the tuft.tenant attribute.
type sessionSpans struct {
	sink *telemetry.SpanSink
	mu   sync.Mutex
	// open holds the tenant of each span started with one and not yet ended. Its size is
	// the number of spans in flight: every span the SDK starts it also ends.
	open map[trace.SpanID]string
}

func newSessionSpans(sink *telemetry.SpanSink) *sessionSpans {
	return &sessionSpans{sink: sink, open: map[trace.SpanID]string{}}
}

// OnStart implements sdktrace.SpanProcessor.
func (p *sessionSpans) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	if t := telemetry.TenantFrom(parent); t != "" {
		p.mu.Lock()
		p.open[s.SpanContext().SpanID()] = t
		p.mu.Unlock()
	}
}

// OnEnd implements sdktrace.SpanProcessor.
func (p *sessionSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	id := s.SpanContext().SpanID()
	p.mu.Lock()
	tenant, ok := p.open[id]
	if ok {
		delete(p.open, id)
	}
	p.mu.Unlock()
	ss := telemetry.SessionSpan{Tenant: tenant}
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case telemetry.AttrTenant:
			ss.Tenant = kv.Value.AsString()
		case telemetry.AttrSessionID:
			ss.SessionID = kv.Value.AsString()
		case telemetry.AttrTrainingRunID:
			ss.TrainingRunID = kv.Value.AsString()
		case telemetry.AttrSamplingSessionID:
			ss.SamplingSessionID = kv.Value.AsString()
		}
	}
	if ss.Tenant == "" || (ss.SessionID == "" && ss.TrainingRunID == "" && ss.SamplingSessionID == "") {
		return
	}
	ss.TraceID = s.SpanContext().TraceID().String()
	ss.SpanID = id.String()
	if p := s.Parent(); p.IsValid() {
		ss.ParentSpanID = p.SpanID().String()
	}
	ss.Name, ss.Start, ss.End = s.Name(), s.StartTime(), s.EndTime()
	if st := s.Status(); st.Code == codes.Error {
		ss.Error, ss.StatusMessage = true, st.Description
	}
	ss.Attributes = make(map[string]any, len(s.Attributes()))
	for _, kv := range s.Attributes() {
		if kv.Key == telemetry.AttrTenant {
			continue // the record is the tenant's own: no need to repeat it
		}
		ss.Attributes[string(kv.Key)] = attrValue(kv.Value)
	}
	p.sink.Record(ss)
}

func attrValue(v attribute.Value) any {
	switch v.Type() {
	case attribute.BOOL:
		return v.AsBool()
	case attribute.INT64:
		return v.AsInt64()
	case attribute.FLOAT64:
		return v.AsFloat64()
	case attribute.BOOLSLICE:
		return v.AsBoolSlice()
	case attribute.INT64SLICE:
		return v.AsInt64Slice()
	case attribute.FLOAT64SLICE:
		return v.AsFloat64Slice()
	case attribute.STRINGSLICE:
		return v.AsStringSlice()
	}
	return v.AsString()
}

// Shutdown implements sdktrace.SpanProcessor.
func (p *sessionSpans) Shutdown(context.Context) error { return nil }

// ForceFlush implements sdktrace.SpanProcessor: spans go to the sink as they end.
func (p *sessionSpans) ForceFlush(context.Context) error { return nil }
