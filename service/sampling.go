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
	ctx, sp := telemetry.StartSpan(ctx, telemetry.Tracer(telemetry.ScopeSamplingController), telemetry.SpanSCCreateSamplingSession)
	defer func() {
		if sm != nil && sp.IsRecording() {
			sp.SetAttributes(attribute.String(telemetry.AttrSamplingSessionID, sm.ID), attribute.String(telemetry.AttrBaseModel, sm.BaseModel))
		}
		telemetry.End(sp, err)
	}()
	if baseModel == "" && modelPath == "" {
		return nil, invalidf("create_sampling_session needs base_model or model_path")
	}
	s.mu.Lock()
	_, err = s.liveSession(tenant, sessionID)
	var dir, runID string
	if err == nil && modelPath != "" {
		var c *Checkpoint
		c, err = s.resolvePath(tenant, modelPath)
		switch {
		case err != nil:
		case baseModel != "" && baseModel != c.BaseModel:
			err = invalidf("base_model %q does not match model_path %s, a checkpoint of %q", baseModel, modelPath, c.BaseModel)
		default:
			dir, baseModel, runID = c.Dir, c.BaseModel, c.RunID
		}
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if _, ok := s.models[baseModel]; !ok {
		return nil, invalidf("base_model %q is not served here; available: %v", baseModel, s.modelNames())
	}
	return s.newSampler(ctx, tenant, sessionID, seq, baseModel, modelPath, dir, runID, false)
}

// newSampler registers a sampling session (idempotent per session and seq).
func (s *Service) newSampler(ctx context.Context, tenant, sessionID string, seq int64, baseModel, modelPath, dir, runID string, ephemeral bool) (*Sampler, error) {
	id := fmt.Sprintf("%s:sample:%d", sessionID, seq)
	s.mu.Lock()
	if old, ok := s.samplers[id]; ok && !old.Closed {
		s.mu.Unlock()
		if old.Tenant == tenant && old.ModelPath == modelPath && old.BaseModel == baseModel && !ephemeral {
			c := *old
			return &c, nil
		}
		if !ephemeral {
			return nil, conflictf("sampling_session_seq_id %d of session %s is already used by sampling session %s", seq, sessionID, id)
		}
		// An ephemeral save re-using a seq replaces the previous weights.
		s.closeSampler(ctx, old)
		s.mu.Lock()
	}
	sm := &Sampler{ID: id, Owner: s.self, Tenant: tenant, SessionID: sessionID, SeqID: seq, BaseModel: baseModel, ModelPath: modelPath,
		AdapterDir: dir, Lora: dir != "", Ephemeral: ephemeral, RunID: runID, CreatedAt: s.now()}
	s.samplers[id] = sm
	s.mu.Unlock()
	if sm.Lora {
		if err := s.be.AddSamplerAdapter(ctx, baseModel, id, dir); err != nil {
			s.mu.Lock()
			delete(s.samplers, id)
			s.mu.Unlock()
			return nil, classify(err)
		}
	}
	if err := putJSON(ctx, s.st, keySampler+id, sm); err != nil {
		return nil, classify(err)
	}
	telemetry.Metrics().SamplingSessionsActive.Add(ctx, 1, metric.WithAttributes(attribute.String(telemetry.MAttrBaseModel, baseModel)))
	c := *sm
	return &c, nil
}

func (s *Service) closeSampler(ctx context.Context, sm *Sampler) {
	s.mu.Lock()
	if sm.Closed {
		s.mu.Unlock()
		return
	}
	sm.Closed = true
	c := *sm
	s.mu.Unlock()
	if sm.Lora {
		if err := s.be.RemoveSamplerAdapter(ctx, sm.BaseModel, sm.ID); err != nil {
			s.log.Warn("remove sampling adapter failed", "sampler", sm.ID, "error", err)
		}
	}
	telemetry.Metrics().SamplingSessionsActive.Add(ctx, -1, metric.WithAttributes(attribute.String(telemetry.MAttrBaseModel, sm.BaseModel)))
	_ = putJSON(ctx, s.st, keySampler+sm.ID, &c)
}

// GetSampler describes a sampling session.
func (s *Service) GetSampler(tenant, id string) (*Sampler, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sm, ok := s.samplers[id]
	if !ok || sm.Tenant != tenant {
		if err := s.elsewhere(keySampler+id, tenant); err != nil {
			return nil, err
		}
		return nil, notFoundf("sampler %q not found", id)
	}
	c := *sm
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
	s.mu.Lock()
	defer s.mu.Unlock()
	sm, ok := s.samplers[id]
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
func (s *Service) Sample(ctx context.Context, tenant string, in SampleInput, enc ResultEncoder) (string, error) {
	var sm *Sampler
	base, lora, queue := in.BaseModel, "", "base/"+in.BaseModel+"/"+tenant
	if in.SamplingSessionID != "" {
		var err error
		sm, err = s.GetSampler(tenant, in.SamplingSessionID)
		if err != nil {
			return "", err
		}
		s.mu.Lock()
		err = finishedErr(s.sessions[sm.SessionID])
		s.mu.Unlock()
		if err != nil {
			return "", err
		}
		if sm.Closed {
			return "", notFoundf("sampling session %s is closed (its session expired or its run was unloaded)", sm.ID)
		}
		base, queue = sm.BaseModel, sm.ID
		if sm.Lora {
			lora = sm.ID
		}
	} else if base == "" {
		return "", invalidf("asample needs sampling_session_id (or base_model)")
	}
	mi, ok := s.models[base]
	if !ok {
		return "", invalidf("base_model %q is not served here; available: %v", base, s.modelNames())
	}
	req := in.Req
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
	maxLen := mi.MaxContextLength
	if mc, _ := s.cfg.Model(base); mc.MaxContextLength > 0 && (maxLen == 0 || mc.MaxContextLength < maxLen) {
		maxLen = mc.MaxContextLength
	}
	if maxLen > 0 && len(req.Prompt)+req.Params.MaxTokens > maxLen {
		return "", invalidf("prompt of %d tokens plus max_tokens %d exceeds max_context_length %d of %s", len(req.Prompt), req.Params.MaxTokens, maxLen, base)
	}
	keys := telemetry.Keys{OperationType: telemetry.OpSample, BaseModel: base}
	if sm != nil {
		keys.SessionID, keys.SamplingSessionID = sm.SessionID, sm.ID
	}
	id, err := s.fut.Submit(ctx, futures.Task{
		Tenant: tenant, QueueKey: queue, SeqID: in.SeqID, OpType: telemetry.OpSample, ModelID: base, Pool: base,
		PayloadHash: in.PayloadHash,
		Run: func(ctx context.Context) (futures.Result, error) {
			ctx = telemetry.WithKeys(ctx, keys)
			ctx, sp := telemetry.StartSpan(ctx, telemetry.Tracer(telemetry.ScopeSamplingController), telemetry.SpanSCRunSample,
				attribute.Int(telemetry.AttrNumSamples, req.NumSamples))
			start := time.Now()
			res, err := s.be.Sample(ctx, base, lora, req)
			if errors.Is(err, backend.ErrUnknownAdapter) && sm != nil && sm.AdapterDir != "" && !s.samplerClosed(sm.ID) {
				// The worker holding the sampler's weights restarted or left: load them
				// again (from the checkpoint directory) and sample once more.
				if lerr := s.be.AddSamplerAdapter(ctx, base, lora, sm.AdapterDir); lerr == nil {
					res, err = s.be.Sample(ctx, base, lora, req)
				}
			}
			telemetry.End(sp, err)
			if err != nil {
				return futures.Result{}, classify(err)
			}
			keepLastPromptLogprobs(&res, in.PromptLogprobsLastN)
			d := time.Since(start).Seconds()
			m := telemetry.Metrics()
			attrs := telemetry.Attrs(telemetry.MAttrBaseModel, base)
			m.SamplingRequests.Add(ctx, 1, attrs)
			m.SamplingDuration.Record(ctx, d, attrs)
			if d > 0 {
				m.SamplingTokensPerSecond.Record(ctx, float64(res.OutputTokens)/d, attrs)
			}
			for _, sq := range res.Sequences {
				m.SamplingOutputTokens.Record(ctx, int64(len(sq.Tokens)), attrs)
			}
			return enc.Sample(res)
		},
	})
	if err != nil {
		return "", s.submitError(err)
	}
	return id, nil
}
