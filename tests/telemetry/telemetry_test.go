// Package telemetry_test drives a full SFT and sampling flow through the HTTP API with
// in-process recorders installed, and checks the observability contract: span names,
// attributes, parent/child relations and links, metrics, and log–trace correlation.
package telemetry_test

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
	"github.com/tuft-go/tuft/telemetry"
	"github.com/tuft-go/tuft/telemetry/setup"
)

type logCapture struct {
	mu   sync.Mutex
	recs []sdklog.Record
}

func (l *logCapture) OnEmit(_ context.Context, r *sdklog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r.Clone())
	l.mu.Unlock()
	return nil
}
func (l *logCapture) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }
func (l *logCapture) Shutdown(context.Context) error                         { return nil }
func (l *logCapture) ForceFlush(context.Context) error                       { return nil }

func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, a := range s.Attributes() {
		m[string(a.Key)] = a.Value.String()
	}
	return m
}

func TestFullFlowMeetsTheContract(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	logs := &logCapture{}
	cfg := telemetry.DefaultConfig()
	tel, err := setup.New(context.Background(), cfg, "server", setup.WithSpanProcessor(rec),
		setup.WithMetricReader(reader), setup.WithLogProcessor(logs), setup.WithLogLevel("debug"))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())

	// The providers go to the server as options: nothing global is installed or swapped.
	s := testenv.StartWith(t, testenv.Config(t, t.TempDir(), "embedded"), server.Options{Logger: tel.Logger(),
		TracerProvider: tel.TracerProvider(), MeterProvider: tel.MeterProvider(), Instruments: tel.Instruments()})
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	b := testenv.NewClient(t, s.URL(), testenv.KeyB)
	run := func(c *testenv.Client) (sess, model, sampler string) {
		se := c.NewSession()
		modelID := c.NewTrainingRun(se, map[string]any{"rank": 4, "seed": 1})
		datum := map[string]any{"model_input": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{1, 2, 3, 4}}}},
			"loss_fn_inputs": map[string]any{"target_tokens": map[string]any{"data": []int{2, 3, 4, 5}, "dtype": "int64"}}}
		var x struct {
			RequestID string `json:"request_id"`
		}
		c.Post("/api/v1/forward_backward", map[string]any{"model_id": modelID, "seq_id": 1, "forward_backward_input": map[string]any{"data": []any{datum}, "loss_fn": "cross_entropy"}}, &x)
		c.Result(x.RequestID, nil)
		c.Post("/api/v1/optim_step", map[string]any{"model_id": modelID, "seq_id": 2, "adam_params": map[string]any{"learning_rate": 0.001}}, &x)
		c.Result(x.RequestID, nil)
		c.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": modelID, "seq_id": 3, "path": "t"}, &x)
		var saved struct{ Path string }
		c.Result(x.RequestID, &saved)
		var ss struct {
			SamplingSessionID string `json:"sampling_session_id"`
		}
		c.Post("/api/v1/create_sampling_session", map[string]any{"session_id": se, "sampling_session_seq_id": 0, "model_path": saved.Path}, &ss)
		c.Post("/api/v1/asample", map[string]any{"sampling_session_id": ss.SamplingSessionID, "seq_id": 0, "num_samples": 2,
			"prompt": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{1, 2}}}}, "sampling_params": map[string]any{"max_tokens": 3, "seed": 1}}, &x)
		c.Result(x.RequestID, nil)
		c.Post("/api/v1/telemetry", map[string]any{"session_id": se, "platform": "linux", "sdk_version": "0.25.0", "process_uuid": "p",
			"events": []any{map[string]any{"event": "UNHANDLED_EXCEPTION", "event_id": "e1", "severity": "ERROR", "error_type": "ValueError", "error_message": "boom", "traceback": "tb", "timestamp": "2026-11-22T15:00:00Z"}}}, nil)
		return se, modelID, ss.SamplingSessionID
	}
	sessA, runA, samplerA := run(a)
	_, runB, _ := run(b)

	spans := rec.Ended()
	byName := map[string][]sdktrace.ReadOnlySpan{}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, sp := range spans {
		byName[sp.Name()] = append(byName[sp.Name()], sp)
		byID[sp.SpanContext().SpanID()] = sp
	}
	for _, name := range []string{
		"POST /api/v1/create_model", "POST /api/v1/forward_backward", "POST /api/v1/retrieve_future",
		telemetry.SpanFutureExecute, telemetry.SpanTCCreateModel, telemetry.SpanTCRunForwardBackward, telemetry.SpanTCRunOptimStep,
		telemetry.SpanTCSaveCheckpoint, telemetry.SpanSCCreateSamplingSession, telemetry.SpanSCRunSample,
		telemetry.SpanTBCreateAdapter, telemetry.SpanTBForwardBackward, telemetry.SpanTBOptimStep, telemetry.SpanTBSaveState,
		telemetry.SpanSBAddAdapter, telemetry.SpanSBSample,
		telemetry.SpanHFCreateAdapter, telemetry.SpanHFForwardBackward, telemetry.SpanHFOptimStep, telemetry.SpanHFSaveState,
		telemetry.SpanHFLoadState, telemetry.SpanHFSample, telemetry.SpanSamplePreprocess, telemetry.SpanSampleSchedule,
		telemetry.SpanSamplePrefill, telemetry.SpanSampleDecode, telemetry.SpanSamplePostprocess,
		telemetry.SpanStoreSET, telemetry.SpanStoreGET, telemetry.SpanStoreSCAN,
	} {
		if len(byName[name]) == 0 {
			t.Errorf("no span %q", name)
		}
	}
	// The chain from the model executor up to the future, and the future's link to HTTP.
	for _, hf := range byName[telemetry.SpanHFForwardBackward] {
		tb := byID[hf.Parent().SpanID()]
		tc := byID[tb.Parent().SpanID()]
		fut := byID[tc.Parent().SpanID()]
		if tb == nil || tb.Name() != telemetry.SpanTBForwardBackward || tc == nil || tc.Name() != telemetry.SpanTCRunForwardBackward ||
			fut == nil || fut.Name() != telemetry.SpanFutureExecute {
			t.Fatalf("broken parent chain above %s", hf.Name())
		}
		if len(fut.Links()) != 1 {
			t.Fatalf("future execution has %d links", len(fut.Links()))
		}
		http := byID[fut.Links()[0].SpanContext.SpanID()]
		if http == nil || http.Name() != "POST /api/v1/forward_backward" {
			t.Fatalf("future links to %v", http)
		}
		if hf.SpanContext().TraceID() != http.SpanContext().TraceID() || fut.Parent().SpanID() != http.SpanContext().SpanID() {
			t.Fatal("the executor span is not in the HTTP request's trace")
		}
		if attrs(hf)[telemetry.AttrTrainingRunID] != attrs(http)[telemetry.AttrTrainingRunID] {
			t.Fatal("run id differs between HTTP and executor spans")
		}
	}
	for _, d := range byName[telemetry.SpanSampleDecode] {
		ok := false
		for _, e := range d.Events() {
			ok = ok || e.Name == telemetry.EventFirstToken
		}
		if !ok {
			t.Fatal("decode slice has no first_token event")
		}
		if p := byID[d.Parent().SpanID()]; p == nil || p.Name() != telemetry.SpanHFSample {
			t.Fatal("sample slices must be children of hf_model.sample")
		}
	}
	hs := attrs(byName[telemetry.SpanHFSample][0])
	for _, k := range []string{telemetry.AttrGenAIRequestModel, telemetry.AttrGenAIInputTokens, telemetry.AttrGenAIOutputTokens,
		telemetry.AttrGenAIFinishReasons, telemetry.AttrPromptTokens, telemetry.AttrOutputTokens, telemetry.AttrSamplingSessionID} {
		if hs[k] == "" {
			t.Errorf("hf_model.sample lacks %s", k)
		}
	}
	// Filtering by one run's id gives its whole lifecycle and nothing of the other tenant.
	layers := map[string]bool{}
	for _, sp := range spans {
		at := attrs(sp)
		if at[telemetry.AttrTrainingRunID] == runA {
			layers[sp.Name()] = true
			if at[telemetry.AttrSessionID] != "" && at[telemetry.AttrSessionID] != sessA {
				t.Fatalf("span %s of run A carries session %s", sp.Name(), at[telemetry.AttrSessionID])
			}
		}
		if at[telemetry.AttrTrainingRunID] == runB && at[telemetry.AttrSessionID] == sessA {
			t.Fatal("tenant B's run tagged with tenant A's session")
		}
	}
	for _, want := range []string{"POST /api/v1/forward_backward", telemetry.SpanFutureExecute, telemetry.SpanTCRunForwardBackward,
		telemetry.SpanTBForwardBackward, telemetry.SpanHFForwardBackward, telemetry.SpanTCRunOptimStep, telemetry.SpanHFOptimStep} {
		if !layers[want] {
			t.Errorf("filtering by tuft.training_run_id misses %s", want)
		}
	}
	sampling := false
	for _, sp := range spans {
		at := attrs(sp)
		if at[telemetry.AttrSessionID] == sessA && at[telemetry.AttrSamplingSessionID] == samplerA {
			sampling = true
		}
	}
	if !sampling {
		t.Error("no sampling span carries both the session and the sampling session id")
	}
	for _, sp := range spans {
		for k, v := range attrs(sp) {
			if k == "tuft.api_key" || v == testenv.KeyA || v == testenv.KeyB {
				t.Fatalf("span %s leaks an API key", sp.Name())
			}
		}
	}

	// Metrics.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			seen[m.Name] = m
		}
	}
	units := map[string]string{
		telemetry.MetricTrainingModelsActive: "{model}", telemetry.MetricTrainingTokensPerSecond: "{token}/s",
		telemetry.MetricTrainingCheckpointsSaved: "{checkpoint}", telemetry.MetricTrainingCheckpointSize: "By",
		telemetry.MetricSamplingSessionsActive: "{session}", telemetry.MetricSamplingRequests: "{request}",
		telemetry.MetricSamplingDuration: "s", telemetry.MetricSamplingTokensPerSecond: "{token}/s",
		telemetry.MetricSamplingOutputTokens: "{token}", telemetry.MetricFuturesQueueLength: "{future}",
		telemetry.MetricFuturesCreated: "{future}", telemetry.MetricFuturesCompleted: "{future}",
		telemetry.MetricFuturesWaitTime: "s", telemetry.MetricFuturesExecutionTime: "s",
		// The embedded store's persistence timings (tuft.redis.operation.duration is
		// Redis's: the Redis store's own test checks it).
		telemetry.MetricDBClientOperationDuration: "s",
	}
	if _, ok := seen[telemetry.MetricRedisOperationDuration]; ok {
		t.Errorf("the embedded store recorded %s", telemetry.MetricRedisOperationDuration)
	}
	for name, unit := range units {
		m, ok := seen[name]
		if !ok {
			t.Errorf("metric %s not recorded", name)
			continue
		}
		if m.Unit != unit {
			t.Errorf("metric %s unit %q, want %q", name, m.Unit, unit)
		}
	}
	if sum, ok := seen[telemetry.MetricFuturesCompleted].Data.(metricdata.Sum[int64]); ok {
		found := false
		for _, dp := range sum.DataPoints {
			st, _ := dp.Attributes.Value(attribute.Key(telemetry.MAttrStatus))
			op, _ := dp.Attributes.Value(attribute.Key(telemetry.MAttrOperationType))
			if st.AsString() == "ready" && op.AsString() == "forward_backward" && dp.Value >= 2 {
				found = true
			}
		}
		if !found {
			t.Error("futures.completed lacks ready forward_backward points")
		}
	}

	// Logs: records carry the trace of the span they were logged under, and the client's
	// unhandled exception is a correlated ERROR record.
	logs.mu.Lock()
	defer logs.mu.Unlock()
	var correlated, clientExc bool
	for _, r := range logs.recs {
		if r.TraceID().IsValid() {
			correlated = true
		}
		if r.Severity() >= 17 { // ERROR
			var sess string
			r.WalkAttributes(func(kv attribute.KeyValue) bool {
				if string(kv.Key) == telemetry.AttrSessionID {
					sess = kv.Value.AsString()
				}
				return true
			})
			if sess == sessA && r.TraceID().IsValid() {
				clientExc = true
			}
		}
	}
	if !correlated {
		t.Error("no log record carries a trace id")
	}
	if !clientExc {
		t.Error("the client's unhandled exception is not a correlated error log")
	}
}
