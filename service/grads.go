package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/tuft-go/tuft/store"
)

// Accumulated gradients live only in the executor's memory: they are never written to a
// checkpoint (other tenants may load checkpoints) nor to the autosave (written when there
// are none, after optim_step and load_weights). A restart therefore loses the gradients
// of the forward_backward calls since the last optim_step. Rather than let the next
// optim_step "succeed" on less (or on nothing, with Adam still moving the weights), the
// run records when it holds gradients, and after a restart the next operation that
// would use them fails with an error that says they were lost. Persisting gradients
// instead would cost a write of the adapter's size on every forward_backward.

// Gradient states persisted under keyGrads.
const (
	gradsPending = "pending"
	gradsLost    = "lost"
)

// setPendingGrads records whether r holds gradients no optim_step has used. The record
// is written when the value changes (about twice per training step), before the
// operation's result: a result the client sees is never ahead of it.
func (s *Service) setPendingGrads(ctx context.Context, r *Run, pending bool) error {
	s.lock(lkRuns)
	if r.PendingGrads == pending {
		s.unlock(lkRuns)
		return nil
	}
	r.PendingGrads = pending
	s.unlock(lkRuns)
	var err error
	if pending {
		err = s.st.Set(ctx, keyGrads+r.ID, []byte(gradsPending), 0)
	} else {
		err = s.st.Del(ctx, keyGrads+r.ID)
	}
	if err != nil {
		return fmt.Errorf("training run %s: record its gradient state: %w", r.ID, err)
	}
	return nil
}

// restoreGrads runs at start: gradients pending before the restart are lost now.
func (s *Service) restoreGrads(ctx context.Context, r *Run) error {
	b, err := s.st.Get(ctx, keyGrads+r.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("training run %s: read its gradient state: %w", r.ID, err)
	}
	r.GradsLost = true
	if string(b) == gradsPending {
		s.log.Warn("training run had gradients accumulated since its last optim_step; a restart loses them", "run", r.ID)
		return s.st.Set(ctx, keyGrads+r.ID, []byte(gradsLost), 0)
	}
	return nil
}

// lostGrads fails an operation that would use gradients a restart lost, once: the mark
// is cleared, so the operation after it trains normally.
func (s *Service) lostGrads(ctx context.Context, r *Run) error {
	s.lock(lkRuns)
	if !r.GradsLost {
		s.unlock(lkRuns)
		return nil
	}
	r.GradsLost = false
	s.unlock(lkRuns)
	if err := s.st.Del(ctx, keyGrads+r.ID); err != nil {
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
	s.lock(lkRuns)
	hadGrads := r.PendingGrads
	s.unlock(lkRuns)
	dir, optimizer, from := s.ckpts.latestState(r.ID)
	var err error
	if dir == "" {
		err = s.be.CreateAdapter(ctx, r.BaseModel, r.ID, r.adapterConfig()) // same seed: the same initial adapter
		from = "its initial state"
	} else {
		err = s.be.LoadState(ctx, r.BaseModel, r.ID, dir, optimizer, r.optimizer())
	}
	if err != nil {
		s.lock(lkRuns)
		r.State = RunCorrupted
		r.Note = fmt.Sprintf("an optim_step could not save its result (%v) nor be undone (%v)", cause, err)
		c := *r
		s.unlock(lkRuns)
		s.putLogged(ctx, keyRun+r.ID, &c, reasonRunCorrupted)
		s.markDirty(r) // a flush already under way may write its older copy after this one
		s.endMetrics(r.ID)
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

// clearGrads forgets r's gradients, pending or lost (load_weights replaced them).
func (s *Service) clearGrads(ctx context.Context, r *Run) error {
	s.lock(lkRuns)
	was := r.PendingGrads || r.GradsLost
	r.PendingGrads, r.GradsLost = false, false
	s.unlock(lkRuns)
	if !was {
		return nil
	}
	if err := s.st.Del(ctx, keyGrads+r.ID); err != nil {
		return fmt.Errorf("training run %s: record its gradient state: %w", r.ID, err)
	}
	return nil
}
