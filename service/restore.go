package service

import (
	"context"
	"fmt"
)

// Start-up: every controller loads its records, then each live run gets its adapter back.

// restore reloads every record and each live run's adapter from its latest saved state.
func (s *Service) restore(ctx context.Context) error {
	if err := s.sessions.load(ctx, s.st, s.self, s.log); err != nil {
		return err
	}
	if err := s.restoreHeartbeats(ctx); err != nil {
		return fmt.Errorf("restore heartbeats: %w", err)
	}
	if err := s.runs.load(ctx, s.st, s.self, s.log); err != nil {
		return err
	}
	if err := s.metrics.load(ctx, s.st, s.runs.all(), s.log); err != nil {
		return err
	}
	if err := s.ckpts.load(ctx, s.st, s.log); err != nil {
		return err
	}
	if err := s.samplers.load(ctx, s.st, s.self, s.log); err != nil {
		return err
	}
	n, err := s.fut.Recover(ctx)
	if err != nil {
		return fmt.Errorf("recover futures: %w", err)
	}
	if n > 0 {
		s.log.Warn("failed futures left in flight by the previous process", "count", n)
	}
	s.recoverSaves()
	for r := range s.runs.all() {
		if err := s.restoreRun(ctx, r); err != nil {
			s.log.Error("could not restore training run", "run", r.ID, "error", err)
		}
	}
	restored := map[string]bool{} // inflight samplers of a run share one adapter
	for sm := range s.samplers.all() {
		if sm.Closed || !sm.Lora || restored[sm.adapterID()] {
			continue
		}
		if _, ok := s.models[sm.BaseModel]; !ok {
			sm.Closed = true
			continue
		}
		if !s.sourceVisible(sm) {
			// Unpublished (or deleted) while the server was down, or before the write that
			// closed the sampler reached the store.
			sm.Closed, sm.ClosedWhy = true, withdrawn(sm.ModelPath)
			s.putLogged(ctx, keySampler+sm.ID, sm, reasonSamplerClosed)
			s.log.Info("sampling session closed: its checkpoint is no longer published", "sampler", sm.ID, "checkpoint", sm.ModelPath)
			continue
		}
		restored[sm.adapterID()] = true
		if err := s.be.AddSamplerAdapter(ctx, sm.BaseModel, sm.adapterID(), sm.AdapterDir); err != nil {
			s.log.Warn("sampling session could not be restored; closing it", "sampler", sm.ID, "error", err)
			sm.Closed = true
			s.putLogged(ctx, keySampler+sm.ID, sm, reasonSamplerClosed)
		}
	}
	s.sweepEphemeral()
	s.log.Info("state restored", "sessions", s.sessions.len(), "runs", s.runs.len(), "samplers", s.samplers.len())
	return nil
}

// restoreRun brings a run's adapter back from the newest of its autosave and checkpoints.
func (s *Service) restoreRun(ctx context.Context, r *Run) error {
	// Run records are written lazily; the persisted futures say how far the run got.
	if n := s.fut.RecoveredNextSeq(r.ID); n > r.NextSeq {
		r.NextSeq = n
	}
	s.fut.SetNextSeq(r.ID, r.NextSeq)
	// Gradients are never saved: those accumulated before the restart are gone. The
	// next operation that would use them says so (see lostGrads).
	if err := s.restoreGrads(ctx, r); err != nil {
		return err
	}
	if r.State == RunUnloaded || r.State == RunCorrupted {
		return nil
	}
	if _, ok := s.models[r.BaseModel]; !ok {
		r.State = RunCorrupted
		r.Note = fmt.Sprintf("base model %q is no longer configured", r.BaseModel)
		return putJSON(ctx, s.st, keyRun+r.ID, r)
	}
	if r.State == RunCreating {
		// create_model (or the load that creates the run) never finished: its future was
		// failed by Recover. Create the adapter now, from the checkpoint it was loading if
		// any, so the run is usable, as the client may retry.
		var err error
		if lf := r.LoadedFrom; lf != nil {
			err = s.be.LoadState(ctx, r.BaseModel, r.ID, lf.Dir, lf.Optimizer && s.ownOptimizer(r.Tenant, lf.Path), r.optimizer())
		} else {
			err = s.be.CreateAdapter(ctx, r.BaseModel, r.ID, r.adapterConfig())
		}
		if err != nil {
			return err
		}
		r.State = RunReady
		return putJSON(ctx, s.st, keyRun+r.ID, r)
	}
	dir, optimizer, from := s.ckpts.latestState(r.ID)
	var err error
	if dir == "" {
		err = s.be.CreateAdapter(ctx, r.BaseModel, r.ID, r.adapterConfig())
		from = "a fresh adapter (no saved state)"
	} else {
		err = s.be.LoadState(ctx, r.BaseModel, r.ID, dir, optimizer, r.optimizer())
	}
	if err != nil {
		r.State = RunCorrupted
		r.Note = fmt.Sprintf("restore from %s failed: %v", from, err)
		s.putLogged(ctx, keyRun+r.ID, r, reasonRunCorrupted)
		s.endMetrics(r.ID)
		return err
	}
	s.log.Info("training run restored", "run", r.ID, "from", from, "next_seq", r.NextSeq)
	return putJSON(ctx, s.st, keyRun+r.ID, r)
}
