package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/telemetry"
)

// CreateSamplingSession opens a sampling session on a base model or on a sampler (or
// training) checkpoint given by its tinker:// path. Both may be given (tinker-cookbook's
// teachers are), when the checkpoint is of that base model. It is synchronous: the adapter
// is loaded before it returns.
func (s *Service) CreateSamplingSession(ctx context.Context, tenant, sessionID string, seq int64, baseModel, modelPath string) (sm *Sampler, err error) {
	ctx = telemetry.WithKeys(ctx, telemetry.Keys{SessionID: sessionID, BaseModel: baseModel})
	ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeSamplingController), telemetry.SpanSCCreateSamplingSession)
	defer func() {
		if sm != nil && sp.IsRecording() {
			sp.SetAttributes(attribute.String(telemetry.AttrSamplingSessionID, sm.ID), attribute.String(telemetry.AttrBaseModel, sm.BaseModel))
		}
		telemetry.End(sp, err)
	}()
	if baseModel == "" && modelPath == "" {
		return nil, invalidf("create_sampling_session needs base_model or model_path")
	}
	var fetched *Checkpoint
	if modelPath != "" {
		fetched = s.fetchCheckpoint(modelPath)
	}
	s.lock(lkSessions | lkCkpts)
	_, err = s.liveSession(tenant, sessionID)
	var dir, runID string
	var foreign *Checkpoint // another tenant's published checkpoint (audited for the reader)
	if err == nil && modelPath != "" {
		var c *Checkpoint
		c, err = s.ckpts.resolve(tenant, modelPath, fetched)
		if err == nil {
			err = notAnExport(c, modelPath)
		}
		switch {
		case err != nil:
		case baseModel != "" && baseModel != c.BaseModel:
			err = invalidf("base_model %q does not match model_path %s, a checkpoint of %q", baseModel, modelPath, c.BaseModel)
		default:
			dir, baseModel, runID = c.Dir, c.BaseModel, c.RunID
			if c.Tenant != tenant {
				cc := *c
				foreign = &cc
			}
		}
	}
	s.unlock(lkSessions | lkCkpts)
	if err != nil {
		return nil, s.settle(err)
	}
	if _, ok := s.models[baseModel]; !ok {
		return nil, invalidf("base_model %q is not served here; available: %v", baseModel, s.modelNames())
	}
	sm, err = s.newSampler(ctx, tenant, sessionID, seq, baseModel, modelPath, dir, runID, false, false)
	if err == nil && foreign != nil {
		s.auditCheckpoint(ctx, tenant, AuditCheckpointRead, foreign, map[string]any{"purpose": "create_sampling_session", "sampling_session_id": sm.ID})
	}
	return sm, err
}

// newSampler registers a sampling session (idempotent per session and seq). An inflight
// one samples the run's shared inflight adapter, which publishInflight has loaded.
func (s *Service) newSampler(ctx context.Context, tenant, sessionID string, seq int64, baseModel, modelPath, dir, runID string, ephemeral, inflight bool) (*Sampler, error) {
	id := SamplerID(sessionID, seq)
	s.lock(lkSessions | lkSamplers)
	if old, ok := s.samplers.get(id); ok && !old.Closed {
		c := *old
		s.unlock(lkSessions | lkSamplers)
		if c.Tenant == tenant && c.ModelPath == modelPath && c.BaseModel == baseModel && !ephemeral {
			return &c, nil
		}
		if !ephemeral {
			return nil, conflictf("sampling_session_seq_id %d of session %s is already used by sampling session %s", seq, sessionID, id)
		}
		// An ephemeral save re-using a seq replaces the previous weights.
		s.closeSampler(ctx, old)
		s.lock(lkSessions | lkSamplers)
	}
	if err := s.checkSamplerQuota(tenant, ""); err != nil {
		s.unlock(lkSessions | lkSamplers)
		return nil, err
	}
	sm := &Sampler{ID: id, Owner: s.self, Tenant: tenant, SessionID: sessionID, SeqID: seq, BaseModel: baseModel, ModelPath: modelPath,
		AdapterDir: dir, Lora: dir != "", Ephemeral: ephemeral, RunID: runID, CreatedAt: s.now(), Inflight: inflight}
	if inflight {
		sm.AdapterID = inflightAdapterID(runID)
	}
	s.samplers.put(sm)
	c := *sm
	s.unlock(lkSessions | lkSamplers)
	if sm.Lora && !inflight {
		if err := s.be.AddSamplerAdapter(ctx, baseModel, id, dir); err != nil {
			s.lock(lkSamplers)
			s.samplers.del(id)
			s.unlock(lkSamplers)
			return nil, classify(err)
		}
	}
	if err := putJSON(ctx, s.st, keySampler+id, &c); err != nil {
		return nil, classify(err)
	}
	s.tel.Instruments.SamplingSessionsActive.Add(ctx, 1, metric.WithAttributes(attribute.String(telemetry.MAttrBaseModel, baseModel)))
	return &c, nil
}

func (s *Service) closeSampler(ctx context.Context, sm *Sampler) {
	s.lock(lkSamplers)
	if sm.Closed {
		s.unlock(lkSamplers)
		return
	}
	sm.Closed = true
	c := *sm
	s.unlock(lkSamplers)
	if sm.Lora && !sm.Inflight { // the shared inflight adapter goes with its run (unload)
		if err := s.be.RemoveSamplerAdapter(ctx, sm.BaseModel, sm.ID); err != nil {
			s.log.Warn("remove sampling adapter failed", "sampler", sm.ID, "error", err)
		}
	}
	s.removeEphemeral(sm)
	s.tel.Instruments.SamplingSessionsActive.Add(ctx, -1, metric.WithAttributes(attribute.String(telemetry.MAttrBaseModel, sm.BaseModel)))
	s.putLogged(ctx, keySampler+sm.ID, &c, reasonSamplerClosed)
}

// GetSampler describes a sampling session.
func (s *Service) GetSampler(tenant, id string) (*Sampler, error) {
	s.lock(lkSamplers)
	sm, ok := s.samplers.get(id)
	var c Sampler
	if ok && sm.Tenant == tenant {
		c = *sm
	}
	s.unlock(lkSamplers)
	if !ok || c.Tenant != tenant {
		return nil, s.settle(miss(keySampler+id, tenant, notFoundf("sampler %q not found", id)))
	}
	return &c, nil
}

// keepLastPromptLogprobs blanks the prompt logprobs before the last n prompt tokens
// (n <= 0: keeps all).
func keepLastPromptLogprobs(res *engine.SampleResult, n int) {
	if n <= 0 {
		return
	}
	if k := len(res.PromptLogprobs) - n; k > 0 {
		for i := 0; i < k; i++ {
			res.PromptLogprobs[i] = float32(math.NaN())
		}
	}
	if k := len(res.TopKPrompt) - n; k > 0 {
		for i := 0; i < k; i++ {
			res.TopKPrompt[i] = nil
		}
	}
}

// samplerClosed reports whether a sampling session was closed (finished, expired,
// unloaded) since a request on it was queued.
func (s *Service) samplerClosed(id string) bool {
	s.lock(lkSamplers)
	defer s.unlock(lkSamplers)
	sm, ok := s.samplers.get(id)
	return !ok || sm.Closed
}

// SampleInput is asample.
type SampleInput struct {
	SamplingSessionID string
	BaseModel         string // alternative to a session: sample the base model
	SeqID             int64
	PayloadHash       string
	Req               engine.SampleRequest
	// PromptLogprobsLastN > 0 keeps the prompt logprobs (and top-k rows) of the last N
	// prompt tokens only: earlier ones are NaN (empty rows), as SDK >= 0.33 asks.
	PromptLogprobsLastN int
}

// Sample queues a sample request.
func (s *Service) Sample(ctx context.Context, tenant string, in SampleInput) (string, error) {
	if err := s.CheckOutput(SampleOutputSize(in.Req), sampleWhat(in.Req)); err != nil {
		return "", err // before anything is queued (output.go)
	}
	job := sampleJob{tenant: tenant, base: in.BaseModel, queue: "base/" + in.BaseModel + "/" + tenant, seq: in.SeqID,
		hash: in.PayloadHash, req: in.Req, encode: s.enc.Sample, promptLogprobsLastN: in.PromptLogprobsLastN}
	if in.SamplingSessionID != "" {
		sm, err := s.GetSampler(tenant, in.SamplingSessionID)
		if err != nil {
			return "", err
		}
		s.lock(lkSessions)
		err = finishedErr(s.sessions.at(sm.SessionID))
		s.unlock(lkSessions)
		if err != nil {
			return "", err
		}
		if sm.Closed {
			return "", closedError(sm)
		}
		if err := s.checkSamplerSource(ctx, sm); err != nil {
			return "", err
		}
		job.base, job.queue, job.sampler = sm.BaseModel, sm.ID, sm.ID
		if sm.Lora {
			job.lora, job.adapterDir = sm.adapterID(), sm.AdapterDir
		}
		job.keys.SessionID, job.keys.SamplingSessionID = sm.SessionID, sm.ID
	} else if job.base == "" {
		return "", invalidf("asample needs sampling_session_id (or base_model)")
	}
	id, err := s.submitSample(ctx, job)
	if err == nil && job.sampler != "" {
		s.polls.watch(tenant, job.sampler, in.SeqID, id)
	}
	return id, err
}

// sampleJob is a sample request on its way to the token scheduler of its base model
// (through futures): the Tinker asample route and the OpenAI/Anthropic-compatible routes
// both submit one, so they share the validation, the per-tenant limits, the fair
// scheduling and the telemetry.
type sampleJob struct {
	tenant, base string
	lora         string // "" for the base model
	adapterDir   string // where lora's weights are, to reload them if a worker lost them
	queue        string // idempotency domain of (queue, seq); "" for none
	seq          int64
	hash         string
	keys         telemetry.Keys
	req          engine.SampleRequest
	// sampler is the sampling session the request belongs to ("" for the compatible
	// routes, whose adapters are cached checkpoints): a closed one is not reloaded.
	sampler string
	// promptLogprobsLastN keeps prompt logprobs only for the prompt's last N tokens (0: all).
	promptLogprobsLastN int
	// stream, when set, receives the tokens as they are drawn (see backend.Stream).
	stream *backend.Stream
	// live is the context of a caller waiting in process: when it ends, the operation
	// is cancelled (queued or running), so a disconnected client stops generation.
	live   context.Context
	encode func(engine.SampleResult) (futures.Result, error)
	// failed, when set, receives the error of a failed operation as it is (the future
	// keeps only its message and category); finally runs once the operation has run.
	failed  func(error)
	finally func()
}

func (s *Service) submitSample(ctx context.Context, job sampleJob) (string, error) {
	base, lora, req := job.base, job.lora, job.req
	mi, ok := s.models[base]
	if !ok {
		return "", invalidf("base_model %q is not served here; available: %v", base, s.modelNames())
	}
	if req.Params.MaxTokens == 0 {
		req.Params.MaxTokens = 16
	}
	lim := s.cfg.Limits
	switch {
	case len(req.Prompt) == 0:
		return "", invalidf("prompt is empty")
	case req.NumSamples < 1 || req.NumSamples > lim.MaxNumSamples:
		return "", invalidf("num_samples %d must be in [1, %d]", req.NumSamples, lim.MaxNumSamples)
	case req.Params.MaxTokens < 0 || req.Params.MaxTokens > lim.MaxSampleTokens:
		return "", invalidf("sampling_params.max_tokens %d must be in [1, %d]", req.Params.MaxTokens, lim.MaxSampleTokens)
	}
	maxLen := s.maxContext(base, mi)
	if config.ExceedsContext(maxLen, len(req.Prompt), req.Params.MaxTokens) {
		return "", invalidf("prompt of %d tokens plus max_tokens %d exceeds max_context_length %d of %s", len(req.Prompt), req.Params.MaxTokens, maxLen, base)
	}
	if err := s.checkSample(mi.Config, req); err != nil {
		return "", err
	}
	// One sequence must fit the model's KV cache (its scheduler runs the samples of a
	// request as memory allows, recomputing preempted ones).
	if kv := mi.KVCacheTokens; kv > 0 && len(req.Prompt)+req.Params.MaxTokens > kv {
		return "", invalidf("prompt of %d tokens plus max_tokens %d needs more KV-cache positions than %s has (%d; engine.scheduler.kv_cache_bytes)",
			len(req.Prompt), req.Params.MaxTokens, base, kv)
	}
	weight := len(req.Prompt) + req.NumSamples*req.Params.MaxTokens
	if err := s.checkBacklog(base, job.tenant, weight, mi.KVCacheTokens); err != nil {
		return "", err
	}
	keys := job.keys
	keys.OperationType, keys.BaseModel = telemetry.OpSample, base
	id, err := s.submit(ctx, futures.Task{
		Tenant: job.tenant, QueueKey: job.queue, SeqID: job.seq, OpType: telemetry.OpSample, ModelID: base, Pool: base,
		PayloadHash: job.hash, Weight: weight, Timeout: lim.SampleTimeoutSeconds.Duration(),
		Start: func(ctx context.Context, c *futures.Completion) {
			// end is the operation's last step, on a completion step: what a blocking body
			// did when it returned.
			var stop func()
			end := func(res futures.Result, err error) {
				if stop != nil {
					stop()
				}
				if err != nil && job.failed != nil {
					job.failed(err)
				}
				if job.finally != nil {
					job.finally()
				}
				c.Done(res, err)
			}
			if job.live != nil {
				if err := job.live.Err(); err != nil {
					c.Step(func() { end(futures.Result{}, fmt.Errorf("the client went away before sampling started: %w", err)) })
					return
				}
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				unwatch := context.AfterFunc(job.live, cancel)
				stop = func() { unwatch(); cancel() }
			}
			ctx = telemetry.WithKeys(ctx, keys)
			ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeSamplingController), telemetry.SpanSCRunSample,
				attribute.Int(telemetry.AttrNumSamples, req.NumSamples))
			start := time.Now()
			// finish is the operation's continuation, on a completion step.
			finish := func(out engine.SampleResult, err error) {
				if err != nil {
					err = cancelledError(ctx, err)
				}
				telemetry.End(sp, err)
				if err != nil {
					end(futures.Result{}, classify(err))
					return
				}
				keepLastPromptLogprobs(&out, job.promptLogprobsLastN)
				d := time.Since(start).Seconds()
				m := s.tel.Instruments
				attrs := telemetry.Attrs(telemetry.MAttrBaseModel, base)
				m.SamplingRequests.Add(ctx, 1, attrs)
				m.SamplingDuration.Record(ctx, d, attrs)
				if d > 0 {
					m.SamplingTokensPerSecond.Record(ctx, float64(out.OutputTokens)/d, attrs)
				}
				sampled := 0
				for _, sq := range out.Sequences {
					m.SamplingOutputTokens.Record(ctx, int64(len(sq.Tokens)), attrs)
					sampled += len(sq.Tokens)
				}
				s.addUsage(job.tenant, base, keys.SessionID, UsageSample, sampled)
				s.addUsage(job.tenant, base, keys.SessionID, UsagePrefill, out.PromptTokens-out.PromptCacheHitTokens)
				s.addUsage(job.tenant, base, keys.SessionID, UsagePrefillCached, out.PromptCacheHitTokens)
				end(job.encode(out))
			}
			sample := func(done func(engine.SampleResult, error)) {
				if job.stream != nil {
					s.sampleStreamAsync(ctx, base, lora, req, *job.stream, done)
					return
				}
				s.be.SampleAsync(ctx, base, lora, req, done)
			}
			sample(func(out engine.SampleResult, err error) {
				c.Step(func() {
					if errors.Is(err, backend.ErrUnknownAdapter) && job.adapterDir != "" && (job.sampler == "" || !s.samplerClosed(job.sampler)) {
						// The worker holding the sampler's weights restarted or left: load them
						// again (from the checkpoint directory) and sample once more.
						if lerr := s.be.AddSamplerAdapter(ctx, base, lora, job.adapterDir); lerr == nil {
							sample(func(out engine.SampleResult, err error) { c.Step(func() { finish(out, err) }) })
							return
						}
					}
					finish(out, err)
				})
			})
		},
	})
	if err != nil {
		return "", s.submitError(err)
	}
	return id, nil
}

// maxContext is the context length requests on base may use: the model's, lowered by
// models[].max_context_length.
func (s *Service) maxContext(base string, mi backend.ModelInfo) int {
	mc, _ := s.cfg.Model(base)
	return mc.ContextLength(mi.MaxContextLength)
}
