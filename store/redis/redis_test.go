package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tuft-go/tuft/store"
	redisstore "github.com/tuft-go/tuft/store/redis"
	"github.com/tuft-go/tuft/store/storetest"
	"github.com/tuft-go/tuft/telemetry"
)

func TestConformance(t *testing.T) {
	url := storetest.StartRedis(t)
	storetest.Run(t, func(t *testing.T, ns string) store.Store {
		s, err := redisstore.Open(context.Background(), url, t.Name()+"-"+ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestUnreachableRedisNamesTheURLWithoutPassword(t *testing.T) {
	_, err := redisstore.Open(context.Background(), "redis://user:hunter2@127.0.0.1:1/0", "x")
	if err == nil {
		t.Fatal("connected to nothing")
	}
	if s := err.Error(); !strings.Contains(s, "127.0.0.1:1") || strings.Contains(s, "hunter2") {
		t.Fatalf("error %q", s)
	}
}

// The hook's spans and durations go to the providers Open is given.
func TestHookRecordsOnItsProviders(t *testing.T) {
	url := storetest.StartRedis(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	s, err := redisstore.Open(context.Background(), url, t.Name(), telemetry.WithTracerProvider(tp), telemetry.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, sp := range rec.Ended() {
		names[sp.Name()] = true
		// (go-redis's CLIENT SETINFO on connect fails on Redis before 7.2, and says so.)
		if (sp.Name() == telemetry.SpanRedisSET || sp.Name() == telemetry.SpanRedisGET) && sp.Status().Code.String() == "Error" {
			t.Fatalf("%s failed", sp.Name())
		}
	}
	if !names[telemetry.SpanRedisSET] || !names[telemetry.SpanRedisGET] {
		t.Fatalf("spans %v", names)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == telemetry.MetricRedisOperationDuration {
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					op, _ := dp.Attributes.Value(telemetry.MAttrOperation)
					ops[op.AsString()] = true
				}
			}
		}
	}
	if !ops["SET"] || !ops["GET"] {
		t.Fatalf("%s by operation: %v", telemetry.MetricRedisOperationDuration, ops)
	}
}
