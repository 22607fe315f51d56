package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
)

// Handlers of training runs: creation, information, the training operations and the
// weights they save and load.

func (h *Handler) createModel(r *http.Request, tenant string, body []byte) (*operation, error) {
	var req wire.CreateModelRequest
	if err := wire.DecodeRequest(body, &req); err != nil {
		return nil, invalid(err)
	}
	if req.LoraConfig == nil {
		return nil, invalid(fmt.Errorf("lora_config is required: only LoRA training is supported"))
	}
	optimizer, err := req.OptimizerConfig.Family("optimizer_config")
	if err != nil {
		return nil, invalid(err)
	}
	runID := service.RunID(req.SessionID, req.ModelSeqID)
	lc := loraConfig(*req.LoraConfig, time.Now().UnixNano())
	in := service.CreateModelInput{SessionID: req.SessionID, ModelSeqID: req.ModelSeqID, BaseModel: req.BaseModel, Lora: lc,
		UserMetadata: req.UserMetadata, PayloadHash: payloadHash(body), Optimizer: optimizer}
	return &operation{name: telemetry.OpCreateModel, model: runID,
		keys: telemetry.Keys{SessionID: req.SessionID, BaseModel: req.BaseModel, LoraRank: req.LoraConfig.Rank,
			OperationType: telemetry.OpCreateModel, TrainingRunID: runID},
		submit: func(ctx context.Context) (string, error) {
			id, _, err := h.svc.CreateModel(ctx, tenant, in)
			return id, err
		}}, nil
}

func (h *Handler) getInfo(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.GetInfoRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	info, err := h.svc.GetInfo(tenant, req.ModelID)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	isLora, rank, name := true, info.LoraRank, info.BaseModel
	arch := info.Arch
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.GetInfoResponse{
		ModelID: info.ModelID, ModelData: wire.ModelData{Arch: &arch, ModelName: &name, TokenizerID: &name},
		IsLora: &isLora, LoraRank: &rank, ModelName: &name, OptimizerConfig: wire.EchoOptimizer(info.Optimizer), Type: "get_info"})
}

func (h *Handler) unloadModel(r *http.Request, tenant string, body []byte) (*operation, error) {
	var req wire.UnloadModelRequest
	if err := wire.DecodeRequest(body, &req); err != nil {
		return nil, invalid(err)
	}
	return &operation{name: telemetry.OpUnloadModel, model: req.ModelID,
		keys: telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpUnloadModel},
		submit: func(ctx context.Context) (string, error) {
			return h.svc.UnloadModel(ctx, tenant, req.ModelID)
		}}, nil
}

func (h *Handler) weightsInfo(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.WeightsInfoRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	c, err := h.svc.WeightsInfo(tenant, req.TinkerPath)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rank, ta, tm, tu := c.Lora.Rank, c.Lora.TrainAttn, c.Lora.TrainMLP, c.Lora.TrainUnembed
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.WeightsInfoResponse{BaseModel: c.BaseModel, IsLora: true, LoraRank: &rank,
		TrainAttn: &ta, TrainMLP: &tm, TrainUnembed: &tu, OptimizerConfig: wire.EchoOptimizer(c.OptimizerOf())})
}

// forwardBackward accepts the 0.25 protobuf body (optionally zstd) and the JSON form of
// SDK 0.18-0.24.
func (h *Handler) forwardBackward(r *http.Request, tenant string, body []byte) (*operation, error) {
	return h.fwd(r, tenant, body, false)
}

func (h *Handler) forward(r *http.Request, tenant string, body []byte) (*operation, error) {
	return h.fwd(r, tenant, body, true)
}

func (h *Handler) fwd(r *http.Request, tenant string, body []byte, forwardRoute bool) (*operation, error) {
	hash := payloadHash(body) // the body layer has undone any Content-Encoding
	op := telemetry.OpForwardBackward
	if forwardRoute {
		op = telemetry.OpForward
	}
	isProto := strings.Contains(r.Header.Get("Content-Type"), "protobuf")
	// Whose run it is, before the costly decode: another tenant's (or a missing) run
	// costs no more than reading its id.
	if id, ok := wire.PeekModelID(body, isProto); ok {
		if err := h.svc.CheckRun(tenant, id); err != nil {
			return nil, err
		}
	}
	var call *wire.ForwardBackwardCall
	var err error
	if isProto {
		call, err = wire.DecodeForwardBackwardProto(body)
	} else {
		call, err = wire.DecodeForwardBackwardJSON(body, forwardRoute)
	}
	if err != nil {
		model, seq, _ := wire.ForwardBackwardAddress(body, isProto)
		return &operation{name: op, settle: service.OpMeta{ModelID: model, SeqID: seq, PayloadHash: hash, InOrder: inOrderSender(r)}}, invalid(err)
	}
	if forwardRoute {
		call.ForwardOnly = true
	}
	req := forwardRequest(call)
	op = telemetry.OpForward
	if req.Backward {
		op = telemetry.OpForwardBackward
	}
	meta := service.OpMeta{ModelID: call.ModelID, SeqID: call.SeqID, PayloadHash: hash, InOrder: inOrderSender(r)}
	m := meta
	if !call.HasSeqID {
		m.ModelID = "" // nothing to settle without a seq_id
	}
	return &operation{name: op, settle: m, model: call.ModelID,
		keys: telemetry.Keys{TrainingRunID: call.ModelID, OperationType: op, Backward: &req.Backward},
		submit: func(ctx context.Context) (string, error) {
			return h.svc.ForwardBackward(ctx, tenant, meta, req)
		}}, nil
}

func (h *Handler) optimStep(r *http.Request, tenant string, body []byte) (*operation, error) {
	var req wire.OptimStepRequest
	if op, err := decodeOp(r, body, telemetry.OpOptimStep, &req); err != nil {
		return op, err
	}
	m := opMeta(r, req.ModelID, req.SeqID, body)
	o := &operation{name: telemetry.OpOptimStep, settle: m, model: req.ModelID,
		keys: telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpOptimStep}}
	sp, err := req.OptimParams()
	if err != nil {
		return o, invalid(err)
	}
	op := service.OptimParams{Optimizer: sp.Family, Adam: adamParams(sp.Adam)}
	if sp.Dimuon != nil {
		d := dimuonParams(*sp.Dimuon)
		op.Dimuon = &d
	}
	o.submit = func(ctx context.Context) (string, error) {
		return h.svc.OptimStep(ctx, tenant, m, op)
	}
	return o, nil
}

func (h *Handler) saveWeights(r *http.Request, tenant string, body []byte) (*operation, error) {
	var req wire.SaveWeightsRequest
	if op, err := decodeOp(r, body, telemetry.OpSaveWeights, &req); err != nil {
		return op, err
	}
	name := deref(req.Path)
	if name == "" {
		name = fmt.Sprintf("%06d", deref(req.SeqID))
	}
	m := opMeta(r, req.ModelID, req.SeqID, body)
	in := service.SaveInput{OpMeta: m, Name: name, TTLSeconds: req.TTLSeconds, Overwrite: req.Overwrite, UserMetadata: req.UserMetadata}
	return &operation{name: telemetry.OpSaveWeights, settle: m, model: req.ModelID,
		keys: telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpSaveWeights},
		submit: func(ctx context.Context) (string, error) {
			return h.svc.Save(ctx, tenant, in)
		}}, nil
}

// saveWeightsForSampler saves a sampler checkpoint (named) or makes a sampling session
// of the current weights (ephemeral). kind "inflight" (SDK 0.38, ephemeral form) makes
// one that follows the run's newest inflight save (see service/inflight.go).
func (h *Handler) saveWeightsForSampler(r *http.Request, tenant string, body []byte) (*operation, error) {
	var req wire.SaveWeightsForSamplerRequest
	if op, err := decodeOp(r, body, telemetry.OpSaveWeightsForSampler, &req); err != nil {
		return op, err
	}
	m := opMeta(r, req.ModelID, req.SeqID, body)
	o := &operation{name: telemetry.OpSaveWeightsForSampler, settle: m, model: req.ModelID,
		keys: telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpSaveWeightsForSampler}}
	if k := deref(req.Kind); k != "" && k != "snapshot" && k != "inflight" {
		return o, invalid(fmt.Errorf("kind %q must be \"snapshot\" or \"inflight\"", k))
	}
	in := service.SaveInput{OpMeta: m, Name: deref(req.Path), TTLSeconds: req.TTLSeconds, Sampler: true, SamplerSeq: req.SamplingSessionSeqID,
		UserMetadata: req.UserMetadata, Inflight: deref(req.Kind) == service.SamplerInflight}
	o.submit = func(ctx context.Context) (string, error) {
		return h.svc.Save(ctx, tenant, in)
	}
	return o, nil
}

// loadWeights serves both forms of load_weights: on an existing run (model_id and
// seq_id: SDK <= 0.36, and TrainingClient.load_state), and create-via-load (session_id
// and model_seq_id: SDK 0.38's create_training_client_from_state), which creates the run.
func (h *Handler) loadWeights(r *http.Request, tenant string, body []byte) (*operation, error) {
	var req wire.LoadWeightsRequest
	if op, err := decodeOp(r, body, telemetry.OpLoadWeights, &req); err != nil {
		return op, err
	}
	var tokenErr error
	if req.WeightsAccessToken != nil && *req.WeightsAccessToken != "" {
		tokenErr = fmt.Errorf("weights_access_token is not supported: this server shares checkpoints by publishing them (load a published checkpoint without a token)")
	}
	if req.ModelID == "" {
		if tokenErr != nil {
			return nil, invalid(tokenErr)
		}
		return h.createViaLoad(tenant, &req, body)
	}
	m := opMeta(r, req.ModelID, req.SeqID, body)
	o := &operation{name: telemetry.OpLoadWeights, settle: m, model: req.ModelID,
		keys: telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpLoadWeights}}
	err := tokenErr
	switch {
	case err != nil:
	case req.SessionID != nil || req.ModelSeqID != nil:
		err = fmt.Errorf("load_weights takes model_id and seq_id (load into an existing run) or session_id and model_seq_id (create a run from the checkpoint), not both")
	case req.BaseModel != nil:
		err = fmt.Errorf("base_model applies when load_weights creates a run (session_id and model_seq_id); run %s already has its base model", req.ModelID)
	case req.UserMetadata != nil:
		err = fmt.Errorf("user_metadata applies when load_weights creates a run (session_id and model_seq_id); run %s already exists", req.ModelID)
	case req.OptimizerConfig != nil:
		err = fmt.Errorf("optimizer_config applies when load_weights creates a run (session_id and model_seq_id); run %s already has its optimizer", req.ModelID)
	}
	if err != nil {
		return o, invalid(err)
	}
	in := service.LoadInput{OpMeta: m, Path: req.Path, Optimizer: req.Optimizer}
	o.submit = func(ctx context.Context) (string, error) {
		return h.svc.Load(ctx, tenant, in)
	}
	return o, nil
}

func (h *Handler) createViaLoad(tenant string, req *wire.LoadWeightsRequest, body []byte) (*operation, error) {
	switch {
	case req.SessionID == nil || req.ModelSeqID == nil:
		return nil, invalid(fmt.Errorf("load_weights needs model_id (load into an existing run) or session_id and model_seq_id (create a run from the checkpoint)"))
	case req.SeqID != nil:
		return nil, invalid(fmt.Errorf("seq_id goes with model_id; a load that creates a run (session_id and model_seq_id) is the run's seq_id 0"))
	}
	family, err := req.OptimizerConfig.Family("optimizer_config")
	if err != nil {
		return nil, invalid(err)
	}
	runID := service.RunID(*req.SessionID, *req.ModelSeqID)
	in := service.CreateFromCheckpointInput{SessionID: *req.SessionID, ModelSeqID: *req.ModelSeqID, Path: req.Path, Optimizer: req.Optimizer,
		BaseModel: deref(req.BaseModel), OptimizerConfig: family, UserMetadata: req.UserMetadata, PayloadHash: payloadHash(body)}
	return &operation{name: telemetry.OpLoadWeights, model: runID,
		keys: telemetry.Keys{SessionID: *req.SessionID, TrainingRunID: runID, OperationType: telemetry.OpLoadWeights},
		submit: func(ctx context.Context) (string, error) {
			id, _, err := h.svc.CreateFromCheckpoint(ctx, tenant, in)
			return id, err
		}}, nil
}
