package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/tuft-go/tuft/engine"
)

// ModelInfo describes a hosted base model.
type ModelInfo struct {
	Name             string
	Arch             string
	VocabSize        int
	MaxContextLength int
	// Signature identifies the weights and architecture, so a store written under another
	// model is detected at start.
	Signature string
	// Config is the architecture, for validating requests before they are queued.
	Config engine.Config
	// KVCacheTokens is the capacity of the model's KV cache in positions (0: unknown), for
	// refusing at the edge a sequence that could never fit and for sampling backpressure.
	KVCacheTokens int
	// Text is the model's tokenizer and chat template; nil where this process has none
	// (a model hosted only by remote workers).
	Text *Text
}

// Executor runs model operations. Adapters are addressed by (model, loraID); loraID ""
// means the base model (sampling only). Implementations serialise operations on one
// adapter themselves; different adapters may run concurrently.
type Executor interface {
	Models() []ModelInfo
	CreateAdapter(ctx context.Context, model, loraID string, cfg engine.LoraConfig) error
	RemoveAdapter(ctx context.Context, model, loraID string) error
	ForwardBackward(ctx context.Context, model, loraID string, req engine.ForwardRequest) (engine.ForwardResult, error)
	// OptimStep applies one step of the adapter's optimizer family; p must be for it.
	OptimStep(ctx context.Context, model, loraID string, p engine.StepParams) (map[string]float64, error)
	// SaveState writes the adapter (and, with optimizer, its optimizer state) in PEFT
	// format into dir, atomically.
	SaveState(ctx context.Context, model, loraID, dir string, optimizer bool) error
	// LoadState creates or replaces the adapter loraID from dir, training with the
	// optimizer family want: with optimizer, dir's recorded optimizer state must be of
	// want (an InputError names both otherwise); without, want starts afresh.
	LoadState(ctx context.Context, model, loraID, dir string, optimizer bool, want engine.OptimizerConfig) error
	Sample(ctx context.Context, model, loraID string, req engine.SampleRequest) (engine.SampleResult, error)

	// ForwardBackwardAsync, OptimStepAsync and SampleAsync queue the operation and return at once. done
	// receives the outcome exactly once, possibly before the call returns (an immediate refusal); it
	// must not block: on Local it runs on the model's loop goroutine, on Remote on the call's goroutine.
	ForwardBackwardAsync(ctx context.Context, model, loraID string, req engine.ForwardRequest, done func(engine.ForwardResult, error))
	OptimStepAsync(ctx context.Context, model, loraID string, p engine.StepParams, done func(map[string]float64, error))
	SampleAsync(ctx context.Context, model, loraID string, req engine.SampleRequest, done func(engine.SampleResult, error))

	Close() error
}

// ErrUnknownModel is returned for a base model the executor does not host.
var ErrUnknownModel = errors.New("unknown base model")

// ErrUnknownAdapter is returned for an adapter the executor does not hold.
var ErrUnknownAdapter = errors.New("unknown adapter")

// UnknownModel builds an ErrUnknownModel error naming the model.
func UnknownModel(name string) error { return fmt.Errorf("%w %q", ErrUnknownModel, name) }

// Stream asks for the tokens of a sample request as they are drawn.
type Stream struct {
	// OnToken receives every token; it runs on the sampling goroutine and must return
	// quickly (hand the token to another goroutine, never block on a network write).
	OnToken func(engine.TokenEvent)
	// TopLogprobs > 0 fills each event's Top with that many most likely tokens.
	TopLogprobs int
}

// Streamer is an Executor that can report tokens while it samples. The in-process
// executor is one; a remote worker is not (its RPC returns whole results).
type Streamer interface {
	SampleStream(ctx context.Context, model, loraID string, req engine.SampleRequest, st Stream) (engine.SampleResult, error)
}

// ErrNoStreaming is returned by SampleStream where the model's executor cannot report
// tokens while it samples.
var ErrNoStreaming = errors.New("token streaming is not available")
