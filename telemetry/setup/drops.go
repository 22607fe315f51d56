package setup

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	sdklog "go.opentelemetry.io/otel/sdk/log"
)

// logDrops counts the log records the exporter failed to deliver: a collector that is
// down loses data, and the operator must be able to see how much.
type logDrops struct{ n atomic.Int64 }

func (d *logDrops) wrap(e sdklog.Exporter) sdklog.Exporter { return &countingLogs{e, d} }

type countingLogs struct {
	sdklog.Exporter
	d *logDrops
}

func (c *countingLogs) Export(ctx context.Context, recs []sdklog.Record) error {
	err := c.Exporter.Export(ctx, recs)
	if err != nil {
		c.d.n.Add(int64(len(recs)))
	}
	return err
}

// stderrErrorHandler prints the SDK's errors, at most one line per second.
type stderrErrorHandler struct {
	w          io.Writer
	last       atomic.Int64
	suppressed atomic.Int64
}

// Handle implements otel.ErrorHandler.
func (h *stderrErrorHandler) Handle(err error) {
	now := time.Now().UnixNano()
	last := h.last.Load()
	if now-last < int64(time.Second) || !h.last.CompareAndSwap(last, now) {
		h.suppressed.Add(1)
		return
	}
	if n := h.suppressed.Swap(0); n > 0 {
		fmt.Fprintf(h.w, "telemetry: export error: %v (%d more suppressed)\n", err, n)
		return
	}
	fmt.Fprintf(h.w, "telemetry: export error: %v\n", err)
}
