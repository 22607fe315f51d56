package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
)

// propagator is the contract's propagator (spec §4): W3C trace context and baggage. It is
// fixed rather than read from the OTel global, so context crosses boundaries the same way
// whether or not a process installed global providers.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Propagator returns the W3C trace-context + baggage propagator every boundary uses
// (HTTP, gRPC to workers, Inject/Extract).
func Propagator() propagation.TextMapPropagator { return propagator }

// Inject writes ctx's trace context and baggage into a serialisable map (for a process
// boundary: environment, a queue message, a file).
func Inject(ctx context.Context) map[string]string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c
}

// Extract continues the trace carried by m.
func Extract(ctx context.Context, m map[string]string) context.Context {
	return propagator.Extract(ctx, propagation.MapCarrier(m))
}
