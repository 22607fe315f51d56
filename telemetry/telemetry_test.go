package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

func TestValidateNamesTheKey(t *testing.T) {
	cases := map[string]func(*Config){
		"telemetry.protocol":        func(c *Config) { c.Protocol = "smoke-signals" },
		"telemetry.sampling_ratio":  func(c *Config) { c.SamplingRatio = 1.5 },
		"telemetry.otlp_endpoint":   func(c *Config) { c.OTLPEndpoint = "ftp://x" },
		"telemetry.timeout_seconds": func(c *Config) { c.TimeoutSeconds = 0 },
		"telemetry.service_name":    func(c *Config) { c.ServiceName = "" },
	}
	for key, mut := range cases {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v", key, err)
		}
	}
	c := DefaultConfig()
	c.OTLPEndpoint = "http://user:pw@host:4317"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "headers") {
		t.Errorf("credentials in URL: %v", err)
	}
}

func TestEndpointResolutionOrder(t *testing.T) {
	c := DefaultConfig()
	t.Setenv("TUFT_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	if got := c.Endpoint(); got != "http://localhost:4317" {
		t.Fatal(got)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4317")
	if got := c.Endpoint(); got != "http://otel:4317" {
		t.Fatal(got)
	}
	t.Setenv("TUFT_OTLP_ENDPOINT", "http://tuft:4317")
	if got := c.Endpoint(); got != "http://tuft:4317" {
		t.Fatal(got)
	}
	c.OTLPEndpoint = "http://cfg:4317"
	if got := c.Endpoint(); got != "http://cfg:4317" {
		t.Fatal(got)
	}
}

func TestDisabledStartsNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	tel, err := Setup(context.Background(), DefaultConfig(), "server", WithLogWriter(&strings.Builder{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("disabled telemetry started %d goroutines", n-before)
	}
	_, sp := Tracer("x").Start(context.Background(), "y")
	if sp.IsRecording() {
		t.Fatal("disabled telemetry records spans")
	}
	sp.End()
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestLocalLogLineCarriesTraceIDs(t *testing.T) {
	var buf syncBuf
	rec := tracetest.NewSpanRecorder()
	tel, err := Setup(context.Background(), DefaultConfig(), "server", WithSpanProcessor(rec), WithLogWriter(&buf))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	ctx, sp := Tracer("t").Start(context.Background(), "op")
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

func TestCorrelationKeysAndErrors(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	back := true
	ctx := WithKeys(context.Background(), Keys{SessionID: "s", TrainingRunID: "r", LoraRank: 8, Backward: &back})
	ctx = WithKeys(ctx, Keys{RequestID: "q"})
	_, sp := StartSpan(ctx, tp.Tracer("t"), "x", attribute.String("extra", "1"))
	End(sp, errors.New("boom"))
	s := rec.Ended()[0]
	got := map[string]string{}
	for _, a := range s.Attributes() {
		got[string(a.Key)] = a.Value.Emit()
	}
	for k, v := range map[string]string{AttrSessionID: "s", AttrTrainingRunID: "r", AttrRequestID: "q", AttrLoraRank: "8", AttrBackward: "true", "extra": "1"} {
		if got[k] != v {
			t.Fatalf("%s = %q (all %v)", k, got[k], got)
		}
	}
	if s.Status().Code != codes.Error || len(s.Events()) == 0 {
		t.Fatal("error not recorded")
	}
}

func TestRequestSlices(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	r := StartRequest(context.Background(), tp.Tracer("t"), "req")
	r.StartSlice("prefill")
	r.StartSlice("decode")
	r.Event("first_token")
	r.EndSlice(attribute.Int("tokens", 3))
	// Resume across a boundary.
	r2 := ResumeRequest(context.Background(), tp.Tracer("t"), r.Carrier())
	r2.StartSlice("postprocess")
	r2.EndSlice()
	r.End(nil)
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	req := spans["req"]
	for _, n := range []string{"prefill", "decode", "postprocess"} {
		if spans[n] == nil || spans[n].Parent().SpanID() != req.SpanContext().SpanID() {
			t.Fatalf("slice %s is not a child of the request", n)
		}
	}
	if len(spans["decode"].Events()) != 1 {
		t.Fatal("event missing")
	}
}

func TestEveryInstrumentHasItsNameAndUnit(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	in := NewInstruments(mp, true)
	ctx := context.Background()
	in.TrainingModelsActive.Add(ctx, 1)
	in.TrainingTokensPerSecond.Record(ctx, 1)
	in.TrainingCheckpointsSaved.Add(ctx, 1)
	in.TrainingCheckpointSize.Record(ctx, 1)
	in.SamplingSessionsActive.Add(ctx, 1)
	in.SamplingRequests.Add(ctx, 1)
	in.SamplingDuration.Record(ctx, 1)
	in.SamplingTokensPerSecond.Record(ctx, 1)
	in.SamplingOutputTokens.Record(ctx, 1)
	in.FuturesQueueLength.Add(ctx, 1)
	in.FuturesCreated.Add(ctx, 1)
	in.FuturesCompleted.Add(ctx, 1)
	in.FuturesWaitTime.Record(ctx, 1)
	in.FuturesExecutionTime.Record(ctx, 1)
	in.RedisOperationDuration.Record(ctx, 1)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{MetricTrainingModelsActive: "{model}", MetricTrainingTokensPerSecond: "{token}/s", MetricTrainingCheckpointsSaved: "{checkpoint}",
		MetricTrainingCheckpointSize: "By", MetricSamplingSessionsActive: "{session}", MetricSamplingRequests: "{request}", MetricSamplingDuration: "s",
		MetricSamplingTokensPerSecond: "{token}/s", MetricSamplingOutputTokens: "{token}", MetricFuturesQueueLength: "{future}",
		MetricFuturesCreated: "{future}", MetricFuturesCompleted: "{future}", MetricFuturesWaitTime: "s", MetricFuturesExecutionTime: "s",
		MetricRedisOperationDuration: "s"}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if u, ok := want[m.Name]; ok && u == m.Unit {
				delete(want, m.Name)
			}
		}
	}
	if len(want) > 0 {
		t.Fatalf("missing or wrong unit: %v", want)
	}
}

type fakeGPU struct{}

func (fakeGPU) Sample() ([]GPUSample, error) {
	return []GPUSample{{ID: "0", UtilizationPct: 50, MemoryUsedBytes: 1 << 30, MemoryTotalBytes: 8 << 30}}, nil
}
func (fakeGPU) Close() {}

func TestResourceGauges(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	g, err := startResourceGaugesWith(mp, time.Hour, fakeGPU{})
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
	for _, n := range []string{MetricCPUUtilization, MetricMemoryUsed, MetricMemoryTotal, MetricMemoryUtilization, MetricProcessMemoryUsed,
		MetricGPUUtilization, MetricGPUMemoryUsed, MetricGPUMemoryTotal} {
		if !got[n] {
			t.Errorf("no gauge %s", n)
		}
	}
}

func TestShutdownWithDeadCollectorIsBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Enabled = true
	cfg.OTLPEndpoint = "http://127.0.0.1:1"
	cfg.TimeoutSeconds = 1
	tel, err := Setup(context.Background(), cfg, "server", WithLogWriter(&strings.Builder{}))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		_, sp := Tracer("t").Start(context.Background(), "s")
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
	tel, err := Setup(context.Background(), DefaultConfig(), "server", WithSpanProcessor(rec), WithLogWriter(&strings.Builder{}))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	m, _ := baggage.NewMember("tenant", "alice")
	bag, _ := baggage.New(m)
	ctx := baggage.ContextWithBaggage(context.Background(), bag)
	ctx, parent := Tracer("parent").Start(ctx, "training_backend.forward_backward")
	carrier := Inject(ctx)
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
					if s.Name != "hf_model.forward_backward" {
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
	tel, err := Setup(context.Background(), DefaultConfig(), "worker", WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(exp)), WithLogWriter(&strings.Builder{}))
	if err != nil {
		panic(err)
	}
	ctx := Extract(context.Background(), map[string]string{"traceparent": os.Getenv("TUFT_TEST_TRACEPARENT"), "baggage": os.Getenv("TUFT_TEST_BAGGAGE")})
	_, sp := Tracer("child").Start(ctx, "hf_model.forward_backward")
	sp.SetAttributes(attribute.String("baggage.tenant", baggage.FromContext(ctx).Member("tenant").Value()))
	sp.End()
	_ = tel.Shutdown(context.Background())
}
