package openai_test

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
	"github.com/tuft-go/tuft/telemetry"
	"github.com/tuft-go/tuft/telemetry/setup"
)

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes() {
		m[a.Key] = a.Value
	}
	return m
}

// The compatible routes emit the same spans, correlation keys and metrics as Tinker
// sampling, plus the gen_ai semantic-convention attributes on their HTTP spans.
func TestCompatTelemetry(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	tel, err := setup.New(context.Background(), telemetry.DefaultConfig(), "server",
		setup.WithSpanProcessor(rec), setup.WithMetricReader(reader))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	s := testenv.StartWith(t, testenv.Config(t, t.TempDir(), "memory"), server.Options{Logger: tel.Logger(),
		TracerProvider: tel.TracerProvider(), MeterProvider: tel.MeterProvider(), Instruments: tel.Instruments()})
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	ckpt := trainCheckpoint(t, a, "telemetry")
	runID := strings.Split(strings.TrimPrefix(ckpt, "tinker://"), "/")[0]

	r, body := post(t, s, "/oai/api/v1/chat/completions", testenv.KeyA, map[string]any{"model": ckpt,
		"messages": []any{map[string]any{"role": "user", "content": "Hi"}}, "max_tokens": 5, "n": 2, "temperature": 0.5, "seed": 9})
	var chatResp struct{ ID string }
	if r.StatusCode != 200 || json.Unmarshal(body, &chatResp) != nil {
		t.Fatalf("chat: %d %s", r.StatusCode, body)
	}
	if r, body := post(t, s, "/oai/api/v1/completions", testenv.KeyA, map[string]any{"model": testenv.Model, "prompt": "Hi", "max_tokens": 3}); r.StatusCode != 200 {
		t.Fatalf("completion: %d %s", r.StatusCode, body)
	}
	resp := open(t, context.Background(), s, "/oai/api/v1/chat/completions", testenv.KeyA, map[string]any{"model": testenv.Model,
		"messages": []any{map[string]any{"role": "user", "content": "Hi"}}, "max_tokens": 4, "stream": true})
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
	}
	resp.Body.Close()
	if r, body := post(t, s, "/anthropic/api/v1/messages", testenv.KeyA, map[string]any{"model": testenv.Model, "max_tokens": 3,
		"messages": []any{map[string]any{"role": "user", "content": "Hi"}}}); r.StatusCode != 200 {
		t.Fatalf("messages: %d %s", r.StatusCode, body)
	}

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, sp := range rec.Ended() {
		byName[sp.Name()] = append(byName[sp.Name()], sp)
	}
	chats := byName["POST /oai/api/v1/chat/completions"]
	if len(chats) != 2 {
		t.Fatalf("%d chat spans", len(chats))
	}
	http := chats[0]
	at := spanAttrs(http)
	for k, want := range map[string]any{
		telemetry.AttrGenAIOperationName: telemetry.GenAIOpChat, telemetry.AttrGenAIRequestModel: ckpt,
		telemetry.AttrGenAIResponseModel: ckpt, telemetry.AttrGenAIResponseID: chatResp.ID,
		telemetry.AttrGenAIRequestMaxTokens: int64(5), telemetry.AttrGenAIRequestTemperature: 0.5,
		telemetry.AttrGenAIRequestSeed: int64(9), telemetry.AttrGenAIRequestChoiceCount: int64(2),
		telemetry.AttrOperationType: telemetry.OpSample, telemetry.AttrBaseModel: testenv.Model,
		telemetry.AttrTrainingRunID: runID,
	} {
		if got := at[attribute.Key(k)]; got.AsInterface() != want {
			t.Errorf("chat span %s = %v, want %v", k, got.AsInterface(), want)
		}
	}
	if at[attribute.Key(telemetry.AttrGenAIInputTokens)].AsInt64() <= 0 || at[attribute.Key(telemetry.AttrGenAIOutputTokens)].AsInt64() <= 0 {
		t.Errorf("chat span usage: %v / %v", at[attribute.Key(telemetry.AttrGenAIInputTokens)], at[attribute.Key(telemetry.AttrGenAIOutputTokens)])
	}
	if fr := at[attribute.Key(telemetry.AttrGenAIFinishReasons)].AsStringSlice(); len(fr) != 2 {
		t.Errorf("finish reasons %v", fr)
	}
	reqID := at[attribute.Key(telemetry.AttrRequestID)].AsString()
	if reqID == "" {
		t.Fatal("chat span has no tuft.request_id")
	}
	// The request's future, controller, backend and model spans, in the HTTP span's trace.
	found := map[string]bool{}
	for _, name := range []string{telemetry.SpanFutureExecute, telemetry.SpanSCRunSample, telemetry.SpanSBSample, telemetry.SpanHFSample} {
		for _, sp := range byName[name] {
			if sp.SpanContext().TraceID() != http.SpanContext().TraceID() {
				continue
			}
			found[name] = true
			a := spanAttrs(sp)
			if name == telemetry.SpanFutureExecute && a[attribute.Key(telemetry.AttrRequestID)].AsString() != reqID {
				t.Errorf("%s: tuft.request_id %v, want %s", name, a[attribute.Key(telemetry.AttrRequestID)], reqID)
			}
			if (name == telemetry.SpanSCRunSample || name == telemetry.SpanFutureExecute) && a[attribute.Key(telemetry.AttrTrainingRunID)].AsString() != runID {
				t.Errorf("%s: tuft.training_run_id %v, want %s", name, a[attribute.Key(telemetry.AttrTrainingRunID)], runID)
			}
			if name == telemetry.SpanHFSample && a[attribute.Key(telemetry.AttrGenAIOutputTokens)].AsInt64() <= 0 {
				t.Errorf("%s: no gen_ai.usage.output_tokens", name)
			}
		}
	}
	for _, name := range []string{telemetry.SpanFutureExecute, telemetry.SpanSCRunSample, telemetry.SpanSBSample, telemetry.SpanHFSample} {
		if !found[name] {
			t.Errorf("no %s span in the chat request's trace", name)
		}
	}
	// A streamed response marks when its first text went out.
	stream := chats[1]
	hasEvent := false
	for _, ev := range stream.Events() {
		if ev.Name == telemetry.EventFirstToken {
			for _, a := range ev.Attributes {
				hasEvent = hasEvent || string(a.Key) == telemetry.AttrTimeToFirstToken
			}
		}
	}
	if !hasEvent {
		t.Error("streamed chat span has no first_token event with its time")
	}
	for route, op := range map[string]string{"POST /oai/api/v1/completions": telemetry.GenAIOpTextCompletion, "POST /anthropic/api/v1/messages": telemetry.GenAIOpChat} {
		sp := byName[route]
		if len(sp) != 1 || spanAttrs(sp[0])[attribute.Key(telemetry.AttrGenAIOperationName)].AsString() != op {
			t.Errorf("%s: %d spans, want one with gen_ai.operation.name %s", route, len(sp), op)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var requests int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == telemetry.MetricSamplingRequests {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					requests += dp.Value
				}
			}
		}
	}
	if requests != 4 {
		t.Errorf("%s = %d, want 4 (one per compatible request)", telemetry.MetricSamplingRequests, requests)
	}
}
