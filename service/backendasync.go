package service

import (
	"context"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/engine"
)

// The service's model operations (forward, forward_backward, optim_step, sample) hand
// their work to the backend through its Async methods (backend.Backend's
// ForwardBackwardAsync, OptimStepAsync, SampleAsync), which queue it and return at once;
// done receives the outcome exactly once and must not block (on the in-process executor
// it runs on the model's loop goroutine). See docs/architecture.md, the glossary: "two
// things schedule". A streamed sample has no Async form yet: the shim below stands in.

// sampleStreamAsync is backend.Backend.SampleAsync reporting the tokens as they are drawn
// (backend.Backend.SampleStream).
//
// TODO(sched): the async contract has no streaming form: this shim parks a goroutine per
// streamed sample (the OpenAI/Anthropic-compatible routes' stream: true) until
// backend.Backend has SampleStreamAsync (Local already has it inside, sampleAsync with a
// Stream); then point the call at it and delete this file.
func (s *Service) sampleStreamAsync(ctx context.Context, model, loraID string, req engine.SampleRequest, st backend.Stream, done func(engine.SampleResult, error)) {
	go func() { done(s.be.SampleStream(ctx, model, loraID, req, st)) }()
}
