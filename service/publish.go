package service

import (
	"context"
)

// Publishing semantics. A published checkpoint is readable by every tenant: load_weights
// copies it into the reader's run, and create_sampling_session opens a sampler that reads
// it. Unpublishing (or deleting) withdraws it: every sampler another tenant opened from
// it stops at once (its next asample is a 404), and stays stopped across restarts (each
// asample and each restore checks that its checkpoint is still visible to its tenant).
// Copies already made by load_weights belong to the runs that made them. Another tenant
// loads a published checkpoint's weights only: loading it with the optimizer is a 400
// (weightsOnly), so the owner's optimizer moments never enter a reader's run, nor the
// checkpoints the reader saves and downloads from it.
//
// A copy made by copy_weights of another tenant's published checkpoint is not the
// copier's to share or keep (issue 22, finding 10): it holds the weights only (no
// optimizer state), and it inherits the original's publication (Checkpoint.CopyOf).
// While the original is published the copier reads, samples, loads (weights only) and
// downloads the copy; once the owner unpublishes or deletes it, every one of those is a
// 404 that says the checkpoint is no longer published, the copier's samplers opened from
// the copy stop, and the copier can never publish the copy itself.

// weightsOnly reports whether tenant may load c's weights only: c is another tenant's
// published checkpoint, or a copy of one. A published checkpoint shares its weights; its
// optimizer moments are its owner's training state (they follow the owner's gradients),
// and a reader who loaded them could save them into a checkpoint of its own and download
// them. Loading such a checkpoint with the optimizer is refused (optimizerNotShared)
// rather than silently reduced to its weights: a caller that asked to resume an optimizer
// learns that it did not (neither the Tinker SDK conformance suite nor the cookbook
// resumes another tenant's optimizer).
func weightsOnly(tenant string, c *Checkpoint) bool {
	return c.CopyOf != "" || c.Tenant != tenant
}

// optimizerNotShared is the 400 for loading the optimizer state of a checkpoint that
// shares its weights only (weightsOnly).
func optimizerNotShared(path string, c *Checkpoint) error {
	if c.CopyOf != "" {
		return invalidf("checkpoint %s is a copy of %s, another tenant's published checkpoint, and holds its weights only (no optimizer state): "+
			"load it without the optimizer (create_training_client_from_state, load_state)", path, c.CopyOf)
	}
	return invalidf("checkpoint %s is another tenant's published checkpoint: it shares its weights only, its optimizer state is its owner's; "+
		"load it without the optimizer (create_training_client_from_state, load_state)", path)
}

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
	live := s.samplers.at(sm.ID)
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
	paths := map[string]bool{path: true} // and the copies that inherit its publication
	s.lock(lkCkpts)
	for c := range s.ckpts.all() {
		if c.CopyOf == path {
			paths[c.TinkerPath()] = true
		}
	}
	s.unlock(lkCkpts)
	var victims []*Sampler
	s.lock(lkSamplers)
	for sm := range s.samplers.all() {
		if !sm.Closed && paths[sm.ModelPath] && sm.Tenant != owner {
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

const withdrawnWhat = "no longer published (or was deleted) by its owner"

func withdrawn(path string) string {
	return "checkpoint " + path + " is " + withdrawnWhat
}

// closedError is the 404 for a sample on a closed sampling session, saying why it closed.
func closedError(sm *Sampler) error {
	why := sm.ClosedWhy
	if why == "" {
		why = "its session expired or its run was unloaded"
	}
	return notFoundf("sampling session %s is closed (%s)", sm.ID, why)
}
