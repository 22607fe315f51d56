package testenv

import (
	"context"
	"sync"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/engine"
)

// NoopExecutor is a test double of backend.Executor that does no model work: every
// operation succeeds at once with a small, well-formed result. It serves benchmarks of
// the control plane, where the engine's cost would drown what is measured.
type NoopExecutor struct {
	mu       sync.Mutex
	adapters map[string]bool
}

// NewNoopExecutor returns an executor hosting one model named Model.
func NewNoopExecutor() *NoopExecutor { return &NoopExecutor{adapters: map[string]bool{}} }

// Models implements backend.Executor.
func (e *NoopExecutor) Models() []backend.ModelInfo {
	return []backend.ModelInfo{{Name: Model, Arch: "llama", VocabSize: 512, MaxContextLength: 2048, Signature: "noop",
		Config: engine.Config{Arch: "llama", VocabSize: 512, Hidden: 8, Intermediate: 8, Layers: 1, Heads: 1, KVHeads: 1, HeadDim: 8,
			RopeTheta: 10000, RMSNormEps: 1e-5, MaxPositions: 2048}}}
}

// CreateAdapter implements backend.Executor.
func (e *NoopExecutor) CreateAdapter(_ context.Context, _, lora string, _ engine.LoraConfig) error {
	e.mu.Lock()
	e.adapters[lora] = true
	e.mu.Unlock()
	return nil
}

// RemoveAdapter implements backend.Executor.
func (e *NoopExecutor) RemoveAdapter(_ context.Context, _, lora string) error {
	e.mu.Lock()
	delete(e.adapters, lora)
	e.mu.Unlock()
	return nil
}

// ForwardBackward implements backend.Executor.
func (e *NoopExecutor) ForwardBackward(_ context.Context, _, _ string, req engine.ForwardRequest) (engine.ForwardResult, error) {
	res := engine.ForwardResult{Metrics: map[string]float64{"loss:sum": 0}}
	for _, d := range req.Data {
		res.Outputs = append(res.Outputs, map[string]engine.Tensor{"logprobs": {DType: engine.Float32, Shape: []int{len(d.Tokens)}, F32: make([]float32, len(d.Tokens))}})
		res.Tokens += len(d.Tokens)
	}
	return res, nil
}

// OptimStep implements backend.Executor.
func (e *NoopExecutor) OptimStep(context.Context, string, string, engine.StepParams) (map[string]float64, error) {
	return map[string]float64{}, nil
}

// SaveState implements backend.Executor.
func (e *NoopExecutor) SaveState(context.Context, string, string, string, bool) error { return nil }

// LoadState implements backend.Executor.
func (e *NoopExecutor) LoadState(_ context.Context, _, lora, _ string, _ bool, _ engine.OptimizerConfig) error {
	return e.CreateAdapter(context.Background(), "", lora, engine.LoraConfig{})
}

// Sample implements backend.Executor.
func (e *NoopExecutor) Sample(_ context.Context, _, _ string, req engine.SampleRequest) (engine.SampleResult, error) {
	res := engine.SampleResult{PromptTokens: len(req.Prompt)}
	for i := 0; i < req.NumSamples; i++ {
		res.Sequences = append(res.Sequences, engine.Sequence{Tokens: []int32{1}, Logprobs: []float32{-0.5}, StopReason: engine.StopReasonLength})
		res.OutputTokens++
	}
	return res, nil
}

// ForwardBackwardAsync implements backend.Executor: done runs before it returns.
func (e *NoopExecutor) ForwardBackwardAsync(ctx context.Context, model, lora string, req engine.ForwardRequest, done func(engine.ForwardResult, error)) {
	done(e.ForwardBackward(ctx, model, lora, req))
}

// OptimStepAsync implements backend.Executor: done runs before it returns.
func (e *NoopExecutor) OptimStepAsync(ctx context.Context, model, lora string, p engine.StepParams, done func(map[string]float64, error)) {
	done(e.OptimStep(ctx, model, lora, p))
}

// SampleAsync implements backend.Executor: done runs before it returns.
func (e *NoopExecutor) SampleAsync(ctx context.Context, model, lora string, req engine.SampleRequest, done func(engine.SampleResult, error)) {
	done(e.Sample(ctx, model, lora, req))
}

// Close implements backend.Executor.
func (e *NoopExecutor) Close() error { return nil }

// Has reports whether the executor holds the adapter.
func (e *NoopExecutor) Has(lora string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.adapters[lora]
}
