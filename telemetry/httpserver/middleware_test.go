package httpserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/telemetry"
	"github.com/tuft-go/tuft/telemetry/setup"
)

func optimMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/optim_step", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /api/v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", http.StatusBadGateway) })
	return mux
}

// sampledOut is telemetry on with sampling ratio 0: metrics recorded, spans sampled out.
func sampledOut(tb testing.TB) *setup.Telemetry {
	cfg := telemetry.DefaultConfig()
	cfg.Enabled, cfg.SamplingRatio, cfg.OTLPEndpoint = true, 0, "127.0.0.1:1"
	cfg.Traces.Enabled, cfg.Logs.Enabled = false, false
	tel, err := setup.New(context.Background(), cfg, "server", setup.WithLogLevel("error"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { tel.Shutdown(context.Background()) })
	return tel
}

// BenchmarkHTTPMiddleware is the middleware's cost per request with telemetry disabled
// and with sampling 0 (metrics on, spans sampled out), on a route of a ServeMux.
func BenchmarkHTTPMiddleware(b *testing.B) {
	for _, enabled := range []bool{false, true} {
		name := "disabled"
		if enabled {
			name = "sampling0"
		}
		b.Run(name, func(b *testing.B) {
			cfg := telemetry.DefaultConfig()
			tel, err := setup.New(context.Background(), cfg, "server", setup.WithLogLevel("error"))
			if err != nil {
				b.Fatal(err)
			}
			if enabled {
				tel = sampledOut(b)
			}
			h := NewHandler(optimMux(), tel.Options()...)
			req := httptest.NewRequest(http.MethodPost, "/api/v1/optim_step", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, req)
			}
		})
	}
}

// With spans sampled out, the middleware allocates only its status recorder: the span
// start, the propagator and the duration histogram cost no allocation.
func TestHTTPMiddlewareSampledOutAllocations(t *testing.T) {
	h := NewHandler(optimMux(), sampledOut(t).Options()...)
	req := httptest.NewRequest(http.MethodPost, "/api/v1/optim_step", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req) // warm the attribute-set cache
	if n := testing.AllocsPerRun(200, func() { h.ServeHTTP(w, req) }); n > 1 {
		t.Fatalf("%v allocations per sampled-out request, want at most 1", n)
	}
}

// Telemetry disabled: the middleware steps aside.
func TestHTTPMiddlewareDisabledIsTheHandler(t *testing.T) {
	t.Parallel()
	tel, err := setup.New(context.Background(), telemetry.DefaultConfig(), "server")
	if err != nil {
		t.Fatal(err)
	}
	mux := optimMux()
	if h := NewHandler(mux, tel.Options()...); h != http.Handler(mux) {
		t.Fatalf("disabled telemetry wrapped the handler in %T", h)
	}
}

// The span is named by the route pattern, continues the caller's trace, and fails on a
// 5xx; the duration carries the route and status.
func TestHTTPMiddlewareSpanAndDuration(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	h := NewHandler(optimMux(), telemetry.WithTracerProvider(tp), telemetry.WithMeterProvider(mp))

	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	req := httptest.NewRequest(http.MethodGet, "/api/v1/runs/run-123", nil)
	req.Header.Set("traceparent", "00-"+parent.TraceID().String()+"-"+parent.SpanID().String()+"-01")
	h.ServeHTTP(httptest.NewRecorder(), req)

	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	sp := spans[0]
	if sp.Name() != "GET /api/v1/runs/{id}" || sp.Parent().SpanID() != parent.SpanID() || sp.SpanContext().TraceID() != parent.TraceID() {
		t.Fatalf("span %q, parent %v", sp.Name(), sp.Parent())
	}
	if sp.Status().Code.String() != "Error" || sp.SpanKind() != trace.SpanKindServer {
		t.Fatalf("status %v kind %v", sp.Status(), sp.SpanKind())
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.MetricHTTPServerDuration {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				route, _ := dp.Attributes.Value("http.route")
				code, _ := dp.Attributes.Value("http.response.status_code")
				found = found || (route.AsString() == "/api/v1/runs/{id}" && code.AsInt64() == http.StatusBadGateway && dp.Count == 1)
			}
		}
	}
	if !found {
		t.Fatalf("no %s point for the route and status: %v", telemetry.MetricHTTPServerDuration, rm.ScopeMetrics)
	}
}
