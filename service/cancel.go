package service

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"

	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/telemetry"
)

// Outcomes of CancelSample (the cancel_future reply's state).
const (
	CancelQueued  = "cancelled_queued"  // it had not started and never will
	CancelRunning = "cancelled_running" // it stops at its next decoding step
	CancelDone    = "already_done"      // it had resolved; nothing changed
)

// CancelSample stops a sampling request of tenant (cancel_future, which the SDK sends for
// a sample whose caller gave up): a queued one fails at once and never uses the model; a
// running one's context is cancelled, so the engine stops it at its next decoding step
// and its future fails saying so. Training operations cannot be cancelled (they run in
// the run's seq_id order).
func (s *Service) CancelSample(ctx context.Context, tenant, requestID string) (outcome string, err error) {
	ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeSamplingController), telemetry.SpanSCCancelSample,
		attribute.String(telemetry.AttrRequestID, requestID))
	defer func() {
		if sp.IsRecording() {
			sp.SetAttributes(attribute.String(telemetry.AttrCancelOutcome, outcome))
		}
		telemetry.End(sp, err)
	}()
	rec, err := s.fut.Get(ctx, tenant, requestID)
	switch {
	case errors.Is(err, futures.ErrNotFound):
		return "", notFoundf("future %q not found (unknown, expired after %s, or not yours)", requestID, s.cfg.FutureTTL())
	case err != nil:
		return "", classify(err)
	case rec.Done():
		return CancelDone, nil
	case rec.Owner != s.self:
		return "", &ElsewhereError{Owner: rec.Owner, What: "future " + requestID}
	case rec.OpType != telemetry.OpSample:
		return "", invalidf("future %s is a %s operation: only sampling requests can be cancelled (a training run's operations run in seq_id order)", requestID, rec.OpType)
	}
	r, err := s.fut.Cancel(ctx, tenant, requestID)
	if err != nil {
		if errors.Is(err, futures.ErrNotFound) {
			return "", notFoundf("future %q not found", requestID)
		}
		return "", classify(err)
	}
	switch {
	case rec.Status == futures.StatusRunning || r.Status == futures.StatusRunning:
		return CancelRunning, nil
	case r.Done() && r.Failure != nil && r.StartedAt.IsZero():
		return CancelQueued, nil
	case r.Done():
		return CancelDone, nil
	}
	return CancelQueued, nil // waiting for its turn: it fails when the turn comes, unrun
}

// cancelledError is the failure of a sample whose context cancel_future ended.
func cancelledError(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), futures.ErrCancelled) {
		return &Error{Kind: KindConflict, Msg: "sampling request cancelled by the client (cancel_future) while it ran; it stopped at its next decoding step", Err: err}
	}
	return err
}
