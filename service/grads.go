package service

import (
	"context"
	"fmt"
)

// Accumulated gradients live only in the executor's memory: they are never written to a
// checkpoint (other tenants may load checkpoints) nor to the autosave (written when there
// are none, after optim_step and load_weights). A restart therefore loses the gradients
// of the forward_backward calls since the last optim_step. Rather than let the next
// optim_step "succeed" on less (or on nothing, with Adam still moving the weights), the
// run records when it holds gradients, and after a restart the next operation that
// would use them fails with an error that says they were lost. Persisting gradients
// instead would cost a write of the adapter's size on every forward_backward.

// setPendingGrads records whether r holds gradients no optim_step has used. The record
// is written when the value changes (about twice per training step), before the
// operation's result: a result the client sees is never ahead of the record.
func (s *Service) setPendingGrads(ctx context.Context, r *Run, pending bool) error {
	s.mu.Lock()
	if r.PendingGrads == pending {
		s.mu.Unlock()
		return nil
	}
	r.PendingGrads = pending
	c := *r
	s.mu.Unlock()
	if err := putJSON(ctx, s.st, keyRun+r.ID, &c); err != nil {
		return fmt.Errorf("training run %s: record its gradient state: %w", r.ID, err)
	}
	return nil
}

// lostGrads fails an operation that would use gradients a restart lost, once: the mark
// is cleared, so the operation after it trains normally.
func (s *Service) lostGrads(ctx context.Context, r *Run) error {
	s.mu.Lock()
	if !r.GradsLost {
		s.mu.Unlock()
		return nil
	}
	r.GradsLost = false
	c := *r
	s.mu.Unlock()
	if err := putJSON(ctx, s.st, keyRun+r.ID, &c); err != nil {
		s.log.WarnContext(ctx, "could not record that lost gradients were reported", "run", r.ID, "error", err)
	}
	return &Error{Kind: KindInternal, Msg: fmt.Sprintf("training run %s: the server restarted after forward_backward had accumulated gradients, "+
		"and gradients are not kept across a restart: they were lost. Nothing was applied; run the forward_backward calls "+
		"since the last optim_step again, then optim_step", r.ID)}
}

// undoStep puts a run back to its state before an optim_step whose result could not be
// saved (cause): from the latest saved state, which the failed save left untouched.
// Gradients are not saved, so those the step would have used are discarded.
func (s *Service) undoStep(ctx context.Context, r *Run, cause error) error {
	s.mu.Lock()
	hadGrads := r.PendingGrads
	s.mu.Unlock()
	dir, optimizer, from := s.latestState(r)
	var err error
	if dir == "" {
		err = s.be.CreateAdapter(ctx, r.BaseModel, r.ID, r.Lora) // same seed: the same initial adapter
		from = "its initial state"
	} else {
		err = s.be.LoadState(ctx, r.BaseModel, r.ID, dir, optimizer)
	}
	if err != nil {
		s.mu.Lock()
		r.Corrupted, r.Loaded = true, false
		r.Note = fmt.Sprintf("an optim_step could not save its result (%v) nor be undone (%v)", cause, err)
		c := *r
		s.mu.Unlock()
		_ = putJSON(ctx, s.st, keyRun+r.ID, &c)
		return &Error{Kind: KindInternal, Err: cause, Msg: fmt.Sprintf("optim_step could not save its result (%v), and training run %s could not be "+
			"restored from %s (%v): the run is unusable; create a new run from one of its checkpoints", cause, r.ID, from, err)}
	}
	msg := fmt.Sprintf("optim_step was not applied: saving its result failed (%v); training run %s was restored from %s", cause, r.ID, from)
	if hadGrads {
		msg += ", and the gradients accumulated since the last optim_step were discarded: run those forward_backward calls again"
	}
	if err := s.setPendingGrads(ctx, r, false); err != nil {
		return err
	}
	return &Error{Kind: KindInternal, Err: cause, Msg: msg}
}
