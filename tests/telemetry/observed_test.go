package telemetry_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
	"github.com/tuft-go/tuft/telemetry"
	"github.com/tuft-go/tuft/telemetry/setup"
)

// observed starts a server on cfg whose spans and metrics the test reads back: the
// providers reach it as options, so nothing global is installed.
func observed(t *testing.T, cfg config.Config) (*server.Server, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	tel, err := setup.New(context.Background(), telemetry.DefaultConfig(), "server", setup.WithSpanProcessor(rec),
		setup.WithMetricReader(reader), setup.WithLogProcessor(&logCapture{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	s := testenv.StartWith(t, cfg, server.Options{Logger: tel.Logger(), TracerProvider: tel.TracerProvider(),
		MeterProvider: tel.MeterProvider(), Instruments: tel.Instruments()})
	return s, rec, reader
}
