package store_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/store/memory"
	"github.com/tuft-go/tuft/telemetry"
)

// The decorator's spans and durations go to the providers it is given, named by the
// contract (store.<OP>) and the semantic conventions (db.client.operation.duration), and
// never under Redis's metric.
func TestInstrumentRecordsOnItsProviders(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	st := store.Instrument(memory.New(), telemetry.WithTracerProvider(tp), telemetry.WithMeterProvider(mp))
	ctx := context.Background()
	if err := st.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	for _, name := range []string{telemetry.SpanStoreSET, telemetry.SpanStoreGET} {
		sp, ok := spans[name]
		if !ok {
			t.Fatalf("no span %s (have %v)", name, spans)
		}
		if sp.Status().Code.String() == "Error" {
			t.Fatalf("%s failed: a miss is an answer", name)
		}
		sys := attribute.NewSet(sp.Attributes()...)
		if v, _ := sys.Value(telemetry.AttrDBSystem); v.AsString() != "memory" {
			t.Fatalf("%s: db.system %q", name, v.AsString())
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	ops := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == telemetry.MetricRedisOperationDuration {
				t.Fatalf("the embedded store recorded %s", m.Name)
			}
			if m.Name != telemetry.MetricDBClientOperationDuration {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				sys, _ := dp.Attributes.Value(telemetry.MAttrDBSystemName)
				op, _ := dp.Attributes.Value(telemetry.MAttrDBOperationName)
				if sys.AsString() != "memory" {
					t.Fatalf("db.system.name %q", sys.AsString())
				}
				ops[op.AsString()] += dp.Count
			}
		}
	}
	if ops["SET"] != 1 || ops["GET"] != 1 {
		t.Fatalf("durations by operation: %v", ops)
	}
}
