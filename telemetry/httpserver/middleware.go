package httpserver

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/tuft-go/tuft/telemetry"
)

// NewHandler wraps h: every request gets a server span named "METHOD /route/pattern" (the
// ServeMux pattern, never a raw path with ids), continues an incoming traceparent and
// baggage, and is measured in the standard http.server.request.duration histogram
// (method, route, status code, scheme). Providers come from opts (default: the globals).
// It is written for the hot path: a few attributes, a cached attribute set per route and
// status, no body wrappers. When both providers are no-ops (telemetry disabled) it
// returns h itself, so requests skip it entirely.
func NewHandler(h http.Handler, opts ...telemetry.Option) http.Handler {
	s := telemetry.NewSettings(opts...)
	_, noTraces := s.TracerProvider.(tracenoop.TracerProvider)
	if noTraces && !s.Instruments.Enabled() {
		return h
	}
	return &handler{next: h, tracer: s.Tracer(telemetry.ScopeHTTP), duration: s.Instruments.HTTPServerDuration,
		prop: telemetry.Propagator()}
}

type handler struct {
	next     http.Handler
	tracer   trace.Tracer
	duration metric.Float64Histogram
	prop     propagation.TextMapPropagator
	sets     attrSets
}

// serverSpan is the server span's start option, built once: a WithSpanKind call and its
// variadic slice would otherwise be two allocations per request.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

func (m *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := r.Context()
	// Most requests carry neither header, and looking for them is cheaper than running
	// the extraction.
	if h := r.Header; len(h["Traceparent"]) > 0 || len(h["Baggage"]) > 0 {
		ctx = m.prop.Extract(ctx, propagation.HeaderCarrier(h))
	}
	ctx, sp := m.tracer.Start(ctx, r.Method, serverSpan...)
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	r2 := r
	if ctx != r.Context() { // unchanged when the span is sampled out
		r2 = r.WithContext(ctx)
	}
	m.next.ServeHTTP(sw, r2) // ServeMux sets r2.Pattern
	route := r2.Pattern
	if i := strings.IndexByte(route, ' '); i >= 0 {
		route = route[i+1:]
	}
	if sp.IsRecording() {
		name := r.Method
		if route != "" {
			name = r.Method + " " + route
		}
		sp.SetName(name)
		attrs := append(make([]attribute.KeyValue, 0, 5), semconv.HTTPRequestMethodKey.String(r.Method),
			semconv.URLPath(r.URL.Path), semconv.HTTPResponseStatusCode(sw.code), semconv.URLScheme("http"))
		if route != "" {
			attrs = append(attrs, semconv.HTTPRoute(route))
		}
		sp.SetAttributes(attrs...)
		if sw.code >= 500 {
			sp.SetStatus(codes.Error, http.StatusText(sw.code))
		}
	}
	sp.End()
	m.duration.Record(ctx, time.Since(start).Seconds(), m.sets.get(r.Method, route, sw.code)...)
}

// attrSets caches the measurement options of each (method, route, status): building an
// attribute set sorts and allocates, and these few combinations repeat on every request.
// Routes are ServeMux patterns, so the set is small; maxSets bounds it all the same.
type attrSets struct {
	mu sync.RWMutex
	m  map[setKey][]metric.RecordOption
}

type setKey struct {
	method, route string
	code          int
}

const maxSets = 1024

func (c *attrSets) get(method, route string, code int) []metric.RecordOption {
	k := setKey{method, route, code}
	c.mu.RLock()
	o, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return o
	}
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(method), semconv.HTTPResponseStatusCode(code), semconv.URLScheme("http")}
	if route != "" {
		attrs = append(attrs, semconv.HTTPRoute(route))
	}
	o = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrs...))}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[setKey][]metric.RecordOption{}
	}
	if len(c.m) < maxSets {
		c.m[k] = o
	}
	return o
}

// statusWriter remembers the status code; Unwrap lets http.ResponseController reach
// the connection's Flush and deadlines.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
