package telemetry

import (
	"context"
	"net/http"

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
func HTTPMiddleware(h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, "http",
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if r.Pattern != "" {
				return r.Pattern
			}
			return r.Method
		}))
}
