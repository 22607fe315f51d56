package telemetry

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestValidateNamesTheKey(t *testing.T) {
	t.Parallel()
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

func TestCorrelationKeysAndErrors(t *testing.T) {
	t.Parallel()
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
		got[string(a.Key)] = a.Value.String()
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
	t.Parallel()
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
	t.Parallel()
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
	in.StoreWriteFailures.Add(ctx, 1)
	in.StoreOperationDuration.Record(ctx, 1)
	in.HTTPServerDuration.Record(ctx, 1)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{MetricTrainingModelsActive: "{model}", MetricTrainingTokensPerSecond: "{token}/s", MetricTrainingCheckpointsSaved: "{checkpoint}",
		MetricTrainingCheckpointSize: "By", MetricSamplingSessionsActive: "{session}", MetricSamplingRequests: "{request}", MetricSamplingDuration: "s",
		MetricSamplingTokensPerSecond: "{token}/s", MetricSamplingOutputTokens: "{token}", MetricFuturesQueueLength: "{future}",
		MetricFuturesCreated: "{future}", MetricFuturesCompleted: "{future}", MetricFuturesWaitTime: "s", MetricFuturesExecutionTime: "s",
		MetricRedisOperationDuration: "s", MetricStoreWriteFailures: "{write}", MetricDBClientOperationDuration: "s", MetricHTTPServerDuration: "s"}
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

func TestSpanNameHelpers(t *testing.T) {
	t.Parallel()
	for op, want := range map[string]string{"SET": SpanRedisSET, "GET": SpanRedisGET, "DEL": SpanRedisDEL, "SCAN": SpanRedisSCAN,
		"EXPIRE": "redis.EXPIRE", "MULTI": "redis.MULTI"} {
		if got := RedisSpan(op); got != want {
			t.Errorf("RedisSpan(%q) = %q, want %q", op, got, want)
		}
	}
	for phase, want := range map[string]string{"preprocess": SpanSamplePreprocess, "schedule": SpanSampleSchedule,
		"prefill": SpanSamplePrefill, "decode": SpanSampleDecode, "postprocess": SpanSamplePostprocess} {
		if got := SampleSpan(phase); got != want {
			t.Errorf("SampleSpan(%q) = %q, want %q", phase, got, want)
		}
	}
}

// Options resolve to what they name; without them, to the globals; nil options are the
// defaults, so a component can pass an unset Options field straight through.
func TestSettings(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	s := NewSettings(WithTracerProvider(tp), WithMeterProvider(mp))
	_, sp := s.Tracer("t").Start(context.Background(), "x")
	sp.End()
	if len(rec.Ended()) != 1 {
		t.Fatal("the given tracer provider got no span")
	}
	s.Instruments.FuturesCreated.Add(context.Background(), 1)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil || len(rm.ScopeMetrics) == 0 {
		t.Fatalf("the given meter provider got no measurement (%v)", err)
	}
	if s.MeterProvider != mp {
		t.Fatal("meter provider not kept for third-party instrumentation")
	}
	own := NewInstruments(mp, false)
	if got := NewSettings(WithMeterProvider(mp), WithInstruments(own)).Instruments; got != own {
		t.Fatal("WithInstruments must win over instruments built from the meter provider")
	}
	d := NewSettings(WithTracerProvider(nil), WithInstruments(nil), nil)
	if d.TracerProvider == nil || d.Instruments != Metrics() || d.MeterProvider == nil {
		t.Fatalf("defaults: %+v", d)
	}
	// Instruments on a no-op provider say so, so hot paths can skip their work.
	if !NewInstruments(mp, true).Enabled() || NewInstruments(metricnoop.NewMeterProvider(), true).Enabled() {
		t.Fatal("Enabled must be false exactly for instruments on a no-op provider")
	}
}
