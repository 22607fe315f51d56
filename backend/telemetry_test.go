package backend

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"go.opentelemetry.io/otel/attribute"
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

// Inside a shared batch every request keeps its own lifecycle: preprocess, schedule
// (with its queue wait), prefill, decode (with first_token) and postprocess, in that
// order, children of its own hf_model.sample, which carries the batch sizes it ran in.
func TestSampleSlicesPerRequestInASharedBatch(t *testing.T) {
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
	defer local.Close()
	release := holdLoop(t, local.models["tiny"].sched)
	done := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() {
			_, err := local.Sample(WithTenant(context.Background(), fmt.Sprint("t", i)), "tiny", "", engine.SampleRequest{Prompt: []int32{1, 2, 3, int32(i)}, NumSamples: 2,
				Params: engine.SampleParams{MaxTokens: 5, Temperature: 1, TopP: 1, TopK: -1}})
			done <- err
		}()
	}
	waitQueued(local.models["tiny"].sched, 3)
	release()
	for i := 0; i < 3; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	children := map[string][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == telemetry.SpanHFSample {
			roots = append(roots, s)
		} else {
			children[s.Parent().SpanID().String()] = append(children[s.Parent().SpanID().String()], s)
		}
	}
	if len(roots) != 3 {
		t.Fatalf("%d hf_model.sample spans, want 3", len(roots))
	}
	want := []string{telemetry.SpanSamplePreprocess, telemetry.SpanSampleSchedule, telemetry.SpanSamplePrefill,
		telemetry.SpanSampleDecode, telemetry.SpanSamplePostprocess}
	for _, root := range roots {
		kids := children[root.SpanContext().SpanID().String()]
		sort.Slice(kids, func(i, j int) bool { return kids[i].StartTime().Before(kids[j].StartTime()) })
		if len(kids) != len(want) {
			t.Fatalf("request has slices %v, want %v", names(kids), want)
		}
		for i, k := range kids {
			if k.Name() != want[i] || (i > 0 && k.StartTime().Before(kids[i-1].EndTime())) {
				t.Fatalf("slices %v out of order (want %v)", names(kids), want)
			}
		}
		if !hasAttr(kids[1].Attributes(), telemetry.AttrQueueWaitMs) {
			t.Fatal("sample.schedule carries no queue wait")
		}
		if ev := kids[3].Events(); len(ev) != 1 || ev[0].Name != telemetry.EventFirstToken {
			t.Fatalf("decode events %+v", ev)
		}
		attrs := root.Attributes()
		for _, k := range []string{telemetry.AttrBatchSizeMax, telemetry.AttrBatchSizeMean, telemetry.AttrPreemptions, telemetry.AttrPromptCacheHitTokens} {
			if !hasAttr(attrs, k) {
				t.Fatalf("hf_model.sample lacks %s: %v", k, attrs)
			}
		}
		for _, a := range attrs {
			if string(a.Key) == telemetry.AttrBatchSizeMax && a.Value.AsInt64() < 4 {
				t.Fatalf("batch size max %d: the three requests did not share steps", a.Value.AsInt64())
			}
		}
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func hasAttr(attrs []attribute.KeyValue, key string) bool {
	for _, a := range attrs {
		if string(a.Key) == key {
			return true
		}
	}
	return false
}
