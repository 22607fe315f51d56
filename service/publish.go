package service

import (
	"context"
)

// Publishing semantics. A published checkpoint is readable by every tenant: load_weights
// copies it into the reader's run, and create_sampling_session opens a sampler that reads
// it. Unpublishing (or deleting) withdraws it: every sampler another tenant opened from
// it stops at once (its next asample is a 404), and stays stopped across restarts (each
// asample and each restore checks that its checkpoint is still visible to its tenant).
// Copies already made by load_weights belong to the runs that made them.

// sourceVisible reports whether a sampler's checkpoint (if it was opened from one) is
// still visible to the sampler's tenant. Callers hold no controller lock.
func (s *Service) sourceVisible(sm *Sampler) bool {
	if sm.ModelPath == "" {
		return true // the base model, or weights saved for the sampler by its own run
	}
	fetched := s.fetchCheckpoint(sm.ModelPath)
	s.lock(lkCkpts)
	defer s.unlock(lkCkpts)
	_, err := s.ckpts.resolve(sm.Tenant, sm.ModelPath, fetched)
	return err == nil
}

// checkSamplerSource closes a sampler whose checkpoint its tenant may no longer read.
func (s *Service) checkSamplerSource(ctx context.Context, sm *Sampler) error {
	if s.sourceVisible(sm) {
		return nil
	}
	s.lock(lkSamplers)
	live := s.samplers.m[sm.ID]
	if live != nil && !live.Closed {
		live.ClosedWhy = withdrawn(sm.ModelPath)
	}
	s.unlock(lkSamplers)
	if live != nil {
		s.closeSampler(ctx, live)
	}
	return notFoundf("sampling session %s is closed (%s)", sm.ID, withdrawn(sm.ModelPath))
}

// stopForeignSamplers closes the samplers that tenants other than owner opened from the
// checkpoint at path, which owner has just unpublished or deleted.
func (s *Service) stopForeignSamplers(ctx context.Context, owner, path string) {
	var victims []*Sampler
	s.lock(lkSamplers)
	for _, sm := range s.samplers.m {
		if !sm.Closed && sm.ModelPath == path && sm.Tenant != owner {
			sm.ClosedWhy = withdrawn(path)
			victims = append(victims, sm)
		}
	}
	s.unlock(lkSamplers)
	for _, sm := range victims {
		s.closeSampler(ctx, sm)
		s.log.InfoContext(ctx, "sampling session closed: its checkpoint was withdrawn by its owner", "sampler", sm.ID, "checkpoint", path)
	}
}

func withdrawn(path string) string {
	return "checkpoint " + path + " is no longer published (or was deleted) by its owner"
}

// closedError is the 404 for a sample on a closed sampling session, saying why it closed.
func closedError(sm *Sampler) error {
	why := sm.ClosedWhy
	if why == "" {
		why = "its session expired or its run was unloaded"
	}
	return notFoundf("sampling session %s is closed (%s)", sm.ID, why)
}
