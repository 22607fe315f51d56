package otlptrace

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/telemetry"
)

type discardSender struct{}

func (discardSender) send(context.Context, []byte) (int64, error) { return 0, nil }
func (discardSender) shutdown(context.Context) error              { return nil }

// BenchmarkSpanLifecycle is the cost of one sampled span on the control plane's pattern
// (start, the correlation keys and a few attributes in one call, end), encoded and queued
// by the span batcher, with the export discarded: the per-span floor of the SDK plus ours.
func BenchmarkSpanLifecycle(b *testing.B) {
	bt := newProcessor(discardSender{}, &dropCounter{}, 1<<20, 2048, time.Second, time.Second)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(bt))
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("bench")
	bw := true
	ctx := telemetry.WithKeys(context.Background(), telemetry.Keys{SessionID: "01JD5R8Q2V3W4X5Y6Z7A8B9C0D", TrainingRunID: "run-01JD5R8Q2V3W4X5Y6Z7A8B",
		RequestID: "01JD5R8Q2V3W4X5Y6Z7A8B9C0E", OperationType: "optim_step", BaseModel: "tiny", LoraRank: 8, Backward: &bw})
	ctx, root := tr.Start(ctx, "root")
	defer root.End()
	b.ReportAllocs()
	for b.Loop() {
		_, sp := telemetry.StartSpan(ctx, tr, "training_controller.run_optim_step", attribute.Float64(telemetry.AttrLearningRate, 1e-3),
			attribute.Int64(telemetry.AttrSeqID, 7))
		telemetry.End(sp, nil)
	}
	_ = trace.SpanFromContext(ctx)
}
