package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/telemetry"
)

// ServiceClient is a session with the server: it creates training and sampling clients
// and keeps the session alive with heartbeats until Close.
type ServiceClient struct {
	c         *conn
	sessionID string

	mu          sync.Mutex
	modelSeq    int64
	samplingSeq int64
	stop        chan struct{}
	wg          sync.WaitGroup
}

// NewServiceClient connects to baseURL with apiKey and opens a session.
func NewServiceClient(ctx context.Context, baseURL, apiKey string, opts ...Option) (*ServiceClient, error) {
	c, err := newConn(baseURL, apiKey, opts)
	if err != nil {
		return nil, err
	}
	if err := c.call(ctx, "POST", "/api/v1/client/config", map[string]string{"sdk_version": "tuft-go"}, nil); err != nil {
		return nil, err
	}
	tags := c.o.tags
	if tags == nil {
		tags = []string{}
	}
	md := c.o.userMetadata
	if md == nil {
		md = map[string]any{}
	}
	var se wire.CreateSessionResponse
	if err := c.call(ctx, "POST", "/api/v1/create_session", wire.CreateSessionRequest{Tags: tags, UserMetadata: md, SDKVersion: "tuft-go", Type: "create_session"}, &se); err != nil {
		return nil, err
	}
	s := &ServiceClient{c: c, sessionID: se.SessionID, stop: make(chan struct{})}
	s.wg.Add(1)
	go s.heartbeat()
	return s, nil
}

// SessionID is the server's id of this session.
func (s *ServiceClient) SessionID() string { return s.sessionID }

func (s *ServiceClient) heartbeat() {
	defer s.wg.Done()
	t := time.NewTicker(s.c.o.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _ = s.c.do(ctx, "POST", "/api/v1/session_heartbeat", mustJSON(wire.SessionHeartbeatRequest{SessionID: s.sessionID, Type: "session_heartbeat"}), "application/json", "", false)
			cancel()
		}
	}
}

// Close stops the heartbeats.
func (s *ServiceClient) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
}

// Capabilities lists the models the server serves.
func (s *ServiceClient) Capabilities(ctx context.Context) ([]wire.SupportedModel, error) {
	var r wire.GetServerCapabilitiesResponse
	err := s.c.call(ctx, "GET", "/api/v1/get_server_capabilities", nil, &r)
	return r.SupportedModels, err
}

// LoraOptions describe a new LoRA training run.
type LoraOptions struct {
	Rank         int    // default 32
	Seed         *int64 // nil: the server picks
	TrainAttn    bool
	TrainMLP     bool
	TrainUnembed bool
	// Optimizer selects the run's optimizer family (nil: AdamW), e.g. wire.Dimuon().
	Optimizer *wire.OptimizerConfig
}

// DefaultLora trains every target with rank r.
func DefaultLora(r int) LoraOptions {
	return LoraOptions{Rank: r, TrainAttn: true, TrainMLP: true, TrainUnembed: true}
}

// CreateLoRATrainingClient starts a training run on baseModel.
func (s *ServiceClient) CreateLoRATrainingClient(ctx context.Context, baseModel string, lo LoraOptions) (*TrainingClient, error) {
	ctx, end := s.c.span(ctx, telemetry.SpanClientCreateModel, attribute.String(telemetry.AttrBaseModel, baseModel))
	s.mu.Lock()
	seq := s.modelSeq
	s.modelSeq++
	s.mu.Unlock()
	if lo.Rank == 0 {
		lo.Rank = 32
	}
	var f wire.UntypedAPIFuture
	err := s.c.call(ctx, "POST", "/api/v1/create_model", wire.CreateModelRequest{SessionID: s.sessionID, ModelSeqID: seq, BaseModel: baseModel,
		LoraConfig:      &wire.LoraConfig{Rank: lo.Rank, Seed: lo.Seed, TrainAttn: lo.TrainAttn, TrainMLP: lo.TrainMLP, TrainUnembed: lo.TrainUnembed},
		OptimizerConfig: lo.Optimizer, Type: "create_model"}, &f)
	if err == nil {
		_, err = newFuture(s.c, f.RequestID, false, jsonDecoder[wire.CreateModelResponse]).Result(ctx)
	}
	end(err)
	if err != nil {
		return nil, err
	}
	return &TrainingClient{s: s, c: s.c, ModelID: *f.ModelID, BaseModel: baseModel}, nil
}

// CreateTrainingClientFromState starts a run from a saved state (tinker://…/weights/…),
// with its optimizer state when withOptimizer.
func (s *ServiceClient) CreateTrainingClientFromState(ctx context.Context, path string, withOptimizer bool) (*TrainingClient, error) {
	var wi wire.WeightsInfoResponse
	if err := s.c.call(ctx, "POST", "/api/v1/weights_info", wire.WeightsInfoRequest{TinkerPath: path}, &wi); err != nil {
		return nil, err
	}
	lo := LoraOptions{Rank: 32, TrainAttn: true, TrainMLP: true, TrainUnembed: true}
	if wi.LoraRank != nil {
		lo.Rank = *wi.LoraRank
	}
	if wi.TrainAttn != nil {
		lo.TrainAttn, lo.TrainMLP, lo.TrainUnembed = *wi.TrainAttn, *wi.TrainMLP, *wi.TrainUnembed
	}
	lo.Optimizer = wi.OptimizerConfig // the run trains with the checkpoint's optimizer
	tc, err := s.CreateLoRATrainingClient(ctx, wi.BaseModel, lo)
	if err != nil {
		return nil, err
	}
	f, err := tc.LoadState(ctx, path, withOptimizer)
	if err != nil {
		return nil, err
	}
	if _, err := f.Result(ctx); err != nil {
		return nil, err
	}
	return tc, nil
}

// CreateSamplingClient opens a sampling session on a sampler checkpoint path
// (tinker://…) or, when modelPath is empty, on baseModel.
func (s *ServiceClient) CreateSamplingClient(ctx context.Context, modelPath, baseModel string) (*SamplingClient, error) {
	s.mu.Lock()
	seq := s.samplingSeq
	s.samplingSeq++
	s.mu.Unlock()
	req := wire.CreateSamplingSessionRequest{SessionID: s.sessionID, SamplingSessionSeqID: seq, Type: "create_sampling_session"}
	if modelPath != "" {
		req.ModelPath = &modelPath
	} else {
		req.BaseModel = &baseModel
	}
	var r wire.CreateSamplingSessionResponse
	if err := s.c.call(ctx, "POST", "/api/v1/create_sampling_session", req, &r); err != nil {
		return nil, err
	}
	return &SamplingClient{c: s.c, ID: r.SamplingSessionID}, nil
}

// REST returns a client of the REST routes (runs, checkpoints, sessions).
func (s *ServiceClient) REST() *RestClient { return &RestClient{c: s.c} }

// TrainingClient drives one training run. Its operations are numbered with consecutive
// seq_ids in the order they are called, so they may be pipelined safely.
type TrainingClient struct {
	s         *ServiceClient
	c         *conn
	ModelID   string
	BaseModel string

	turn sync.Mutex // operations are submitted in seq_id order
	seq  int64
}

// submit sends one numbered operation; build gets the seq_id.
func (t *TrainingClient) submit(ctx context.Context, path string, contentType string, build func(seq int64) ([]byte, error)) (string, error) {
	t.turn.Lock()
	defer t.turn.Unlock()
	seq := t.seq + 1
	body, err := build(seq)
	if err != nil {
		return "", err
	}
	r, err := t.c.do(ctx, "POST", path, body, contentType, "application/json", true)
	if err != nil {
		return "", err
	}
	if r.status/100 != 2 {
		return "", apiError(r)
	}
	var f wire.UntypedAPIFuture
	if err := json.Unmarshal(r.body, &f); err != nil {
		return "", err
	}
	t.seq = seq
	return f.RequestID, nil
}

// ForwardBackward computes the loss and accumulates gradients for data.
func (t *TrainingClient) ForwardBackward(ctx context.Context, data []wire.Datum, lossFn string, cfg map[string]float64) (*Future[wire.ForwardBackwardOutput], error) {
	return t.fwd(ctx, data, lossFn, cfg, false)
}

// Forward computes the loss and per-token logprobs without gradients.
func (t *TrainingClient) Forward(ctx context.Context, data []wire.Datum, lossFn string, cfg map[string]float64) (*Future[wire.ForwardBackwardOutput], error) {
	return t.fwd(ctx, data, lossFn, cfg, true)
}

func (t *TrainingClient) fwd(ctx context.Context, data []wire.Datum, lossFn string, cfg map[string]float64, forwardOnly bool) (*Future[wire.ForwardBackwardOutput], error) {
	ctx, end := t.c.span(ctx, telemetry.SpanClientForwardBackward, attribute.String(telemetry.AttrTrainingRunID, t.ModelID),
		attribute.Int(telemetry.AttrDataCount, len(data)))
	id, err := t.submit(ctx, "/api/v1/forward_backward", "application/x-protobuf", func(seq int64) ([]byte, error) {
		return wire.EncodeForwardBackwardProto(wire.ForwardBackwardCall{ModelID: t.ModelID, SeqID: seq, ForwardOnly: forwardOnly,
			Req: wire.ForwardBackwardInput{Data: data, LossFn: lossFn, LossFnConfig: cfg}})
	})
	end(err)
	if err != nil {
		return nil, err
	}
	return newFuture(t.c, id, true, func(body []byte, ct string) (wire.ForwardBackwardOutput, error) {
		if ct != "application/x-protobuf" {
			return wire.ForwardBackwardOutput{}, fmt.Errorf("tuft: forward_backward result came as %q, not protobuf", ct)
		}
		return wire.DecodeForwardBackwardOutputProto(body)
	}), nil
}

func (t *TrainingClient) submitJSON(ctx context.Context, path string, body func(seq int64) any) (string, error) {
	return t.submit(ctx, path, "application/json", func(seq int64) ([]byte, error) { return json.Marshal(body(seq)) })
}

// OptimStep applies AdamW with p.
func (t *TrainingClient) OptimStep(ctx context.Context, p wire.AdamParams) (*Future[map[string]float64], error) {
	ctx, end := t.c.span(ctx, telemetry.SpanClientOptimStep, attribute.String(telemetry.AttrTrainingRunID, t.ModelID))
	id, err := t.submitJSON(ctx, "/api/v1/optim_step", func(seq int64) any {
		return wire.OptimStepRequest{AdamParams: p, ModelID: t.ModelID, SeqID: &seq, Type: "optim_step"}
	})
	end(err)
	if err != nil {
		return nil, err
	}
	return newFuture(t.c, id, false, func(b []byte, ct string) (map[string]float64, error) {
		r, err := jsonDecoder[wire.OptimStepResponse](b, ct)
		return r.Metrics, err
	}), nil
}

// SaveState saves the adapter and optimizer state as name; the future gives its
// tinker:// path.
func (t *TrainingClient) SaveState(ctx context.Context, name string) (*Future[string], error) {
	id, err := t.submitJSON(ctx, "/api/v1/save_weights", func(seq int64) any {
		return wire.SaveWeightsRequest{ModelID: t.ModelID, Path: &name, SeqID: &seq, Type: "save_weights"}
	})
	if err != nil {
		return nil, err
	}
	return newFuture(t.c, id, false, func(b []byte, ct string) (string, error) {
		r, err := jsonDecoder[wire.SaveWeightsResponse](b, ct)
		return r.Path, err
	}), nil
}

// SaveWeightsForSampler saves the adapter for sampling as name.
func (t *TrainingClient) SaveWeightsForSampler(ctx context.Context, name string) (*Future[string], error) {
	id, err := t.submitJSON(ctx, "/api/v1/save_weights_for_sampler", func(seq int64) any {
		return wire.SaveWeightsForSamplerRequest{ModelID: t.ModelID, Path: &name, SeqID: &seq, Type: "save_weights_for_sampler"}
	})
	if err != nil {
		return nil, err
	}
	return newFuture(t.c, id, false, func(b []byte, ct string) (string, error) {
		r, err := jsonDecoder[wire.SaveWeightsForSamplerResponse](b, ct)
		if err != nil || r.Path == nil {
			return "", fmt.Errorf("tuft: save_weights_for_sampler returned no path: %v", err)
		}
		return *r.Path, nil
	}), nil
}

// SaveWeightsAndGetSamplingClient snapshots the current weights into a new sampling
// session without naming a checkpoint.
func (t *TrainingClient) SaveWeightsAndGetSamplingClient(ctx context.Context) (*SamplingClient, error) {
	t.s.mu.Lock()
	sseq := t.s.samplingSeq
	t.s.samplingSeq++
	t.s.mu.Unlock()
	id, err := t.submitJSON(ctx, "/api/v1/save_weights_for_sampler", func(seq int64) any {
		return wire.SaveWeightsForSamplerRequest{ModelID: t.ModelID, SeqID: &seq, SamplingSessionSeqID: &sseq, Type: "save_weights_for_sampler"}
	})
	if err != nil {
		return nil, err
	}
	r, err := newFuture(t.c, id, false, jsonDecoder[wire.SaveWeightsForSamplerResponse]).Result(ctx)
	if err != nil {
		return nil, err
	}
	if r.SamplingSessionID == nil {
		return nil, fmt.Errorf("tuft: the server returned no sampling session")
	}
	return &SamplingClient{c: t.c, ID: *r.SamplingSessionID}, nil
}

// LoadState loads a saved state (with its optimizer state when withOptimizer).
func (t *TrainingClient) LoadState(ctx context.Context, path string, withOptimizer bool) (*Future[wire.LoadWeightsResponse], error) {
	id, err := t.submitJSON(ctx, "/api/v1/load_weights", func(seq int64) any {
		return wire.LoadWeightsRequest{ModelID: t.ModelID, Path: path, SeqID: &seq, Optimizer: withOptimizer, Type: "load_weights"}
	})
	if err != nil {
		return nil, err
	}
	return newFuture(t.c, id, false, jsonDecoder[wire.LoadWeightsResponse]), nil
}

// Info describes the run.
func (t *TrainingClient) Info(ctx context.Context) (wire.GetInfoResponse, error) {
	var r wire.GetInfoResponse
	err := t.c.call(ctx, "POST", "/api/v1/get_info", wire.GetInfoRequest{ModelID: t.ModelID, Type: "get_info"}, &r)
	return r, err
}

// SamplingClient samples from a base model or a saved adapter.
type SamplingClient struct {
	c   *conn
	ID  string
	mu  sync.Mutex
	seq int64
}

// SamplingParams control generation; zero values take the server's defaults except
// Temperature, whose zero means greedy — use DefaultSampling for temperature 1.
type SamplingParams struct {
	MaxTokens   int
	Temperature float64
	TopK        int // -1 or 0: no limit
	TopP        float64
	Seed        *int64
	Stop        []string
	StopTokens  []int32
}

// DefaultSampling is temperature 1, no truncation, up to maxTokens tokens.
func DefaultSampling(maxTokens int) SamplingParams {
	return SamplingParams{MaxTokens: maxTokens, Temperature: 1, TopK: -1, TopP: 1}
}

// Sample draws n continuations of prompt.
func (s *SamplingClient) Sample(ctx context.Context, prompt []int32, n int, p SamplingParams) (*Future[wire.SampleResponse], error) {
	return s.sample(ctx, prompt, n, p, false, SampleOutputs{})
}

// SampleOutputs asks a sample for outputs beside its sequences (SDK 0.38's sampling
// outputs); the zero value asks for none.
type SampleOutputs struct {
	// TopKSampleLogprobs > 0 returns, for every sampled token, the k most likely tokens
	// of the distribution it was drawn from (Sequence.TopK).
	TopKSampleLogprobs int
	// TargetPromptLogprobs has one row per prompt position after the first (row i scores
	// prompt[i+1]): the token ids whose logprobs to return there
	// (SampleResponse.PromptTargetLogprobs); shorter rows are padded with -1, which asks
	// nothing. Nil asks for none.
	TargetPromptLogprobs [][]int32
	// PromptAltTokensK > 0 draws that many tokens at every prompt position after the
	// first (SampleResponse.PromptAltTokens).
	PromptAltTokensK int
}

// SampleWithOutputs is Sample that also asks for the outputs o names.
func (s *SamplingClient) SampleWithOutputs(ctx context.Context, prompt []int32, n int, p SamplingParams, o SampleOutputs) (*Future[wire.SampleResponse], error) {
	if o.TargetPromptLogprobs != nil && len(o.TargetPromptLogprobs) != len(prompt)-1 {
		return nil, fmt.Errorf("tuft: TargetPromptLogprobs has %d rows; a prompt of %d tokens needs %d (one per position after the first)",
			len(o.TargetPromptLogprobs), len(prompt), len(prompt)-1)
	}
	return s.sample(ctx, prompt, n, p, false, o)
}

// denseTargets is target_prompt_logprobs as the dense int64 tensor the API takes, rows
// padded with -1 to the longest.
func denseTargets(rows [][]int32) *wire.TensorData {
	cols := 0
	for _, r := range rows {
		cols = max(cols, len(r))
	}
	data := make([]json.Number, 0, len(rows)*cols)
	for _, r := range rows {
		for j := range cols {
			id := int32(-1)
			if j < len(r) {
				id = r[j]
			}
			data = append(data, json.Number(strconv.Itoa(int(id))))
		}
	}
	return &wire.TensorData{Data: data, DType: "int64", Shape: []int64{int64(len(rows)), int64(cols)}}
}

func (s *SamplingClient) sample(ctx context.Context, prompt []int32, n int, p SamplingParams, promptLogprobs bool, o SampleOutputs) (*Future[wire.SampleResponse], error) {
	ctx, end := s.c.span(ctx, telemetry.SpanClientSample, attribute.String(telemetry.AttrSamplingSessionID, s.ID),
		attribute.Int(telemetry.AttrNumSamples, n))
	s.mu.Lock()
	seq := s.seq
	s.seq++
	s.mu.Unlock()
	toks := make([]int64, len(prompt))
	for i, t := range prompt {
		toks[i] = int64(t)
	}
	topP, topK, temp := p.TopP, p.TopK, p.Temperature
	if topP == 0 {
		topP = 1
	}
	if topK == 0 {
		topK = -1
	}
	sp := wire.SamplingParams{Seed: p.Seed, Temperature: &temp, TopK: &topK, TopP: &topP}
	if p.MaxTokens > 0 {
		sp.MaxTokens = &p.MaxTokens
	}
	if len(p.Stop) > 0 || len(p.StopTokens) > 0 {
		sp.Stop = &wire.Stop{Strings: p.Stop, Tokens: p.StopTokens}
	}
	req := wire.SampleRequest{NumSamples: &n, Prompt: wire.ModelInput{Chunks: []wire.Chunk{{Type: "encoded_text", Tokens: toks}}},
		SamplingParams: sp, SamplingSessionID: &s.ID, SeqID: &seq, PromptLogprobs: &promptLogprobs, Type: "sample",
		TopkSampleLogprobs: o.TopKSampleLogprobs, PromptAltTokensK: o.PromptAltTokensK}
	if o.TargetPromptLogprobs != nil {
		req.TargetPromptLogprobs = denseTargets(o.TargetPromptLogprobs)
	}
	var f wire.UntypedAPIFuture
	err := s.c.call(ctx, "POST", "/api/v1/asample", req, &f)
	end(err)
	if err != nil {
		return nil, err
	}
	return newFuture(s.c, f.RequestID, true, func(body []byte, ct string) (wire.SampleResponse, error) {
		if ct != "application/x-protobuf" {
			return wire.SampleResponse{}, fmt.Errorf("tuft: sample result came as %q, not protobuf", ct)
		}
		return wire.DecodeSampleResponseProto(body)
	}), nil
}

// ComputeLogprobs returns log p(prompt[i] | prompt[:i]) for each position (NaN at 0).
func (s *SamplingClient) ComputeLogprobs(ctx context.Context, prompt []int32) ([]float32, error) {
	f, err := s.sample(ctx, prompt, 1, SamplingParams{MaxTokens: 1, Temperature: 1, TopK: -1, TopP: 1}, true, SampleOutputs{})
	if err != nil {
		return nil, err
	}
	r, err := f.Result(ctx)
	return r.PromptLogprobs, err
}

// mustJSON encodes v, which cannot fail for the wire's request types.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
