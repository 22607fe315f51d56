package main

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/internal/cli"
	"github.com/tuft-go/tuft/telemetry"
	"github.com/tuft-go/tuft/telemetry/setup"
)

// cmdSmoke sends one trace shaped like a request (HTTP → controller → model executor),
// one metric batch and one correlated log record through the configured pipeline, then
// flushes and reports, per signal, whether the export succeeded.
func cmdSmoke(args []string) error {
	fs := cli.NewFlags("smoke", "tuft smoke [--config FILE] [--otlp-endpoint URL]",
		"Send one trace (HTTP → controller → model executor), one metric batch and one correlated log through the\nconfigured telemetry pipeline, flush, and report per signal whether the export succeeded.")
	cfgPath := fs.String("config", "", "tuft_config.yaml ($TUFT_CONFIG)")
	endpoint := fs.String("otlp-endpoint", "", "override telemetry.otlp_endpoint")
	if err := fs.ParseArgs(args); err != nil {
		return err
	}
	if err := fs.CheckArgs(0, 0); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	tc := cfg.Telemetry
	tc.Enabled, tc.SamplingRatio = true, 1
	tc.Traces.Enabled, tc.Metrics.Enabled, tc.Logs.Enabled = true, true, true
	if *endpoint != "" {
		tc.OTLPEndpoint = *endpoint
	}
	ctx := context.Background()
	tel, err := setup.New(ctx, tc, "server", setup.WithVersion(version), setup.WithLogLevel("info"))
	if err != nil {
		return err
	}
	tp, ins := tel.TracerProvider(), tel.Instruments()
	fmt.Printf("exporting to %s over %s\n", tc.Endpoint(), tc.Protocol)
	ctx = telemetry.WithKeys(ctx, telemetry.Keys{SessionID: "smoke-session", TrainingRunID: "smoke-session:train:0",
		OperationType: telemetry.OpForwardBackward, BaseModel: "smoke"})
	ctx, http := telemetry.StartSpan(ctx, tp.Tracer(telemetry.ScopeHTTP), "POST /api/v1/forward_backward",
		attribute.Bool(telemetry.AttrSmoke, true))
	cctx, ctrl := telemetry.StartSpan(ctx, tp.Tracer(telemetry.ScopeTrainingController), telemetry.SpanTCRunForwardBackward)
	_, exec := telemetry.StartSpan(cctx, tp.Tracer(telemetry.ScopeModel), telemetry.SpanHFForwardBackward,
		attribute.String(telemetry.AttrLoraID, "smoke-session:train:0"))
	time.Sleep(5 * time.Millisecond)
	exec.End()
	ctrl.End()
	tel.Logger().InfoContext(ctx, "tuft smoke: correlated log record")
	http.End()
	ins.FuturesCreated.Add(ctx, 1, metric.WithAttributes(attribute.String(telemetry.MAttrOperationType, "smoke")))
	ins.FuturesExecutionTime.Record(ctx, 0.005, metric.WithAttributes(attribute.String(telemetry.MAttrOperationType, "smoke")))
	sc := trace.SpanContextFromContext(ctx)
	fmt.Printf("sent: 1 trace (3 spans, trace_id %s), 2 metric points, 1 log record\n", sc.TraceID())
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ferr := tel.ForceFlush(fctx)
	serr := tel.Shutdown(fctx)
	spans, logs := tel.Dropped()
	if ferr != nil || serr != nil || spans+logs > 0 {
		fmt.Printf("export FAILED: flush: %v; shutdown: %v; %d spans and %d log records not delivered\n", ferr, serr, spans, logs)
		return fmt.Errorf("telemetry export failed; is a collector listening at %s?", tc.Endpoint())
	}
	fmt.Println("export OK: traces, metrics and logs accepted by the collector")
	return nil
}
