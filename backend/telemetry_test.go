package backend

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/telemetry"
)

// The caller-side span, the executor's span and the sampling slices go to the tracer
// provider the backend and the executor are given, in one parent chain, with the
// first_token event on the decode slice.
func TestSampleSpansGoToTheGivenProvider(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	dir := t.TempDir()
	if err := engine.WritePreset("tiny", dir); err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(dir, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	local := NewLocal([]*engine.Model{m}, []ModelInfo{{Name: "tiny", Config: m.Cfg}}, telemetry.WithTracerProvider(tp))
	b := New(local, telemetry.WithTracerProvider(tp))
	_, err = b.Sample(context.Background(), "tiny", "", engine.SampleRequest{Prompt: []int32{1, 2, 3}, NumSamples: 1,
		Params: engine.SampleParams{MaxTokens: 2, Temperature: 1, TopP: 1, TopK: -1}})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = s
	}
	caller, exec := byName[telemetry.SpanSBSample], byName[telemetry.SpanHFSample]
	if caller == nil || exec == nil || exec.Parent().SpanID() != caller.SpanContext().SpanID() {
		t.Fatalf("spans %v: want %s under %s", byName, telemetry.SpanHFSample, telemetry.SpanSBSample)
	}
	for _, n := range []string{telemetry.SpanSampleSchedule, telemetry.SpanSamplePreprocess, telemetry.SpanSamplePrefill,
		telemetry.SpanSampleDecode, telemetry.SpanSamplePostprocess} {
		if s := byName[n]; s == nil || s.Parent().SpanID() != exec.SpanContext().SpanID() {
			t.Fatalf("slice %s is missing or not a child of %s", n, telemetry.SpanHFSample)
		}
	}
	ev := byName[telemetry.SpanSampleDecode].Events()
	if len(ev) != 1 || ev[0].Name != telemetry.EventFirstToken || len(ev[0].Attributes) != 1 ||
		string(ev[0].Attributes[0].Key) != telemetry.AttrTimeToFirstToken {
		t.Fatalf("decode events %+v", ev)
	}
}
