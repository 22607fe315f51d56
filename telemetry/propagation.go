package telemetry

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Inject writes ctx's trace context and baggage into a serialisable map (for a process
// boundary: environment, a queue message, a file).
func Inject(ctx context.Context) map[string]string {
	c := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, c)
	return c
}

// Extract continues the trace carried by m.
func Extract(ctx context.Context, m map[string]string) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(m))
}

// HTTPMiddleware traces every request with a server span named "METHOD /route/pattern"
// (the ServeMux pattern, never a raw path with ids), continues an incoming traceparent and
// baggage, and records the standard http.server.request.duration histogram (method,
// route, status code, scheme). It is written for the hot path: a few attributes, a cached
// attribute set per route and status, no body wrappers. With telemetry disabled (Setup
// with enabled: false, or never called) requests skip it entirely.
func HTTPMiddleware(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !active.Load() {
			h.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		ctx := r.Context()
		// Setup installs the W3C trace-context and baggage propagator; most requests carry
		// neither header, and looking for them is cheaper than running the extraction.
		if h := r.Header; len(h["Traceparent"]) > 0 || len(h["Baggage"]) > 0 {
			ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(h))
		}
		ctx, sp := Tracer(ScopeHTTP).Start(ctx, r.Method, serverSpan...)
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		r2 := r
		if ctx != r.Context() { // unchanged when the span is sampled out
			r2 = r.WithContext(ctx)
		}
		h.ServeHTTP(sw, r2) // ServeMux sets r2.Pattern
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
		Metrics().HTTPServerDuration.Record(ctx, time.Since(start).Seconds(), httpAttrs(r.Method, route, sw.code).rec...)
	})
}

// serverSpan is the server span's start option, built once: a WithSpanKind call and its
// variadic slice would otherwise be two allocations per request.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// httpAttrs is the cached attribute set of one (method, route, status).
func httpAttrs(method, route string, code int) *setEntry {
	return cachedSet(attrKey{k1: method, v1: route, k2: "\x00http", n: code}, func() []attribute.KeyValue {
		attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(method), semconv.HTTPResponseStatusCode(code), semconv.URLScheme("http")}
		if route != "" {
			attrs = append(attrs, semconv.HTTPRoute(route))
		}
		return attrs
	})
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

// active is true while a telemetry pipeline set up by Setup is live.
var active atomic.Bool

// Active reports whether telemetry is on: the last Setup ran with telemetry enabled. Hot paths use it to skip building attributes no one will read.
func Active() bool { return active.Load() }
