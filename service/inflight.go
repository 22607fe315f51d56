package service

import (
	"context"
)

// Inflight sampling (save_weights_and_get_sampling_client(kind="inflight"), SDK 0.38).
//
// The SDK's contract: every inflight sampling client of a training run refers to one
// mutable weights target; each inflight save updates that target for existing and new
// clients; a sample runs on the weights saved when its client was created, or newer;
// each client is a sampling session of its own (a fresh KV namespace).
//
// TuFT keeps one target per run, never a copy per save: the weights are written to the
// run's "_inflight" directory (replaced atomically, like every save) and loaded into one
// shared sampling adapter, "<run>/inflight", in the executor; the save returns only once
// both are done, so a client created by it, and every earlier one, samples these
// weights or later ones. Each inflight client is its own sampling session whose samples
// use the shared adapter. A generation in progress when the target is replaced finishes
// on the weights it started with (the executor swaps the adapter between requests). If
// the executor loses the adapter (a worker restarted), the next sample reloads it from
// the directory, which holds the newest save. The adapter is released when the run is
// (unload, session finished or expired).

// Sampler kinds (the values of the save's kind, telemetry.AttrSamplerKind).
const (
	SamplerSnapshot = "snapshot"
	SamplerInflight = "inflight"
)

// inflightAdapterID is the executor id of a run's shared inflight sampling adapter.
func inflightAdapterID(runID string) string { return runID + "/inflight" }

// publishInflight makes the run's current weights its inflight target: saved to the
// run's inflight directory and loaded into its shared sampling adapter. It runs as the
// run's operation (in seq_id order), so two publications never interleave.
func (s *Service) publishInflight(ctx context.Context, r *Run) (string, error) {
	dir := s.ckpts.layout().inflightDir(r.ID)
	err := s.onAdapter(ctx, r, func() error { return s.be.SaveState(ctx, r.BaseModel, r.ID, dir, false) })
	s.diskChanged(r.ID)
	if err != nil {
		return "", err
	}
	if err := s.be.AddSamplerAdapter(ctx, r.BaseModel, inflightAdapterID(r.ID), dir); err != nil {
		return "", err
	}
	s.lock(lkRuns)
	r.Inflight = true
	s.unlock(lkRuns)
	s.markDirty(r)
	return dir, nil
}
