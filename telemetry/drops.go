package telemetry

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	sdklog "go.opentelemetry.io/otel/sdk/log"
)

// dropCounter counts what the exporters failed to deliver: a collector that is down
// loses data, and the operator must be able to see how much.
type dropCounter struct {
	s, l      atomic.Int64 // export failures
	queueFull atomic.Int64 // spans dropped because the processor's queue was full

	reported   atomic.Int64 // queueFull at the last report
	lastReport atomic.Int64 // unix nanoseconds
}

// reportQueueFull writes one line to w when spans were dropped on a full queue since
// the last line, at most once per interval.
func (d *dropCounter) reportQueueFull(w io.Writer, interval time.Duration) {
	n := d.queueFull.Load()
	prev := d.reported.Load()
	now := time.Now().UnixNano()
	if n == prev || now-d.lastReport.Load() < int64(interval) || !d.reported.CompareAndSwap(prev, n) {
		return
	}
	d.lastReport.Store(now)
	fmt.Fprintf(w, "telemetry: span queue full: %d spans dropped (%d in all); the exporter cannot keep up with the span rate\n", n-prev, n)
}

func (d *dropCounter) logs(e sdklog.Exporter) sdklog.Exporter { return &countingLogs{e, d} }

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
