package telemetry

import (
	"context"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
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
// (the ServeMux pattern, never a raw path with ids), continues an incoming traceparent,
// and records the standard HTTP server metrics.
// With telemetry disabled (Setup with enabled: false, or never called) requests skip it
// entirely, so a disabled pipeline costs nothing measurable.
func HTTPMiddleware(h http.Handler) http.Handler {
	traced := otelhttp.NewHandler(h, "http",
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if r.Pattern != "" {
				return r.Pattern
			}
			return r.Method
		}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if active.Load() {
			traced.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// active is true while a telemetry pipeline set up by Setup is live.
var active atomic.Bool

// Active reports whether telemetry is on: the last Setup ran with telemetry enabled. Hot paths use it to skip building attributes no one will read.
func Active() bool { return active.Load() }
