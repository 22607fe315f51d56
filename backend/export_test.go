package backend

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/telemetry"
)

// An export runs on the executor holding the base model, under a training_backend.export
// span that carries the format; an executor without the weights says so.
func TestExportSpanAndExecutors(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	local := tinyLocal(t)
	ctx := context.Background()
	if err := local.CreateAdapter(ctx, "tiny", "r1", engine.LoraConfig{Rank: 2, Seed: 1, TrainAttn: true}); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	if err := local.SaveState(ctx, "tiny", "r1", ckpt, false); err != nil {
		t.Fatal(err)
	}
	b := New(local, telemetry.WithTracerProvider(tp))
	files, err := b.Export(ctx, "tiny", ckpt, "gguf", "bf16", filepath.Join(t.TempDir(), "out"))
	if err != nil || len(files) != 2 || files[0] != "model-bf16.gguf" {
		t.Fatalf("export: %v %v", files, err)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != telemetry.SpanTBExport {
		t.Fatalf("spans %v", spans)
	}
	if !hasKeyValue(spans[0].Attributes(), attribute.String(telemetry.AttrExportFormat, "gguf")) {
		t.Errorf("attributes %v", spans[0].Attributes())
	}
	// An executor that holds no weights (a remote worker) refuses with ErrNoExport; a
	// peft export needs none.
	nb := New(noExport{local})
	if _, err := nb.Export(ctx, "tiny", ckpt, "hf", "", filepath.Join(t.TempDir(), "hf")); !errors.Is(err, ErrNoExport) {
		t.Errorf("hf without weights: %v", err)
	}
	if _, err := nb.Export(ctx, "tiny", ckpt, "peft", "", filepath.Join(t.TempDir(), "peft")); err != nil {
		t.Errorf("peft without weights: %v", err)
	}
}

// noExport hides Local's Export, as a remote worker's client has none.
type noExport struct{ Executor }

func hasKeyValue(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, a := range attrs {
		if a == want {
			return true
		}
	}
	return false
}
