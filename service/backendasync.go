package service

import (
	"context"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/engine"
)

// The service's model operations (forward, forward_backward, optim_step, sample) hand
// their work to the backend through these methods, which queue it and return at once;
// done receives the outcome exactly once and must not block (on the in-process executor
// it runs on the model's loop goroutine). See the async contract between backend and
// futures (docs/architecture.md, the glossary: "two things schedule").

// MERGE: replaced by backend.Backend's Async methods (sched-pkg)
// forwardBackwardAsync is backend.Backend.ForwardBackwardAsync until that exists: a
// goroutine per call stands in for the model's loop.
func (s *Service) forwardBackwardAsync(ctx context.Context, model, loraID string, req engine.ForwardRequest, done func(engine.ForwardResult, error)) {
	go func() { done(s.be.ForwardBackward(ctx, model, loraID, req)) }()
}

// MERGE: replaced by backend.Backend's Async methods (sched-pkg)
// optimStepAsync is backend.Backend.OptimStepAsync until that exists.
func (s *Service) optimStepAsync(ctx context.Context, model, loraID string, p engine.StepParams, done func(map[string]float64, error)) {
	go func() { done(s.be.OptimStep(ctx, model, loraID, p)) }()
}

// MERGE: replaced by backend.Backend's Async methods (sched-pkg)
// sampleAsync is backend.Backend.SampleAsync until that exists.
func (s *Service) sampleAsync(ctx context.Context, model, loraID string, req engine.SampleRequest, done func(engine.SampleResult, error)) {
	go func() { done(s.be.Sample(ctx, model, loraID, req)) }()
}

// MERGE: the contract has no streaming variant: keep this shim (a goroutine per streamed
// sample, as before the contract) until backend.Backend has SampleStreamAsync, then
// point the call at it.
// sampleStreamAsync is sampleAsync reporting the tokens as they are drawn
// (backend.Backend.SampleStream).
func (s *Service) sampleStreamAsync(ctx context.Context, model, loraID string, req engine.SampleRequest, st backend.Stream, done func(engine.SampleResult, error)) {
	go func() { done(s.be.SampleStream(ctx, model, loraID, req, st)) }()
}
