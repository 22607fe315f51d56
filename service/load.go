package service

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/telemetry"
)

// CreateFromCheckpointInput is load_weights in its create-via-load form (SDK >= 0.38, and
// 0.24.1-0.36 when the server advertises it): session_id and model_seq_id, no model_id.
type CreateFromCheckpointInput struct {
	SessionID  string
	ModelSeqID int64
	Path       string // tinker:// checkpoint
	Optimizer  bool   // restore the checkpoint's optimizer state too
	// BaseModel overrides the checkpoint's base model; it must be compatible (the same
	// weights and architecture, e.g. served under another name or context length).
	BaseModel string
	// OptimizerConfig is the optimizer family of a weights-only load ("" = adamw); with
	// Optimizer set it must match the restored state.
	OptimizerConfig string
	UserMetadata    map[string]any
	PayloadHash     string
}

// CreateFromCheckpoint creates the training run "{session}:train:{model_seq_id}" from a
// checkpoint: LoRA rank and targets, base model and (with Optimizer) optimizer state come
// from it. The load is the run's seq_id 0, so its next operation is seq_id 1, as the SDK
// expects. A retry with the same payload returns the same request id.
func (s *Service) CreateFromCheckpoint(ctx context.Context, tenant string, in CreateFromCheckpointInput) (requestID, runID string, err error) {
	if in.ModelSeqID < 0 {
		return "", "", invalidf("model_seq_id %d must not be negative", in.ModelSeqID)
	}
	if err := checkOptimizer(in.OptimizerConfig); err != nil {
		return "", "", err
	}
	runID = RunID(in.SessionID, in.ModelSeqID)

	fetched := s.fetchCheckpoint(in.Path)
	s.lock(lkSessions | lkRuns | lkCkpts)
	if _, err := s.liveSession(tenant, in.SessionID); err != nil {
		s.unlock(lkSessions | lkRuns | lkCkpts)
		return "", "", s.settle(err)
	}
	if r, ok := s.runs.get(runID); ok {
		payload, reqID := r.CreatePayload, r.RequestID
		s.unlock(lkSessions | lkRuns | lkCkpts)
		if payload == in.PayloadHash && reqID != "" {
			return reqID, runID, nil // a retried load
		}
		return "", "", conflictf("training run %s already exists (model_seq_id %d is taken)", runID, in.ModelSeqID)
	}
	c, err := s.ckpts.resolve(tenant, in.Path, fetched)
	if err == nil {
		err = notAnExport(c, in.Path)
	}
	if err != nil {
		s.unlock(lkSessions | lkRuns | lkCkpts)
		return "", "", err
	}
	src := *c
	s.unlock(lkSessions | lkRuns | lkCkpts)
	if src.Tenant != tenant {
		s.auditCheckpoint(ctx, tenant, AuditCheckpointRead, &src, map[string]any{"purpose": "create_model", "into_model_id": runID})
	}

	base := src.BaseModel
	if in.BaseModel != "" && in.BaseModel != base {
		want, okWant := s.models[in.BaseModel]
		have, okHave := s.models[base]
		switch {
		case !okWant:
			return "", "", invalidf("base_model %q is not served here; available: %v", in.BaseModel, s.modelNames())
		case !okHave || want.Signature != have.Signature:
			return "", "", invalidf("base_model %q is not compatible with checkpoint %s, which was trained on %q (different weights or architecture)", in.BaseModel, in.Path, base)
		}
		base = in.BaseModel
	}
	if _, ok := s.models[base]; !ok {
		return "", "", invalidf("checkpoint %s was trained on %q, which is not served here; available: %v", in.Path, base, s.modelNames())
	}
	if mc, _ := s.cfg.Model(base); src.Lora.Rank > mc.MaxLoraRank {
		return "", "", invalidf("checkpoint %s has LoRA rank %d, more than max_lora_rank %d of %s", in.Path, src.Lora.Rank, mc.MaxLoraRank, base)
	}
	optimizer := in.OptimizerConfig
	if in.Optimizer {
		if src.Type != CkptTraining {
			return "", "", invalidf("checkpoint %s is a sampler checkpoint and holds no optimizer state; load it with optimizer=false or use a weights/ checkpoint", in.Path)
		}
		if weightsOnly(tenant, &src) {
			return "", "", optimizerNotShared(in.Path, &src)
		}
		if optimizer != "" && optimizer != src.OptimizerOf() {
			return "", "", invalidf("optimizer_config %q cannot override the %s optimizer state restored from %s", optimizer, src.OptimizerOf(), in.Path)
		}
		optimizer = src.OptimizerOf()
	}
	optimizer = familyOr(optimizer)

	md, err := NewMetadata(in.UserMetadata)
	if err != nil {
		return "", "", err
	}
	s.lock(quotaLocks)
	if _, ok := s.runs.get(runID); ok { // created meanwhile
		s.unlock(quotaLocks)
		return "", "", conflictf("training run %s already exists (model_seq_id %d is taken)", runID, in.ModelSeqID)
	}
	if err := s.checkNewRun(tenant, base, src.Lora.engine(), md); err != nil {
		s.unlock(quotaLocks)
		return "", "", err
	}
	now := s.now()
	r := &Run{ID: runID, State: RunCreating, Owner: s.self, Tenant: tenant, SessionID: in.SessionID, ModelSeqID: in.ModelSeqID, BaseModel: base,
		Lora: src.Lora, UserMetadata: md, CreatedAt: now, LastRequestTime: now, NextSeq: 1, CreatePayload: in.PayloadHash,
		Optimizer: optimizer, LoadedFrom: &LoadSource{Path: in.Path, Dir: src.Dir, Optimizer: in.Optimizer}}
	s.runs.put(r)
	s.unlock(quotaLocks)

	s.fut.SetNextSeq(runID, 0)
	id, err := s.fut.Submit(ctx, futures.Task{
		Tenant: tenant, QueueKey: runID, Ordered: true, SeqID: 0, OpType: telemetry.OpLoadWeights,
		ModelID: runID, Pool: base, PayloadHash: in.PayloadHash,
		// The task reads r.ID, not runID: a named result, written by the return below while
		// the task may already run.
		Run: func(ctx context.Context) (futures.Result, error) {
			ctx = telemetry.WithKeys(ctx, s.corrKeys(r, telemetry.OpLoadWeights))
			ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeTrainingController), telemetry.SpanTCLoadCheckpoint,
				attribute.String(telemetry.AttrCheckpointType, src.Type), attribute.Int64(telemetry.AttrSeqID, 0),
				attribute.String(telemetry.AttrOptimizerFamily, r.OptimizerOf()))
			err := s.be.LoadState(ctx, base, r.ID, src.Dir, in.Optimizer, r.optimizer())
			if err == nil {
				// The loaded state is what a restart (or a worker that lost it) restores.
				err = s.autosave(ctx, r, 0)
			}
			if err == nil {
				s.lock(lkRuns)
				if r.State == RunCreating { // not unloaded meanwhile
					r.State = RunReady
				}
				c := *r
				s.unlock(lkRuns)
				err = putJSON(ctx, s.st, keyRun+r.ID, &c)
				s.tel.Instruments.TrainingModelsActive.Add(ctx, 1, metric.WithAttributes(attribute.String(telemetry.MAttrBaseModel, base)))
			}
			telemetry.End(sp, err)
			if err != nil {
				return futures.Result{}, classify(err)
			}
			return s.enc.LoadWeights(in.Path, r.ID)
		},
	})
	return s.settleCreation(ctx, r, id, err)
}

// settles reports whether an operation refused with cause has used up its seq_id: the
// SDK raises a refusal it does not retry and sends its next operation with the next
// seq_id. Retried answers (429, 5xx) and refusals because the seq_id is already taken or
// executed keep it.
func settles(cause error) bool {
	var se *futures.SeqError
	var ce *futures.ConflictError
	if errors.As(cause, &se) || errors.As(cause, &ce) {
		return false
	}
	switch KindOf(cause) {
	case KindInvalid, KindNotFound, KindConflict, KindForbidden, KindTooLarge: // quotas (403, 413): not retried
		return true
	}
	return false
}

// Refused settles the seq_id of a training operation refused at submission (its meta
// names the run and seq_id), so the run's next operation runs as soon as the earlier ones
// are done instead of waiting for a seq_id the SDK never sends again. The refusal is
// recorded as a failed future with cause's message. It returns an ElsewhereError when the
// run belongs to another API replica (the caller forwards the request there, which
// refuses and settles it itself), and nil otherwise, also when there is nothing to settle.
func (s *Service) Refused(ctx context.Context, tenant string, m OpMeta, op string, cause error) error {
	if !settles(cause) || m.ModelID == "" {
		return nil
	}
	s.lock(lkRuns)
	r, err := s.runs.owned(tenant, m.ModelID)
	var pool string
	if err == nil {
		pool = r.BaseModel
	}
	s.unlock(lkRuns)
	err = s.settle(err)
	var ee *ElsewhereError
	if errors.As(err, &ee) {
		return err
	}
	if err != nil {
		return nil // no such run of this tenant: no queue to settle
	}
	id, err := s.fut.Refuse(ctx, futures.Task{Tenant: tenant, QueueKey: m.ModelID, Ordered: true, SeqID: m.SeqID, OpType: op,
		ModelID: m.ModelID, Pool: pool, PayloadHash: m.PayloadHash, InOrder: m.InOrder},
		futures.Failure{Message: cause.Error(), Category: futures.CategoryUser})
	if err != nil {
		s.log.WarnContext(ctx, "could not settle the seq_id of a refused operation", "run", m.ModelID, "seq_id", m.SeqID, "error", err)
	} else if id != "" {
		s.log.DebugContext(ctx, "seq_id of a refused operation settled", "run", m.ModelID, "seq_id", m.SeqID, "request_id", id)
	}
	return nil
}
