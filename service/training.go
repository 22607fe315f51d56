package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/telemetry"
)

// ResultEncoder turns operation results into the bytes a future stores. The HTTP layer
// implements it with the wire types, so they are defined in one place.
type ResultEncoder interface {
	CreateModel(modelID string) (futures.Result, error)
	UnloadModel(modelID string) (futures.Result, error)
	ForwardBackward(res engine.ForwardResult, lossFn string) (futures.Result, error)
	OptimStep(metrics map[string]float64) (futures.Result, error)
	SaveWeights(path string) (futures.Result, error)
	SaveWeightsForSampler(path, samplingSessionID string) (futures.Result, error)
	LoadWeights(path, modelID string) (futures.Result, error)
	Sample(res engine.SampleResult) (futures.Result, error)
}

// OpMeta identifies an operation on a training run.
type OpMeta struct {
	ModelID     string
	SeqID       int64
	PayloadHash string
	// InOrder: the client sends this run's seq_ids one after another (the Tinker SDK), so
	// a lower seq_id that has not arrived never will (see futures.Task.InOrder).
	InOrder bool
}

// CreateModelInput is what create_model carries.
type CreateModelInput struct {
	SessionID    string
	ModelSeqID   int64
	BaseModel    string
	Lora         engine.LoraConfig
	UserMetadata map[string]any
	PayloadHash  string
	// Optimizer is the optimizer family fixed for the run's lifetime ("" = adamw).
	Optimizer string
}

func (s *Service) corrKeys(r *Run, op string) telemetry.Keys {
	return telemetry.Keys{SessionID: r.SessionID, TrainingRunID: r.ID, OperationType: op, BaseModel: r.BaseModel, LoraRank: r.Lora.Rank}
}

// CreateModel starts a training run; the adapter is created by the returned future.
func (s *Service) CreateModel(ctx context.Context, tenant string, in CreateModelInput, enc ResultEncoder) (requestID, runID string, err error) {
	_, ok := s.models[in.BaseModel]
	if !ok {
		return "", "", invalidf("base_model %q is not served here; available: %v", in.BaseModel, s.modelNames())
	}
	mc, _ := s.cfg.Model(in.BaseModel)
	if in.Lora.Rank < 1 || in.Lora.Rank > mc.MaxLoraRank {
		return "", "", invalidf("lora_config.rank %d must be in [1, %d] for %s", in.Lora.Rank, mc.MaxLoraRank, in.BaseModel)
	}
	if !in.Lora.TrainAttn && !in.Lora.TrainMLP && !in.Lora.TrainUnembed {
		return "", "", invalidf("lora_config: at least one of train_attn, train_mlp, train_unembed must be true")
	}
	if in.ModelSeqID < 0 {
		return "", "", invalidf("model_seq_id %d must not be negative", in.ModelSeqID)
	}
	if err := checkOptimizer(in.Optimizer); err != nil {
		return "", "", err
	}
	in.Lora.Alpha = float64(in.Lora.Rank) * mc.LoraAlphaRatio
	runID = fmt.Sprintf("%s:train:%d", in.SessionID, in.ModelSeqID)
	md, err := NewMetadata(in.UserMetadata)
	if err != nil {
		return "", "", err
	}

	s.mu.Lock()
	if _, err := s.liveSession(tenant, in.SessionID); err != nil {
		s.mu.Unlock()
		return "", "", err
	}
	if r, ok := s.runs[runID]; ok {
		s.mu.Unlock()
		if r.CreatePayload == in.PayloadHash && r.RequestID != "" {
			return r.RequestID, runID, nil // a retried create_model
		}
		return "", "", conflictf("training run %s already exists (model_seq_id %d was used by another create_model)", runID, in.ModelSeqID)
	}
	if err := s.checkNewRun(tenant, in.BaseModel, in.Lora, md); err != nil {
		s.mu.Unlock()
		return "", "", err
	}
	now := s.now()
	r := &Run{ID: runID, Owner: s.self, Tenant: tenant, SessionID: in.SessionID, ModelSeqID: in.ModelSeqID, BaseModel: in.BaseModel,
		Lora: in.Lora, UserMetadata: md, CreatedAt: now, LastRequestTime: now, NextSeq: 1, CreatePayload: in.PayloadHash,
		Optimizer: familyOr(in.Optimizer)}
	s.runs[runID] = r
	s.mu.Unlock()

	s.fut.SetNextSeq(runID, 0)
	id, err := s.submit(ctx, futures.Task{
		Tenant: tenant, QueueKey: runID, Ordered: true, SeqID: 0, OpType: telemetry.OpCreateModel,
		ModelID: runID, Pool: in.BaseModel, PayloadHash: in.PayloadHash,
		Run: func(ctx context.Context) (futures.Result, error) {
			ctx = telemetry.WithKeys(ctx, s.corrKeys(r, telemetry.OpCreateModel))
			ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeTrainingController), telemetry.SpanTCCreateModel,
				attribute.String(telemetry.AttrOptimizerFamily, r.OptimizerOf()))
			err := s.be.CreateAdapter(ctx, r.BaseModel, r.ID, r.adapterConfig())
			if err == nil {
				s.mu.Lock()
				r.Ready, r.Loaded = true, true
				c := *r
				s.mu.Unlock()
				err = putJSON(ctx, s.st, keyRun+r.ID, &c)
				s.tel.Instruments.TrainingModelsActive.Add(ctx, 1, metric.WithAttributes(attribute.String(telemetry.MAttrBaseModel, r.BaseModel)))
			}
			telemetry.End(sp, err)
			if err != nil {
				return futures.Result{}, classify(err)
			}
			return enc.CreateModel(r.ID)
		},
	})
	if err != nil {
		s.mu.Lock()
		delete(s.runs, runID)
		s.mu.Unlock()
		return "", "", s.submitError(err)
	}
	s.mu.Lock()
	r.RequestID = id
	c := *r
	s.mu.Unlock()
	if err := putJSON(ctx, s.st, keyRun+runID, &c); err != nil {
		return "", "", classify(err)
	}
	return id, runID, nil
}

func (s *Service) modelNames() []string {
	out := make([]string, 0, len(s.models))
	for _, m := range s.Models() {
		out = append(out, m.Name)
	}
	return out
}

// submitError maps futures' submission errors to service errors.
func (s *Service) submitError(err error) error {
	var ce *futures.ConflictError
	var ol *futures.OverLimitError
	var se *futures.SeqError
	switch {
	case errors.As(err, &ce):
		return &Error{Kind: KindConflict, Msg: err.Error(), Err: err}
	case errors.As(err, &se):
		return &Error{Kind: KindConflict, Msg: err.Error(), Err: err}
	case errors.As(err, &ol):
		return &Error{Kind: KindTooMany, Msg: err.Error(), RetryAfter: ol.RetryAfter, Err: err}
	case errors.Is(err, futures.ErrShuttingDown):
		return &Error{Kind: KindUnavailable, Msg: "the server is shutting down; retry against its replacement", Err: err}
	}
	return classify(err)
}

// ownedRun returns the tenant's run (callers hold s.mu).
func (s *Service) ownedRun(tenant, id string) (*Run, error) {
	r, ok := s.runs[id]
	if !ok || r.Tenant != tenant {
		if err := s.elsewhere(keyRun+id, tenant); err != nil {
			return nil, err
		}
		return nil, notFoundf("training run %q not found", id)
	}
	return r, nil
}

// usableRun is ownedRun that also refuses runs of finished sessions (410), unloaded and
// corrupted runs.
func (s *Service) usableRun(tenant, id string) (*Run, error) {
	r, err := s.ownedRun(tenant, id)
	if err != nil {
		return nil, err
	}
	if err := finishedErr(s.sessions[r.SessionID]); err != nil {
		return nil, err
	}
	switch {
	case r.Corrupted:
		return nil, &Error{Kind: KindConflict, Msg: fmt.Sprintf("training run %s is unusable: %s; create a new run from one of its checkpoints", id, r.Note)}
	case r.Unloaded:
		return nil, notFoundf("training run %s was unloaded (%s); create a new run from one of its checkpoints", id, r.Note)
	}
	return r, nil
}

// submitRunOp queues an ordered operation of a training run.
func (s *Service) submitRunOp(ctx context.Context, tenant string, m OpMeta, op string,
	run func(ctx context.Context, r *Run) (futures.Result, error)) (string, error) {
	s.mu.Lock()
	r, err := s.usableRun(tenant, m.ModelID)
	s.mu.Unlock()
	if err != nil {
		return "", err
	}
	id, err := s.submit(ctx, futures.Task{
		Tenant: tenant, QueueKey: r.ID, Ordered: true, SeqID: m.SeqID, OpType: op,
		ModelID: r.ID, Pool: r.BaseModel, PayloadHash: m.PayloadHash, InOrder: m.InOrder,
		Run: func(ctx context.Context) (futures.Result, error) {
			ctx = telemetry.WithKeys(ctx, s.corrKeys(r, op))
			s.mu.Lock()
			ok := r.Loaded && !r.Unloaded && !r.Corrupted
			note := r.Note
			s.mu.Unlock()
			var res futures.Result
			var err error
			if ok {
				res, err = run(ctx, r)
			} else {
				err = &Error{Kind: KindConflict, Msg: fmt.Sprintf("training run %s is not loaded: %s", r.ID, note)}
			}
			// The operation consumed its seq_id whether it succeeded or not.
			s.mu.Lock()
			r.LastRequestTime = s.now()
			if m.SeqID+1 > r.NextSeq {
				r.NextSeq = m.SeqID + 1
			}
			s.mu.Unlock()
			s.markDirty(r)
			return res, classify(err)
		},
	})
	if err != nil {
		return "", s.submitError(err)
	}
	return id, nil
}

// ForwardBackward queues forward or forward_backward (req.Backward) on a run.
func (s *Service) ForwardBackward(ctx context.Context, tenant string, m OpMeta, req engine.ForwardRequest, enc ResultEncoder) (string, error) {
	op, span := telemetry.OpForward, telemetry.SpanTCRunForward
	if req.Backward {
		op, span = telemetry.OpForwardBackward, telemetry.SpanTCRunForwardBackward
	}
	if err := s.checkBatch(tenant, m.ModelID, req); err != nil {
		return "", err
	}
	return s.submitRunOp(ctx, tenant, m, op, func(ctx context.Context, r *Run) (futures.Result, error) {
		ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeTrainingController), span,
			attribute.Bool(telemetry.AttrBackward, req.Backward), attribute.Int(telemetry.AttrDataCount, len(req.Data)),
			attribute.String(telemetry.AttrLossFn, req.LossFn), attribute.Int64(telemetry.AttrSeqID, m.SeqID))
		start := time.Now()
		var res engine.ForwardResult
		var err error
		if req.Backward {
			err = s.lostGrads(ctx, r)
		}
		if err == nil {
			err = s.onAdapter(ctx, r, func() (err error) {
				res, err = s.be.ForwardBackward(ctx, r.BaseModel, r.ID, req)
				return err
			})
		}
		if err == nil && req.Backward {
			err = s.setPendingGrads(ctx, r, true)
		}
		telemetry.End(sp, err)
		if err != nil {
			return futures.Result{}, err
		}
		if d := time.Since(start).Seconds(); d > 0 && res.Tokens > 0 {
			s.tel.Instruments.TrainingTokensPerSecond.Record(ctx, float64(res.Tokens)/d,
				telemetry.Attrs(telemetry.MAttrBaseModel, r.BaseModel))
		}
		return enc.ForwardBackward(res, req.LossFn)
	})
}

// checkBatch enforces the per-request limits before anything is queued.
func (s *Service) checkBatch(tenant, runID string, req engine.ForwardRequest) error {
	s.mu.Lock()
	r, err := s.usableRun(tenant, runID)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if len(req.Data) == 0 {
		return invalidf("forward_backward_input.data is empty")
	}
	mc, _ := s.cfg.Model(r.BaseModel)
	maxLen := s.models[r.BaseModel].MaxContextLength
	if mc.MaxContextLength > 0 && (maxLen == 0 || mc.MaxContextLength < maxLen) {
		maxLen = mc.MaxContextLength
	}
	total := 0
	for i, d := range req.Data {
		if maxLen > 0 && len(d.Tokens) > maxLen {
			return invalidf("data[%d]: %d tokens exceed max_context_length %d of %s", i, len(d.Tokens), maxLen, r.BaseModel)
		}
		total += len(d.Tokens)
	}
	if err := engine.ValidateForward(s.models[r.BaseModel].Config, req); err != nil {
		return classify(err)
	}
	if total > s.cfg.Limits.MaxTokensPerBatch {
		return invalidf("the batch has %d tokens, more than limits.max_tokens_per_batch %d; split it", total, s.cfg.Limits.MaxTokensPerBatch)
	}
	return nil
}

// OptimParams are one optim_step's hyper-parameters: the optimizer family they are for
// (it must be the run's) and that family's parameters (Adam's, or Dimuon's).
type OptimParams struct {
	Optimizer string // "" = adamw
	Adam      engine.AdamParams
	Dimuon    *engine.DimuonParams // set for the dimuon family
}

// OptimStep queues one step of the run's optimizer (AdamW or Dimuon); afterwards the
// adapter and optimizer state are autosaved so a crash loses no completed step.
func (s *Service) OptimStep(ctx context.Context, tenant string, m OpMeta, op OptimParams, enc ResultEncoder) (string, error) {
	op.Optimizer = familyOr(op.Optimizer)
	var p engine.StepParams
	switch op.Optimizer {
	case OptimizerAdamW:
		p.Adam = op.Adam
	case OptimizerDimuon:
		if op.Dimuon == nil {
			return "", invalidf("optimizer_params of type %q carry no parameters", op.Optimizer)
		}
		p.Dimuon = op.Dimuon
	default:
		return "", invalidf("optimizer_params.type %q is not supported: this server implements %q and %q", op.Optimizer, OptimizerAdamW, OptimizerDimuon)
	}
	s.mu.Lock()
	r, err := s.usableRun(tenant, m.ModelID)
	if err == nil && r.OptimizerOf() != op.Optimizer {
		err = invalidf("optim_step gives %s parameters (%s), but training run %s trains with the %s optimizer (%s); the optimizer is fixed when the run is created",
			op.Optimizer, paramsField(op.Optimizer), r.ID, r.OptimizerOf(), paramsField(r.OptimizerOf()))
	}
	s.mu.Unlock()
	if err != nil {
		return "", err
	}
	if err := p.Validate(); err != nil {
		return "", classify(err)
	}
	return s.submitRunOp(ctx, tenant, m, telemetry.OpOptimStep, func(ctx context.Context, r *Run) (futures.Result, error) {
		ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeTrainingController), telemetry.SpanTCRunOptimStep,
			attribute.Float64(telemetry.AttrLearningRate, p.LearningRate()), attribute.Int64(telemetry.AttrSeqID, m.SeqID),
			attribute.String(telemetry.AttrOptimizerFamily, p.Family()))
		var metrics map[string]float64
		err := s.lostGrads(ctx, r)
		if err == nil {
			err = s.onAdapter(ctx, r, func() (err error) {
				metrics, err = s.be.OptimStep(ctx, r.BaseModel, r.ID, p)
				return err
			})
		}
		if err == nil {
			// The reply and the state agree: a step whose result cannot be saved is
			// undone, so "failed" means "not applied".
			if aerr := s.autosave(ctx, r, m.SeqID); aerr != nil {
				err = s.undoStep(ctx, r, aerr)
			} else {
				err = s.setPendingGrads(ctx, r, false)
			}
		}
		telemetry.End(sp, err)
		if err != nil {
			return futures.Result{}, err
		}
		return enc.OptimStep(metrics)
	})
}

func (s *Service) autosave(ctx context.Context, r *Run, seq int64) error {
	if err := s.be.SaveState(ctx, r.BaseModel, r.ID, s.autosaveDir(r.ID), true); err != nil {
		return fmt.Errorf("autosave after optim_step: %w", err)
	}
	s.mu.Lock()
	r.AutosaveSeq, r.AutosaveAt = seq, s.now()
	s.mu.Unlock()
	return nil
}

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
func (s *Service) Save(ctx context.Context, tenant string, in SaveInput, enc ResultEncoder) (string, error) {
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
	s.mu.Lock()
	r, err := s.usableRun(tenant, in.ModelID)
	if err == nil && !ephemeral && !in.Overwrite {
		if _, exists := s.ckpts[r.ID][ckptKindDir(typ)+"/"+in.Name]; exists {
			err = conflictf("checkpoint %s/%s already exists in run %s; choose another name", ckptKindDir(typ), in.Name, r.ID)
		}
	}
	if err == nil {
		err = s.checkSaveQuota(r, in, typ, ephemeral)
	}
	s.mu.Unlock()
	if err == nil && !in.Inflight {
		err = s.checkDisk(tenant, s.saveBytes(r, typ == CkptTraining), op)
	}
	if err != nil {
		return "", err
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
		res, err := s.doSave(ctx, r, in, typ, ephemeral, enc)
		telemetry.End(sp, err)
		return res, err
	})
}

func (s *Service) doSave(ctx context.Context, r *Run, in SaveInput, typ string, ephemeral bool, enc ResultEncoder) (futures.Result, error) {
	if ephemeral {
		if err := s.makeRoomForEphemeral(ctx, r, fmt.Sprintf("%s:sample:%d", r.SessionID, *in.SamplerSeq)); err != nil {
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
		return enc.SaveWeightsForSampler("", sm.ID)
	}
	release, err := s.reserveDisk(r.Tenant, s.saveBytes(r, typ == CkptTraining), "this save")
	if err != nil {
		return futures.Result{}, err
	}
	defer release()
	if ephemeral {
		s.mu.Lock()
		r.EphemeralCount++
		n := r.EphemeralCount
		s.mu.Unlock()
		dir := s.ephemeralDir(r.ID, n)
		if err := s.onAdapter(ctx, r, func() error { return s.be.SaveState(ctx, r.BaseModel, r.ID, dir, false) }); err != nil {
			_ = os.RemoveAll(dir)
			return futures.Result{}, err
		}
		sm, err := s.newSampler(ctx, r.Tenant, r.SessionID, *in.SamplerSeq, r.BaseModel, "", dir, r.ID, true, false)
		if err != nil {
			_ = os.RemoveAll(dir) // no sampler uses them
			return futures.Result{}, err
		}
		return enc.SaveWeightsForSampler("", sm.ID)
	}
	dir := filepath.Join(s.runDir(r.ID), ckptKindDir(typ), in.Name)
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
	s.mu.Lock()
	if s.ckpts[r.ID] == nil {
		s.ckpts[r.ID] = map[string]*Checkpoint{}
	}
	s.ckpts[r.ID][c.ID()] = c
	if typ == CkptTraining {
		r.LastCheckpoint = c.ID()
	} else {
		r.LastSamplerCkpt = c.ID()
	}
	s.mu.Unlock()
	attrs := []attribute.KeyValue{attribute.String(telemetry.MAttrBaseModel, r.BaseModel), attribute.String(telemetry.MAttrCheckpointType, typ)}
	if s.tel.Instruments.ModelIDAttribute {
		attrs = append(attrs, attribute.String(telemetry.MAttrModelID, r.ID))
	}
	s.tel.Instruments.TrainingCheckpointsSaved.Add(ctx, 1, metric.WithAttributes(attrs...))
	s.tel.Instruments.TrainingCheckpointSize.Record(ctx, c.SizeBytes, metric.WithAttributes(attrs...))
	if typ == CkptSampler {
		return enc.SaveWeightsForSampler(c.TinkerPath(), "")
	}
	return enc.SaveWeights(c.TinkerPath())
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// LoadInput is load_weights on an existing run (the legacy form: model_id and seq_id).
type LoadInput struct {
	OpMeta
	Path      string
	Optimizer bool
}

// Load queues load_weights: the run's adapter (and optionally optimizer) become the
// checkpoint's.
func (s *Service) Load(ctx context.Context, tenant string, in LoadInput, enc ResultEncoder) (string, error) {
	s.mu.Lock()
	r, err := s.usableRun(tenant, in.ModelID)
	var c *Checkpoint
	if err == nil {
		c, err = s.resolvePath(tenant, in.Path)
	}
	if err == nil {
		err = notAnExport(c, in.Path)
	}
	if err == nil {
		switch {
		case c.BaseModel != r.BaseModel:
			err = invalidf("checkpoint %s was trained on %s, but run %s uses %s", in.Path, c.BaseModel, r.ID, r.BaseModel)
		case c.Lora.Rank != r.Lora.Rank || c.Lora.TrainAttn != r.Lora.TrainAttn || c.Lora.TrainMLP != r.Lora.TrainMLP || c.Lora.TrainUnembed != r.Lora.TrainUnembed:
			err = invalidf("checkpoint %s has LoRA rank %d (attn %v, mlp %v, unembed %v) but run %s has rank %d (attn %v, mlp %v, unembed %v)",
				in.Path, c.Lora.Rank, c.Lora.TrainAttn, c.Lora.TrainMLP, c.Lora.TrainUnembed, r.ID, r.Lora.Rank, r.Lora.TrainAttn, r.Lora.TrainMLP, r.Lora.TrainUnembed)
		case in.Optimizer && c.Type != CkptTraining:
			err = invalidf("checkpoint %s is a sampler checkpoint and holds no optimizer state; load it with optimizer=false or use a weights/ checkpoint", in.Path)
		case in.Optimizer && c.OptimizerOf() != r.OptimizerOf():
			err = invalidf("checkpoint %s holds %s optimizer state, but run %s uses the %s optimizer", in.Path, c.OptimizerOf(), r.ID, r.OptimizerOf())
		}
	}
	s.mu.Unlock()
	if err != nil {
		return "", err
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
		return enc.LoadWeights(in.Path, r.ID)
	})
}

// resolvePath finds the checkpoint a tinker:// path names, visible to tenant (its own or
// a published one). Callers hold s.mu.
func (s *Service) resolvePath(tenant, path string) (*Checkpoint, error) {
	runID, kind, name, err := ParseTinkerPath(path)
	if err != nil {
		return nil, err
	}
	c, ok := s.ckpts[runID][kind+"/"+name]
	if !ok && s.self != "" {
		// Saved through another replica after this one started: the record is in the store.
		c, ok = s.storedCheckpoint(runID, kind, name)
	}
	if !ok || (c.Tenant != tenant && !c.Public) {
		return nil, notFoundf("checkpoint %s not found", path)
	}
	if _, err := os.Stat(c.Dir); err != nil {
		return nil, notFoundf("checkpoint %s: its files are missing on the server", path)
	}
	return c, nil
}

// UnloadModel queues the removal of a run's adapter. Records and checkpoints stay.
func (s *Service) UnloadModel(ctx context.Context, tenant, runID string, enc ResultEncoder) (string, error) {
	s.mu.Lock()
	r, err := s.ownedRun(tenant, runID)
	s.mu.Unlock()
	if err != nil {
		return "", err
	}
	id, err := s.submit(ctx, futures.Task{
		Tenant: tenant, QueueKey: runID + "/unload", OpType: telemetry.OpUnloadModel, ModelID: runID, Pool: r.BaseModel,
		Run: func(ctx context.Context) (futures.Result, error) {
			ctx = telemetry.WithKeys(ctx, s.corrKeys(r, telemetry.OpUnloadModel))
			ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeTrainingController), telemetry.SpanTCUnloadModel)
			s.unload(ctx, r, "unload_model was called")
			telemetry.End(sp, nil)
			return enc.UnloadModel(runID)
		},
	})
	if err != nil {
		return "", s.submitError(err)
	}
	return id, nil
}

// unload removes a run's adapter and fails its queued operations.
func (s *Service) unload(ctx context.Context, r *Run, why string) {
	s.mu.Lock()
	was := r.Loaded
	r.Loaded, r.Unloaded, r.Note = false, true, why
	c := *r
	s.mu.Unlock()
	s.fut.DropQueue(r.ID, fmt.Sprintf("training run %s was unloaded: %s", r.ID, why))
	if was {
		if err := s.be.RemoveAdapter(ctx, r.BaseModel, r.ID); err != nil {
			s.log.Warn("remove adapter failed", "run", r.ID, "error", err)
		}
		if c.Inflight {
			if err := s.be.RemoveSamplerAdapter(ctx, r.BaseModel, inflightAdapterID(r.ID)); err != nil {
				s.log.Warn("remove inflight sampling adapter failed", "run", r.ID, "error", err)
			}
		}
		s.tel.Instruments.TrainingModelsActive.Add(ctx, -1, metric.WithAttributes(attribute.String(telemetry.MAttrBaseModel, r.BaseModel)))
	}
	if err := putJSON(ctx, s.st, keyRun+r.ID, &c); err != nil {
		s.log.Error("persist unloaded run", "run", r.ID, "error", err)
	}
}

// RunInfo is get_info's answer.
type RunInfo struct {
	ModelID   string
	BaseModel string
	Arch      string
	LoraRank  int
	Optimizer string
}

// GetInfo describes a training run.
func (s *Service) GetInfo(tenant, runID string) (RunInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.ownedRun(tenant, runID)
	if err != nil {
		return RunInfo{}, err
	}
	return RunInfo{ModelID: r.ID, BaseModel: r.BaseModel, Arch: s.models[r.BaseModel].Arch, LoraRank: r.Lora.Rank, Optimizer: r.OptimizerOf()}, nil
}

// onAdapter runs op on run r's adapter. A worker that restarted (or left, moving the
// run to another worker) no longer holds the adapter: when the executor answers that it
// is unknown although r is loaded, the adapter is restored from its latest saved state
// (the autosave after every optim_step, or a newer checkpoint) and op runs once more.
// If forward_backward had accumulated gradients since the last optim_step, they died
// with the worker: the operation then fails with an error that says so, rather than
// training silently on less.
func (s *Service) onAdapter(ctx context.Context, r *Run, op func() error) error {
	err := op()
	if err == nil || !errors.Is(err, backend.ErrUnknownAdapter) {
		return err
	}
	s.mu.Lock()
	loaded := r.Loaded && !r.Unloaded && !r.Corrupted
	lost := r.PendingGrads
	s.mu.Unlock()
	if !loaded {
		return err
	}
	dir, optimizer, from := s.latestState(r)
	if dir == "" {
		err = s.be.CreateAdapter(ctx, r.BaseModel, r.ID, r.adapterConfig()) // same seed: the same initial adapter
		from = "its initial state (it had no saved state)"
	} else {
		err = s.be.LoadState(ctx, r.BaseModel, r.ID, dir, optimizer, r.optimizer())
	}
	if err != nil {
		return &Error{Kind: KindInternal, Msg: fmt.Sprintf("the worker that held training run %s lost its adapter, and restoring it from %s failed: %v", r.ID, from, err), Err: err}
	}
	s.log.WarnContext(ctx, "adapter restored after its worker lost it", "run", r.ID, "from", from)
	if lost {
		if err := s.setPendingGrads(ctx, r, false); err != nil {
			return err
		}
		return &Error{Kind: KindInternal, Msg: fmt.Sprintf("the worker that held training run %s restarted or left; the adapter was restored from %s, "+
			"but the gradients accumulated by forward_backward since the last optim_step were lost: run those forward_backward calls again", r.ID, from)}
	}
	return op()
}

// storedCheckpoint reads a checkpoint record from the store (callers hold s.mu).
func (s *Service) storedCheckpoint(runID, kind, name string) (*Checkpoint, bool) {
	b, err := s.st.Get(context.Background(), ckptKey(runID, ckptType(kind), name))
	if err != nil {
		return nil, false
	}
	var c Checkpoint
	if json.Unmarshal(b, &c) != nil {
		return nil, false
	}
	return &c, true
}
