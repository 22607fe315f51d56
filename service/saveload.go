package service

import (
	"context"
	"encoding/json"
	"os"
	"time"

	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// save_weights, save_weights_for_sampler and load_weights on an existing run, and the
// resolution of tinker:// paths to checkpoint records.

// SaveInput is save_weights / save_weights_for_sampler.
type SaveInput struct {
	OpMeta
	Name       string // "" for the ephemeral sampler form
	TTLSeconds *int64
	Overwrite  bool
	Sampler    bool   // save_weights_for_sampler
	SamplerSeq *int64 // sampling_session_seq_id: the ephemeral form creates a sampling session
	// UserMetadata is stored with the checkpoint, replacing the old one on overwrite.
	UserMetadata map[string]string
	// Inflight (the ephemeral form only, SDK 0.38's kind="inflight") publishes the
	// weights to the run's shared inflight target instead of a snapshot: see inflight.go.
	Inflight bool
}

// Save queues a checkpoint save.
func (s *Service) Save(ctx context.Context, tenant string, in SaveInput) (string, error) {
	typ, op := CkptTraining, telemetry.OpSaveWeights
	if in.Sampler {
		typ, op = CkptSampler, telemetry.OpSaveWeightsForSampler
	}
	ephemeral := in.Sampler && in.Name == ""
	if ephemeral && in.SamplerSeq == nil {
		return "", invalidf("save_weights_for_sampler needs a path (checkpoint name) or sampling_session_seq_id")
	}
	if ephemeral && in.UserMetadata != nil {
		return "", invalidf("user_metadata is stored with a named checkpoint: give a path, or leave user_metadata out of the ephemeral save")
	}
	if in.Inflight && !ephemeral {
		return "", invalidf("kind \"inflight\" applies to save_weights_and_get_sampling_client (sampling_session_seq_id, no path): a named sampler checkpoint is a snapshot")
	}
	if ephemeral && in.TTLSeconds != nil {
		return "", invalidf("ttl_seconds applies to a named checkpoint: give a path, or leave ttl_seconds out of the ephemeral save")
	}
	if !ephemeral {
		if err := validCheckpointName(in.Name); err != nil {
			return "", err
		}
	}
	if err := validTTL(in.TTLSeconds); err != nil {
		return "", err
	}
	s.lock(quotaLocks | lkSamplers)
	r, err := s.usableRun(tenant, in.ModelID)
	if err == nil && !ephemeral && !in.Overwrite {
		if _, exists := s.ckpts.get(r.ID, ckptKindDir(typ)+"/"+in.Name); exists {
			err = conflictf("checkpoint %s/%s already exists in run %s; choose another name", ckptKindDir(typ), in.Name, r.ID)
		}
	}
	if err == nil {
		err = s.checkSaveQuota(r, in, typ, ephemeral)
	}
	s.unlock(quotaLocks | lkSamplers)
	if err == nil && !in.Inflight {
		err = s.checkDisk(tenant, s.saveBytes(r, typ == CkptTraining), op)
	}
	if err != nil {
		return "", s.settle(err)
	}
	return s.submitRunOp(ctx, tenant, in.OpMeta, op, func(ctx context.Context, r *Run) (futures.Result, error) {
		kind := SamplerSnapshot
		if in.Inflight {
			kind = SamplerInflight
		}
		attrs := []attribute.KeyValue{attribute.String(telemetry.AttrCheckpointType, typ), attribute.Int64(telemetry.AttrSeqID, in.SeqID)}
		if in.Sampler {
			attrs = append(attrs, attribute.String(telemetry.AttrSamplerKind, kind))
		}
		ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeTrainingController), telemetry.SpanTCSaveCheckpoint, attrs...)
		res, err := s.doSave(ctx, r, in, typ, ephemeral)
		telemetry.End(sp, err)
		return res, err
	})
}

func (s *Service) doSave(ctx context.Context, r *Run, in SaveInput, typ string, ephemeral bool) (futures.Result, error) {
	if ephemeral {
		if err := s.makeRoomForEphemeral(ctx, r, SamplerID(r.SessionID, *in.SamplerSeq)); err != nil {
			return futures.Result{}, err
		}
	}
	if ephemeral && in.Inflight {
		dir, err := s.publishInflight(ctx, r)
		if err != nil {
			return futures.Result{}, err
		}
		sm, err := s.newSampler(ctx, r.Tenant, r.SessionID, *in.SamplerSeq, r.BaseModel, "", dir, r.ID, true, true)
		if err != nil {
			return futures.Result{}, err
		}
		return s.enc.SaveWeightsForSampler("", sm.ID)
	}
	release, err := s.reserveDisk(r.Tenant, r.ID, s.saveBytes(r, typ == CkptTraining), "this save")
	if err != nil {
		return futures.Result{}, err
	}
	defer release()
	if ephemeral {
		s.lock(lkRuns)
		r.EphemeralCount++
		n := r.EphemeralCount
		s.unlock(lkRuns)
		dir := s.ckpts.layout().ephemeralDir(r.ID, n)
		if err := s.onAdapter(ctx, r, func() error { return s.be.SaveState(ctx, r.BaseModel, r.ID, dir, false) }); err != nil {
			_ = os.RemoveAll(dir)
			return futures.Result{}, err
		}
		sm, err := s.newSampler(ctx, r.Tenant, r.SessionID, *in.SamplerSeq, r.BaseModel, "", dir, r.ID, true, false)
		if err != nil {
			_ = os.RemoveAll(dir) // no sampler uses them
			return futures.Result{}, err
		}
		return s.enc.SaveWeightsForSampler("", sm.ID)
	}
	dir := s.ckpts.layout().ckptDir(r.ID, typ, in.Name)
	if err := s.onAdapter(ctx, r, func() error { return s.be.SaveState(ctx, r.BaseModel, r.ID, dir, typ == CkptTraining) }); err != nil {
		return futures.Result{}, err
	}
	now := s.now()
	c := &Checkpoint{RunID: r.ID, Tenant: r.Tenant, Type: typ, Name: in.Name, Dir: dir, CreatedAt: now,
		SizeBytes: dirSize(dir), SeqID: in.SeqID, BaseModel: r.BaseModel, Lora: r.Lora, UserMetadata: in.UserMetadata, Optimizer: r.OptimizerOf()}
	if in.TTLSeconds != nil {
		t := now.Add(time.Duration(*in.TTLSeconds) * time.Second)
		c.ExpiresAt = &t
	}
	if err := putJSON(ctx, s.st, ckptKey(r.ID, typ, in.Name), c); err != nil {
		return futures.Result{}, err
	}
	s.lock(lkRuns | lkCkpts)
	s.ckpts.put(c)
	if typ == CkptTraining {
		r.LastCheckpoint = c.ID()
	} else {
		r.LastSamplerCkpt = c.ID()
	}
	s.unlock(lkRuns | lkCkpts)
	attrs := []attribute.KeyValue{attribute.String(telemetry.MAttrBaseModel, r.BaseModel), attribute.String(telemetry.MAttrCheckpointType, typ)}
	if s.tel.Instruments.ModelIDAttribute {
		attrs = append(attrs, attribute.String(telemetry.MAttrModelID, r.ID))
	}
	s.tel.Instruments.TrainingCheckpointsSaved.Add(ctx, 1, metric.WithAttributes(attrs...))
	s.tel.Instruments.TrainingCheckpointSize.Record(ctx, c.SizeBytes, metric.WithAttributes(attrs...))
	event := AuditCheckpointSave
	if typ == CkptSampler {
		event = AuditCheckpointSaveForSampler
	}
	s.auditCheckpoint(ctx, r.Tenant, event, c, map[string]any{"seq_id": in.SeqID, "size_bytes": c.SizeBytes})
	if typ == CkptSampler {
		return s.enc.SaveWeightsForSampler(c.TinkerPath(), "")
	}
	return s.enc.SaveWeights(c.TinkerPath())
}

// LoadInput is load_weights on an existing run (the legacy form: model_id and seq_id).
type LoadInput struct {
	OpMeta
	Path      string
	Optimizer bool
}

// Load queues load_weights: the run's adapter (and optionally optimizer) become the
// checkpoint's.
func (s *Service) Load(ctx context.Context, tenant string, in LoadInput) (string, error) {
	fetched := s.fetchCheckpoint(in.Path)
	s.lock(lkSessions | lkRuns | lkCkpts)
	r, err := s.usableRun(tenant, in.ModelID)
	var c *Checkpoint
	if err == nil {
		c, err = s.ckpts.resolve(tenant, in.Path, fetched)
	}
	if err == nil {
		err = notAnExport(c, in.Path)
	}
	if err == nil {
		switch {
		case c.BaseModel != r.BaseModel:
			err = invalidf("checkpoint %s was trained on %s, but run %s uses %s", in.Path, c.BaseModel, r.ID, r.BaseModel)
		case !c.Lora.sameShape(r.Lora):
			err = invalidf("checkpoint %s has LoRA rank %d (attn %v, mlp %v, unembed %v) but run %s has rank %d (attn %v, mlp %v, unembed %v)",
				in.Path, c.Lora.Rank, c.Lora.TrainAttn, c.Lora.TrainMLP, c.Lora.TrainUnembed, r.ID, r.Lora.Rank, r.Lora.TrainAttn, r.Lora.TrainMLP, r.Lora.TrainUnembed)
		case in.Optimizer && c.Type != CkptTraining:
			err = invalidf("checkpoint %s is a sampler checkpoint and holds no optimizer state; load it with optimizer=false or use a weights/ checkpoint", in.Path)
		case in.Optimizer && weightsOnly(tenant, c):
			err = optimizerNotShared(in.Path, c)
		case in.Optimizer && c.OptimizerOf() != r.OptimizerOf():
			err = invalidf("checkpoint %s holds %s optimizer state, but run %s uses the %s optimizer", in.Path, c.OptimizerOf(), r.ID, r.OptimizerOf())
		}
	}
	s.unlock(lkSessions | lkRuns | lkCkpts)
	if err != nil {
		return "", s.settle(err)
	}
	return s.submitRunOp(ctx, tenant, in.OpMeta, telemetry.OpLoadWeights, func(ctx context.Context, r *Run) (futures.Result, error) {
		ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeTrainingController), telemetry.SpanTCLoadCheckpoint,
			attribute.String(telemetry.AttrCheckpointType, c.Type), attribute.Int64(telemetry.AttrSeqID, in.SeqID))
		err := s.be.LoadState(ctx, r.BaseModel, r.ID, c.Dir, in.Optimizer, r.optimizer())
		if err == nil {
			// The loaded state is the run's state now: make it what a restart restores.
			// It replaces the gradients too (with none): whatever a restart lost no
			// longer matters.
			if err = s.autosave(ctx, r, in.SeqID); err == nil {
				err = s.clearGrads(ctx, r)
			}
		}
		telemetry.End(sp, err)
		if err != nil {
			return futures.Result{}, err
		}
		if c.Tenant != tenant {
			s.auditCheckpoint(ctx, tenant, AuditCheckpointRead, c, map[string]any{"purpose": "load_weights", "into_model_id": r.ID})
		}
		return s.enc.LoadWeights(in.Path, r.ID)
	})
}

// fetchCheckpoint reads the record of the checkpoint path names from the store when this
// replica does not hold it (saved through another replica after this one started), for
// ckptCtl.resolve; nil for a single server, a held record or none. Callers hold no
// controller lock.
func (s *Service) fetchCheckpoint(path string) *Checkpoint {
	if s.self == "" {
		return nil
	}
	runID, kind, name, err := ParseTinkerPath(path)
	if err != nil {
		return nil
	}
	s.lock(lkCkpts)
	_, held := s.ckpts.get(runID, kind+"/"+name)
	s.unlock(lkCkpts)
	if held {
		return nil
	}
	b, err := s.st.Get(context.Background(), ckptKey(runID, ckptType(kind), name))
	if err != nil {
		return nil
	}
	var c Checkpoint
	if json.Unmarshal(b, &c) != nil {
		return nil
	}
	return &c
}
