package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/telemetry"
)

// ResultEncoder turns operation results into the bytes a future stores. The HTTP layer
// implements it with the wire types, so they are defined in one place; it is wired once,
// in Options.Encoder.
type ResultEncoder interface {
	CreateModel(modelID string) (futures.Result, error)
	UnloadModel(modelID string) (futures.Result, error)
	ForwardBackward(res engine.ForwardResult, lossFn string) (futures.Result, error)
	OptimStep(metrics map[string]float64) (futures.Result, error)
	SaveWeights(path string) (futures.Result, error)
	SaveWeightsForSampler(path, samplingSessionID string) (futures.Result, error)
	LoadWeights(path, modelID string) (futures.Result, error)
	Sample(res engine.SampleResult) (futures.Result, error)
	SaveWeightsExternal(res ExternalResult) (futures.Result, error)
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
func (s *Service) CreateModel(ctx context.Context, tenant string, in CreateModelInput) (requestID, runID string, err error) {
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
	runID = RunID(in.SessionID, in.ModelSeqID)
	md, err := NewMetadata(in.UserMetadata)
	if err != nil {
		return "", "", err
	}

	s.lock(quotaLocks)
	if _, err := s.liveSession(tenant, in.SessionID); err != nil {
		s.unlock(quotaLocks)
		return "", "", s.settle(err)
	}
	if r, ok := s.runs.get(runID); ok {
		payload, reqID := r.CreatePayload, r.RequestID
		s.unlock(quotaLocks)
		if payload == in.PayloadHash && reqID != "" {
			return reqID, runID, nil // a retried create_model
		}
		return "", "", conflictf("training run %s already exists (model_seq_id %d was used by another create_model)", runID, in.ModelSeqID)
	}
	if err := s.checkNewRun(tenant, in.BaseModel, in.Lora, md); err != nil {
		s.unlock(quotaLocks)
		return "", "", err
	}
	now := s.now()
	r := &Run{ID: runID, State: RunCreating, Owner: s.self, Tenant: tenant, SessionID: in.SessionID, ModelSeqID: in.ModelSeqID, BaseModel: in.BaseModel,
		Lora: loraRecord(in.Lora), UserMetadata: md, CreatedAt: now, LastRequestTime: now, NextSeq: 1, CreatePayload: in.PayloadHash,
		Optimizer: familyOr(in.Optimizer)}
	s.runs.put(r)
	s.unlock(quotaLocks)

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
				s.lock(lkRuns)
				if r.State == RunCreating { // not unloaded meanwhile
					r.State = RunReady
				}
				c := *r
				s.unlock(lkRuns)
				err = putJSON(ctx, s.st, keyRun+r.ID, &c)
				s.tel.Instruments.TrainingModelsActive.Add(ctx, 1, metric.WithAttributes(attribute.String(telemetry.MAttrBaseModel, r.BaseModel)))
			}
			telemetry.End(sp, err)
			if err != nil {
				return futures.Result{}, classify(err)
			}
			return s.enc.CreateModel(r.ID)
		},
	})
	return s.settleCreation(ctx, r, id, err)
}

// settleCreation finishes the submission of the operation that creates run r (create_model,
// or load_weights creating the run): refused, the run is taken back out; accepted, the
// run is stored with its request id.
func (s *Service) settleCreation(ctx context.Context, r *Run, id string, err error) (requestID, runID string, _ error) {
	if err != nil {
		s.lock(lkRuns)
		s.runs.del(r.ID)
		s.unlock(lkRuns)
		return "", "", s.submitError(err)
	}
	s.lock(lkRuns)
	r.RequestID = id
	c := *r
	s.unlock(lkRuns)
	if err := putJSON(ctx, s.st, keyRun+r.ID, &c); err != nil {
		return "", "", classify(err)
	}
	return id, r.ID, nil
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

// usableRun is runs.owned that also refuses runs of finished sessions (410), unloaded and
// corrupted runs (callers hold the sessions and runs locks).
func (s *Service) usableRun(tenant, id string) (*Run, error) {
	r, err := s.runs.owned(tenant, id)
	if err != nil {
		return nil, err
	}
	if err := finishedErr(s.sessions.at(r.SessionID)); err != nil {
		return nil, err
	}
	switch {
	case r.State == RunCorrupted:
		return nil, &Error{Kind: KindConflict, Msg: fmt.Sprintf("training run %s is unusable: %s; create a new run from one of its checkpoints", id, r.Note)}
	case r.State == RunUnloaded:
		return nil, notFoundf("training run %s was unloaded (%s); create a new run from one of its checkpoints", id, r.Note)
	}
	return r, nil
}

// submitRunOp queues an ordered operation of a training run with a blocking body.
func (s *Service) submitRunOp(ctx context.Context, tenant string, m OpMeta, op string,
	run func(ctx context.Context, r *Run) (futures.Result, error)) (string, error) {
	return s.submitRunTask(ctx, tenant, m, op, func(t *futures.Task, r *Run) {
		t.Run = func(ctx context.Context) (futures.Result, error) {
			ctx, err := s.runOpBegins(ctx, r, op)
			var res futures.Result
			if err == nil {
				res, err = run(ctx, r)
			}
			return s.runOpEnds(r, m, res, err)
		}
	})
}

// submitRunModelOp queues an ordered model operation of a training run: start hands its
// work to the backend and returns at once; the operation ends when done is called, from
// a completion step (futures.Completion.Step), never from the backend's callback itself.
func (s *Service) submitRunModelOp(ctx context.Context, tenant string, m OpMeta, op string,
	start func(ctx context.Context, r *Run, c *futures.Completion, done func(futures.Result, error))) (string, error) {
	return s.submitRunTask(ctx, tenant, m, op, func(t *futures.Task, r *Run) {
		t.Start = func(ctx context.Context, c *futures.Completion) {
			done := func(res futures.Result, err error) { c.Done(s.runOpEnds(r, m, res, err)) }
			ctx, err := s.runOpBegins(ctx, r, op)
			if err != nil {
				c.Step(func() { done(futures.Result{}, err) })
				return
			}
			start(ctx, r, c, done)
		}
	})
}

// submitRunTask queues an ordered operation of a training run whose body body sets.
func (s *Service) submitRunTask(ctx context.Context, tenant string, m OpMeta, op string, body func(t *futures.Task, r *Run)) (string, error) {
	s.lock(lkSessions | lkRuns)
	r, err := s.usableRun(tenant, m.ModelID)
	s.unlock(lkSessions | lkRuns)
	if err != nil {
		return "", s.settle(err)
	}
	t := futures.Task{
		Tenant: tenant, QueueKey: r.ID, Ordered: true, SeqID: m.SeqID, OpType: op,
		ModelID: r.ID, Pool: r.BaseModel, PayloadHash: m.PayloadHash, InOrder: m.InOrder,
	}
	body(&t, r)
	id, err := s.submit(ctx, t)
	if err != nil {
		return "", s.submitError(err)
	}
	return id, nil
}

// runOpBegins starts an operation of run r: its correlation keys, and a refusal when r is
// no longer loaded.
func (s *Service) runOpBegins(ctx context.Context, r *Run, op string) (context.Context, error) {
	ctx = telemetry.WithKeys(ctx, s.corrKeys(r, op))
	s.lock(lkRuns)
	ok := r.State == RunReady
	note := r.Note
	s.unlock(lkRuns)
	if !ok {
		return ctx, &Error{Kind: KindConflict, Msg: fmt.Sprintf("training run %s is not loaded: %s", r.ID, note)}
	}
	return ctx, nil
}

// runOpEnds records that an operation of run r consumed its seq_id, whether it
// succeeded or not, and classifies its error.
func (s *Service) runOpEnds(r *Run, m OpMeta, res futures.Result, err error) (futures.Result, error) {
	s.lock(lkRuns)
	r.LastRequestTime = s.now()
	if m.SeqID+1 > r.NextSeq {
		r.NextSeq = m.SeqID + 1
	}
	s.unlock(lkRuns)
	s.markDirty(r)
	return res, classify(err)
}

// ForwardBackward queues forward or forward_backward (req.Backward) on a run.
func (s *Service) ForwardBackward(ctx context.Context, tenant string, m OpMeta, req engine.ForwardRequest) (string, error) {
	op, span := telemetry.OpForward, telemetry.SpanTCRunForward
	if req.Backward {
		op, span = telemetry.OpForwardBackward, telemetry.SpanTCRunForwardBackward
	}
	if err := s.checkBatch(tenant, m.ModelID, req); err != nil {
		return "", err
	}
	return s.submitRunModelOp(ctx, tenant, m, op, func(ctx context.Context, r *Run, c *futures.Completion, done func(futures.Result, error)) {
		ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeTrainingController), span,
			attribute.Bool(telemetry.AttrBackward, req.Backward), attribute.Int(telemetry.AttrDataCount, len(req.Data)),
			attribute.String(telemetry.AttrLossFn, req.LossFn), attribute.Int64(telemetry.AttrSeqID, m.SeqID))
		start := time.Now()
		// finish is the operation's continuation, on a completion step.
		finish := func(res engine.ForwardResult, err error) {
			if err == nil && req.Backward {
				err = s.setPendingGrads(ctx, r, true)
			}
			telemetry.End(sp, err)
			if err != nil {
				done(futures.Result{}, err)
				return
			}
			if req.Backward {
				s.recordMetrics(ctx, r, op, m.SeqID, res.Metrics)
			}
			s.addUsage(r.Tenant, r.BaseModel, r.SessionID, UsageTraining, res.Tokens)
			if d := time.Since(start).Seconds(); d > 0 && res.Tokens > 0 {
				s.tel.Instruments.TrainingTokensPerSecond.Record(ctx, float64(res.Tokens)/d,
					telemetry.Attrs(telemetry.MAttrBaseModel, r.BaseModel))
			}
			done(s.enc.ForwardBackward(res, req.LossFn))
		}
		if req.Backward {
			if err := s.lostGrads(ctx, r); err != nil {
				c.Step(func() { finish(engine.ForwardResult{}, err) })
				return
			}
		}
		var res engine.ForwardResult
		s.onAdapterAsync(ctx, r, c, func(cb func(error)) {
			s.be.ForwardBackwardAsync(ctx, r.BaseModel, r.ID, req, func(out engine.ForwardResult, err error) { res = out; cb(err) })
		}, func(err error) { finish(res, err) })
	})
}

// checkBatch enforces the per-request limits before anything is queued.
func (s *Service) checkBatch(tenant, runID string, req engine.ForwardRequest) error {
	s.lock(lkSessions | lkRuns)
	r, err := s.usableRun(tenant, runID)
	s.unlock(lkSessions | lkRuns)
	if err != nil {
		return s.settle(err)
	}
	if len(req.Data) == 0 {
		return invalidf("forward_backward_input.data is empty")
	}
	maxLen := s.maxContext(r.BaseModel, s.models[r.BaseModel])
	total := 0
	for i, d := range req.Data {
		if config.ExceedsContext(maxLen, len(d.Tokens), 0) {
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
func (s *Service) OptimStep(ctx context.Context, tenant string, m OpMeta, op OptimParams) (string, error) {
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
	s.lock(lkSessions | lkRuns)
	r, err := s.usableRun(tenant, m.ModelID)
	if err == nil && r.OptimizerOf() != op.Optimizer {
		err = invalidf("optim_step gives %s parameters (%s), but training run %s trains with the %s optimizer (%s); the optimizer is fixed when the run is created",
			op.Optimizer, paramsField(op.Optimizer), r.ID, r.OptimizerOf(), paramsField(r.OptimizerOf()))
	}
	s.unlock(lkSessions | lkRuns)
	if err != nil {
		return "", s.settle(err)
	}
	if err := p.Validate(); err != nil {
		return "", classify(err)
	}
	return s.submitRunModelOp(ctx, tenant, m, telemetry.OpOptimStep, func(ctx context.Context, r *Run, c *futures.Completion, done func(futures.Result, error)) {
		ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeTrainingController), telemetry.SpanTCRunOptimStep,
			attribute.Float64(telemetry.AttrLearningRate, p.LearningRate()), attribute.Int64(telemetry.AttrSeqID, m.SeqID),
			attribute.String(telemetry.AttrOptimizerFamily, p.Family()))
		// finish is the operation's continuation, on a completion step.
		finish := func(metrics map[string]float64, err error) {
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
				done(futures.Result{}, err)
				return
			}
			s.recordMetrics(ctx, r, telemetry.OpOptimStep, m.SeqID, optimPoint(metrics, p))
			done(s.enc.OptimStep(metrics))
		}
		if err := s.lostGrads(ctx, r); err != nil {
			c.Step(func() { finish(nil, err) })
			return
		}
		var metrics map[string]float64
		s.onAdapterAsync(ctx, r, c, func(cb func(error)) {
			s.be.OptimStepAsync(ctx, r.BaseModel, r.ID, p, func(out map[string]float64, err error) { metrics = out; cb(err) })
		}, func(err error) { finish(metrics, err) })
	})
}

func (s *Service) autosave(ctx context.Context, r *Run, seq int64) error {
	err := s.be.SaveState(ctx, r.BaseModel, r.ID, s.ckpts.layout().autosaveDir(r.ID), true)
	s.diskChanged(r.ID) // an optim_step running when the run was unloaded still writes it
	if err != nil {
		return fmt.Errorf("autosave after optim_step: %w", err)
	}
	s.lock(lkRuns)
	r.AutosaveSeq, r.AutosaveAt = seq, s.now()
	s.unlock(lkRuns)
	return nil
}

// UnloadModel queues the removal of a run's adapter. Records and checkpoints stay.
func (s *Service) UnloadModel(ctx context.Context, tenant, runID string) (string, error) {
	s.lock(lkRuns)
	r, err := s.runs.owned(tenant, runID)
	s.unlock(lkRuns)
	if err != nil {
		return "", s.settle(err)
	}
	id, err := s.submit(ctx, futures.Task{
		Tenant: tenant, QueueKey: runID + "/unload", OpType: telemetry.OpUnloadModel, ModelID: runID, Pool: r.BaseModel,
		Run: func(ctx context.Context) (futures.Result, error) {
			ctx = telemetry.WithKeys(ctx, s.corrKeys(r, telemetry.OpUnloadModel))
			ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeTrainingController), telemetry.SpanTCUnloadModel)
			s.unload(ctx, r, "unload_model was called")
			telemetry.End(sp, nil)
			return s.enc.UnloadModel(runID)
		},
	})
	if err != nil {
		return "", s.submitError(err)
	}
	return id, nil
}

// unload removes a run's adapter and fails its queued operations.
func (s *Service) unload(ctx context.Context, r *Run, why string) {
	s.lock(lkRuns)
	was := r.State == RunReady
	r.State, r.Note = RunUnloaded, why
	c := *r
	s.unlock(lkRuns)
	s.fut.DropQueue(r.ID, fmt.Sprintf("training run %s was unloaded: %s", r.ID, why))
	s.endMetrics(r.ID)
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
	s.putLogged(ctx, keyRun+r.ID, &c, reasonRunUnloaded)
	s.markDirty(r) // a flush already under way may write its older copy after this one
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
	s.lock(lkRuns)
	r, err := s.runs.owned(tenant, runID)
	var info RunInfo
	if err == nil {
		info = RunInfo{ModelID: r.ID, BaseModel: r.BaseModel, Arch: s.models[r.BaseModel].Arch, LoraRank: r.Lora.Rank, Optimizer: r.OptimizerOf()}
	}
	s.unlock(lkRuns)
	return info, s.settle(err)
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
	if err := s.restoreAdapter(ctx, r, err); err != nil {
		return err
	}
	return op()
}

// onAdapterAsync is onAdapter for a model operation that hands its work to the backend:
// op queues it and calls back with its error (possibly on the model's loop). then
// receives the final error on a completion step of c; restoring a lost adapter (which
// waits on the model) happens on one too, never on the loop.
func (s *Service) onAdapterAsync(ctx context.Context, r *Run, c *futures.Completion, op func(cb func(error)), then func(error)) {
	op(func(err error) {
		c.Step(func() {
			if err == nil || !errors.Is(err, backend.ErrUnknownAdapter) {
				then(err)
				return
			}
			if err := s.restoreAdapter(ctx, r, err); err != nil {
				then(err)
				return
			}
			op(func(err error) { c.Step(func() { then(err) }) })
		})
	})
}

// restoreAdapter restores run r's adapter after the executor answered err (it does not
// know the adapter): nil when op may run once more, else the operation's error.
func (s *Service) restoreAdapter(ctx context.Context, r *Run, err error) error {
	s.lock(lkRuns)
	loaded := r.State == RunReady
	lost := r.PendingGrads
	s.unlock(lkRuns)
	if !loaded {
		return err
	}
	dir, optimizer, from := s.ckpts.latestState(r.ID)
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
	return nil
}
