package backend

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/telemetry"
)

// Backend is the controllers' view of an Executor: every call opens the caller-side
// span (training_backend.* or sampling_backend.*), so the trace shows the hop even when
// the executor is a remote worker.
type Backend struct {
	Exec     Executor
	training trace.Tracer
	sampling trace.Tracer
}

// New wraps an executor. Its spans go to the tracer provider of opts (default: the
// global one).
func New(e Executor, opts ...telemetry.Option) *Backend {
	s := telemetry.NewSettings(opts...)
	return &Backend{Exec: e, training: s.Tracer(telemetry.ScopeTrainingBackend), sampling: s.Tracer(telemetry.ScopeSamplingBackend)}
}

func (b *Backend) tspan(ctx context.Context, name, lora string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	attrs = append(attrs, attribute.String(telemetry.AttrLoraID, lora))
	return telemetry.StartSpan(ctx, b.training, name, attrs...)
}

func (b *Backend) sspan(ctx context.Context, name, lora string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	attrs = append(attrs, attribute.String(telemetry.AttrLoraID, lora), attribute.Bool(telemetry.AttrHasLora, lora != ""))
	return telemetry.StartSpan(ctx, b.sampling, name, attrs...)
}

// Models lists the executor's models.
func (b *Backend) Models() []ModelInfo { return b.Exec.Models() }

// CreateAdapter creates a training adapter.
func (b *Backend) CreateAdapter(ctx context.Context, model, lora string, cfg engine.LoraConfig) (err error) {
	ctx, sp := b.tspan(ctx, telemetry.SpanTBCreateAdapter, lora, attribute.Int(telemetry.AttrLoraRank, cfg.Rank))
	defer func() { telemetry.End(sp, err) }()
	return b.Exec.CreateAdapter(ctx, model, lora, cfg)
}

// RemoveAdapter removes a training adapter.
func (b *Backend) RemoveAdapter(ctx context.Context, model, lora string) (err error) {
	ctx, sp := b.tspan(ctx, telemetry.SpanTBRemoveAdapter, lora)
	defer func() { telemetry.End(sp, err) }()
	return b.Exec.RemoveAdapter(ctx, model, lora)
}

// fbSpan opens the span of a forward(_backward) call (blocking or Async).
func (b *Backend) fbSpan(ctx context.Context, lora string, req engine.ForwardRequest) (context.Context, trace.Span) {
	name := telemetry.SpanTBForward
	if req.Backward {
		name = telemetry.SpanTBForwardBackward
	}
	return b.tspan(ctx, name, lora, attribute.Bool(telemetry.AttrBackward, req.Backward), attribute.Int(telemetry.AttrDataCount, len(req.Data)))
}

// optimSpan opens the span of an optimizer step (blocking or Async).
func (b *Backend) optimSpan(ctx context.Context, lora string, p engine.StepParams) (context.Context, trace.Span) {
	return b.tspan(ctx, telemetry.SpanTBOptimStep, lora, attribute.Float64(telemetry.AttrLearningRate, p.LearningRate()),
		attribute.String(telemetry.AttrOptimizerFamily, p.Family()))
}

// sampleSpan opens the span of a sample request (blocking, streaming or Async).
func (b *Backend) sampleSpan(ctx context.Context, lora string, req engine.SampleRequest) (context.Context, trace.Span) {
	return b.sspan(ctx, telemetry.SpanSBSample, lora, attribute.Int(telemetry.AttrNumSamples, req.NumSamples))
}

// ending wraps done so that it ends sp first.
func ending[T any](sp trace.Span, done func(T, error)) func(T, error) {
	return func(v T, err error) {
		telemetry.End(sp, err)
		done(v, err)
	}
}

// ForwardBackward runs forward (and backward) on a training adapter.
func (b *Backend) ForwardBackward(ctx context.Context, model, lora string, req engine.ForwardRequest) (res engine.ForwardResult, err error) {
	ctx, sp := b.fbSpan(ctx, lora, req)
	defer func() { telemetry.End(sp, err) }()
	return b.Exec.ForwardBackward(ctx, model, lora, req)
}

// ForwardBackwardAsync is ForwardBackward returning at once (Executor.ForwardBackwardAsync):
// its span opens now and ends when done is called.
func (b *Backend) ForwardBackwardAsync(ctx context.Context, model, lora string, req engine.ForwardRequest, done func(engine.ForwardResult, error)) {
	ctx, sp := b.fbSpan(ctx, lora, req)
	b.Exec.ForwardBackwardAsync(ctx, model, lora, req, ending(sp, done))
}

// OptimStep applies one step of the adapter's optimizer (AdamW or Dimuon).
func (b *Backend) OptimStep(ctx context.Context, model, lora string, p engine.StepParams) (m map[string]float64, err error) {
	ctx, sp := b.optimSpan(ctx, lora, p)
	defer func() { telemetry.End(sp, err) }()
	return b.Exec.OptimStep(ctx, model, lora, p)
}

// OptimStepAsync is OptimStep returning at once (Executor.OptimStepAsync): its span
// opens now and ends when done is called.
func (b *Backend) OptimStepAsync(ctx context.Context, model, lora string, p engine.StepParams, done func(map[string]float64, error)) {
	ctx, sp := b.optimSpan(ctx, lora, p)
	b.Exec.OptimStepAsync(ctx, model, lora, p, ending(sp, done))
}

// SaveState saves a training adapter.
func (b *Backend) SaveState(ctx context.Context, model, lora, dir string, optimizer bool) (err error) {
	ctx, sp := b.tspan(ctx, telemetry.SpanTBSaveState, lora, attribute.Bool(telemetry.AttrOptimizer, optimizer))
	defer func() { telemetry.End(sp, err) }()
	return b.Exec.SaveState(ctx, model, lora, dir, optimizer)
}

// LoadState loads a training adapter that trains with the optimizer family want.
func (b *Backend) LoadState(ctx context.Context, model, lora, dir string, optimizer bool, want engine.OptimizerConfig) (err error) {
	ctx, sp := b.tspan(ctx, telemetry.SpanTBLoadState, lora, attribute.Bool(telemetry.AttrOptimizer, optimizer),
		attribute.String(telemetry.AttrOptimizerFamily, want.Normalize().Type))
	defer func() { telemetry.End(sp, err) }()
	return b.Exec.LoadState(ctx, model, lora, dir, optimizer, want)
}

// AddSamplerAdapter loads a sampler checkpoint as a sampling adapter.
func (b *Backend) AddSamplerAdapter(ctx context.Context, model, lora, dir string) (err error) {
	ctx, sp := b.sspan(ctx, telemetry.SpanSBAddAdapter, lora)
	defer func() { telemetry.End(sp, err) }()
	return b.Exec.LoadState(ctx, model, lora, dir, false, engine.OptimizerConfig{})
}

// RemoveSamplerAdapter drops a sampling adapter.
func (b *Backend) RemoveSamplerAdapter(ctx context.Context, model, lora string) (err error) {
	ctx, sp := b.sspan(ctx, telemetry.SpanSBRemoveAdapter, lora)
	defer func() { telemetry.End(sp, err) }()
	return b.Exec.RemoveAdapter(ctx, model, lora)
}

// Sample generates from the base model (lora "") or a sampling adapter.
func (b *Backend) Sample(ctx context.Context, model, lora string, req engine.SampleRequest) (res engine.SampleResult, err error) {
	ctx, sp := b.sampleSpan(ctx, lora, req)
	defer func() { telemetry.End(sp, err) }()
	return b.Exec.Sample(ctx, model, lora, req)
}

// SampleAsync is Sample returning at once (Executor.SampleAsync): its span opens now and
// ends when done is called.
func (b *Backend) SampleAsync(ctx context.Context, model, lora string, req engine.SampleRequest, done func(engine.SampleResult, error)) {
	ctx, sp := b.sampleSpan(ctx, lora, req)
	b.Exec.SampleAsync(ctx, model, lora, req, ending(sp, done))
}

// SampleStream is Sample reporting each token to st as it is drawn; ErrNoStreaming where
// the executor cannot.
func (b *Backend) SampleStream(ctx context.Context, model, lora string, req engine.SampleRequest, st Stream) (res engine.SampleResult, err error) {
	ctx, sp := b.sampleSpan(ctx, lora, req)
	defer func() { telemetry.End(sp, err) }()
	sx, ok := b.Exec.(Streamer)
	if !ok {
		return res, fmt.Errorf("%w for %q: its executor returns whole results", ErrNoStreaming, model)
	}
	return sx.SampleStream(ctx, model, lora, req, st)
}
