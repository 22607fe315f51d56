package telemetry

import (
	"context"
	"sync/atomic"

	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// dropCounter counts what the exporters failed to deliver: a collector that is down
// loses data, and the operator must be able to see how much.
type dropCounter struct{ s, l atomic.Int64 }

func (d *dropCounter) spans(e sdktrace.SpanExporter) sdktrace.SpanExporter {
	return &countingSpans{e, d}
}
func (d *dropCounter) logs(e sdklog.Exporter) sdklog.Exporter { return &countingLogs{e, d} }

type countingSpans struct {
	sdktrace.SpanExporter
	d *dropCounter
}

func (c *countingSpans) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		c.d.s.Add(int64(len(spans)))
	}
	return err
}

type countingLogs struct {
	sdklog.Exporter
	d *dropCounter
}

func (c *countingLogs) Export(ctx context.Context, recs []sdklog.Record) error {
	err := c.Exporter.Export(ctx, recs)
	if err != nil {
		c.d.l.Add(int64(len(recs)))
	}
	return err
}
