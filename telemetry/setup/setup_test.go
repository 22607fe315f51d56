package setup

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/tuft-go/tuft/telemetry"
)

func TestDisabledStartsNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	tel, err := New(context.Background(), telemetry.DefaultConfig(), "server", WithLogWriter(&strings.Builder{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("disabled telemetry started %d goroutines", n-before)
	}
	_, sp := tel.TracerProvider().Tracer("x").Start(context.Background(), "y")
	if sp.IsRecording() {
		t.Fatal("disabled telemetry records spans")
	}
	sp.End()
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestLocalLogLineCarriesTraceIDs(t *testing.T) {
	t.Parallel()
	var buf syncBuf
	rec := tracetest.NewSpanRecorder()
	tel, err := New(context.Background(), telemetry.DefaultConfig(), "server", WithSpanProcessor(rec), WithLogWriter(&buf))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	ctx, sp := tel.TracerProvider().Tracer("t").Start(context.Background(), "op")
	tel.Logger().InfoContext(ctx, "hello")
	sp.End()
	line := buf.String()
	if !strings.Contains(line, "trace_id="+sp.SpanContext().TraceID().String()) || !strings.Contains(line, "span_id=") {
		t.Fatalf("log line %q", line)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

type fakeGPU struct{}

func (fakeGPU) Sample() ([]GPUSample, error) {
	return []GPUSample{{ID: "0", UtilizationPct: 50, MemoryUsedBytes: 1 << 30, MemoryTotalBytes: 8 << 30}}, nil
}
func (fakeGPU) Close() {}

func TestResourceGauges(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	g, err := startResourceGauges(mp, time.Hour, fakeGPU{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.stop()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = true
		}
	}
	for _, n := range []string{telemetry.MetricCPUUtilization, telemetry.MetricMemoryUsed, telemetry.MetricMemoryTotal,
		telemetry.MetricMemoryUtilization, telemetry.MetricProcessMemoryUsed,
		telemetry.MetricGPUUtilization, telemetry.MetricGPUMemoryUsed, telemetry.MetricGPUMemoryTotal} {
		if !got[n] {
			t.Errorf("no gauge %s", n)
		}
	}
}

// A run shorter than the metric export interval still reports the resource gauges: the
// final collection at shutdown includes them (the gauges stop only after it).
func TestShutdownExportsTheResourceGauges(t *testing.T) {
	t.Setenv("TUFT_OTEL_DEBUG", "1")
	cfg := telemetry.DefaultConfig()
	cfg.Enabled = true
	cfg.Traces.Enabled, cfg.Logs.Enabled = false, false
	cfg.Metrics.ExportIntervalSeconds = 3600
	var out syncBuf
	tel, err := New(context.Background(), cfg, "server", WithConsoleWriter(&out), WithLogWriter(&strings.Builder{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, n := range []string{telemetry.MetricCPUUtilization, telemetry.MetricMemoryUsed, telemetry.MetricMemoryTotal,
		telemetry.MetricMemoryUtilization, telemetry.MetricProcessMemoryUsed} {
		if !strings.Contains(got, `"`+n+`"`) {
			t.Errorf("the final export lacks %s", n)
		}
	}
}

// New installs nothing globally; InstallGlobal does, and only then do the OTel globals
// and telemetry.Metrics lead to this process's providers.
func TestNewInstallsNothingGlobally(t *testing.T) {
	t.Parallel()
	before := otel.GetTracerProvider()
	rec := tracetest.NewSpanRecorder()
	tel, err := New(context.Background(), telemetry.DefaultConfig(), "server", WithSpanProcessor(rec), WithLogWriter(&strings.Builder{}))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if otel.GetTracerProvider() != before {
		t.Fatal("New replaced the global tracer provider")
	}
	_, sp := tel.TracerProvider().Tracer("t").Start(context.Background(), "own")
	sp.End()
	if len(rec.Ended()) != 1 {
		t.Fatal("the returned provider does not record")
	}
}

func TestShutdownWithDeadCollectorIsBounded(t *testing.T) {
	cfg := telemetry.DefaultConfig()
	cfg.Enabled = true
	cfg.OTLPEndpoint = "http://127.0.0.1:1"
	cfg.TimeoutSeconds = 1
	tel, err := New(context.Background(), cfg, "server", WithLogWriter(&strings.Builder{}))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		_, sp := tel.TracerProvider().Tracer("t").Start(context.Background(), "s")
		sp.End()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_ = tel.Shutdown(ctx)
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("shutdown took %v", d)
	}
}

// fakeCollector receives OTLP trace exports.
type fakeCollector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu  sync.Mutex
	req []*collectortrace.ExportTraceServiceRequest
}

func (f *fakeCollector) Export(_ context.Context, r *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	f.mu.Lock()
	f.req = append(f.req, r)
	f.mu.Unlock()
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// TestPropagationAcrossAProcess starts this test binary as a child process with the
// parent's trace context in its environment; the child continues the trace and exports
// its own span to a collector that the parent runs.
func TestPropagationAcrossAProcess(t *testing.T) {
	if os.Getenv("TUFT_TEST_CHILD") == "1" {
		child()
		return
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &fakeCollector{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, col)
	go srv.Serve(lis)
	defer srv.Stop()

	rec := tracetest.NewSpanRecorder()
	tel, err := New(context.Background(), telemetry.DefaultConfig(), "server", WithSpanProcessor(rec), WithLogWriter(&strings.Builder{}))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	m, _ := baggage.NewMember("tenant", "alice")
	bag, _ := baggage.New(m)
	ctx := baggage.ContextWithBaggage(context.Background(), bag)
	ctx, parent := tel.TracerProvider().Tracer("parent").Start(ctx, telemetry.SpanTBForwardBackward)
	carrier := telemetry.Inject(ctx)
	parent.End()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestPropagationAcrossAProcess$")
	cmd.Env = append(os.Environ(), "TUFT_TEST_CHILD=1", "TUFT_TEST_COLLECTOR="+lis.Addr().String(),
		"TUFT_TEST_TRACEPARENT="+carrier["traceparent"], "TUFT_TEST_BAGGAGE="+carrier["baggage"])
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	found := false
	for _, r := range col.req {
		for _, rs := range r.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					if s.Name != telemetry.SpanHFForwardBackward {
						continue
					}
					found = true
					if fmt.Sprintf("%x", s.TraceId) != parent.SpanContext().TraceID().String() || fmt.Sprintf("%x", s.ParentSpanId) != parent.SpanContext().SpanID().String() {
						t.Fatalf("child span not in the parent's trace: trace %x parent %x", s.TraceId, s.ParentSpanId)
					}
					ok := false
					for _, a := range s.Attributes {
						ok = ok || (a.Key == "baggage.tenant" && a.Value.GetStringValue() == "alice")
					}
					if !ok {
						t.Fatal("baggage did not cross the boundary")
					}
				}
			}
		}
	}
	if !found {
		t.Fatal("the child's span never reached the collector")
	}
}

func child() {
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(os.Getenv("TUFT_TEST_COLLECTOR")), otlptracegrpc.WithInsecure())
	if err != nil {
		panic(err)
	}
	tel, err := New(context.Background(), telemetry.DefaultConfig(), "worker", WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(exp)), WithLogWriter(&strings.Builder{}))
	if err != nil {
		panic(err)
	}
	ctx := telemetry.Extract(context.Background(), map[string]string{"traceparent": os.Getenv("TUFT_TEST_TRACEPARENT"), "baggage": os.Getenv("TUFT_TEST_BAGGAGE")})
	_, sp := tel.TracerProvider().Tracer("child").Start(ctx, telemetry.SpanHFForwardBackward)
	sp.SetAttributes(attribute.String("baggage.tenant", baggage.FromContext(ctx).Member("tenant").Value()))
	sp.End()
	_ = tel.Shutdown(context.Background())
}
