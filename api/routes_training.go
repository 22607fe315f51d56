package api

import (
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

func (h *Handler) createModel(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.CreateModelRequest
	body, ok := h.decode(w, r, &req)
	if !ok {
		return
	}
	if req.LoraConfig == nil {
		h.badRequest(w, r, fmt.Errorf("lora_config is required: only LoRA training is supported"))
		return
	}
	optimizer, err := req.OptimizerConfig.Family("optimizer_config")
	if err != nil {
		h.badRequest(w, r, err)
		return
	}
	r = annotate(r, telemetry.Keys{SessionID: req.SessionID, BaseModel: req.BaseModel, LoraRank: req.LoraConfig.Rank,
		OperationType: telemetry.OpCreateModel, TrainingRunID: service.RunID(req.SessionID, req.ModelSeqID)})
	lc := loraConfig(*req.LoraConfig, time.Now().UnixNano())
	id, runID, err := h.svc.CreateModel(r.Context(), tenant, service.CreateModelInput{
		SessionID: req.SessionID, ModelSeqID: req.ModelSeqID, BaseModel: req.BaseModel, Lora: lc,
		UserMetadata: req.UserMetadata, PayloadHash: payloadHash(body), Optimizer: optimizer}, h.enc)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.UntypedAPIFuture{RequestID: id, ModelID: &runID})
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

func (h *Handler) unloadModel(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.UnloadModelRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	r = annotate(r, telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpUnloadModel})
	id, err := h.svc.UnloadModel(r.Context(), tenant, req.ModelID, h.enc)
	h.future(w, r, id, req.ModelID, err)
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
func (h *Handler) forwardBackward(w http.ResponseWriter, r *http.Request, tenant string) {
	h.fwd(w, r, tenant, false)
}

func (h *Handler) forward(w http.ResponseWriter, r *http.Request, tenant string) {
	h.fwd(w, r, tenant, true)
}

func (h *Handler) fwd(w http.ResponseWriter, r *http.Request, tenant string, forwardRoute bool) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	hash := payloadHash(body) // readBody has undone any Content-Encoding
	op := telemetry.OpForwardBackward
	if forwardRoute {
		op = telemetry.OpForward
	}
	isProto := strings.Contains(r.Header.Get("Content-Type"), "protobuf")
	// Whose run it is, before the costly decode: another tenant's (or a missing) run
	// costs no more than reading its id.
	if id, ok := wire.PeekModelID(body, isProto); ok {
		if err := h.svc.CheckRun(tenant, id); err != nil {
			h.fail(w, r, err)
			return
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
		h.refuse(w, r, tenant, service.OpMeta{ModelID: model, SeqID: seq, PayloadHash: hash, InOrder: inOrderSender(r)}, op, invalid(err))
		return
	}
	if forwardRoute {
		call.ForwardOnly = true
	}
	req := forwardRequest(call)
	op = telemetry.OpForward
	if req.Backward {
		op = telemetry.OpForwardBackward
	}
	r = annotate(r, telemetry.Keys{TrainingRunID: call.ModelID, OperationType: op, Backward: &req.Backward})
	meta := service.OpMeta{ModelID: call.ModelID, SeqID: call.SeqID, PayloadHash: hash, InOrder: inOrderSender(r)}
	m := meta
	if !call.HasSeqID {
		m.ModelID = "" // nothing to settle without a seq_id
	}
	id, err := h.svc.ForwardBackward(r.Context(), tenant, meta, req, h.enc)
	if err != nil {
		h.refuse(w, r, tenant, m, op, err)
		return
	}
	h.future(w, r, id, call.ModelID, nil)
}

func (h *Handler) optimStep(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.OptimStepRequest
	body, ok := h.decodeOp(w, r, tenant, telemetry.OpOptimStep, &req)
	if !ok {
		return
	}
	r = annotate(r, telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpOptimStep})
	m := opMeta(r, req.ModelID, req.SeqID, body)
	sp, err := req.OptimParams()
	if err != nil {
		h.refuse(w, r, tenant, m, telemetry.OpOptimStep, invalid(err))
		return
	}
	op := service.OptimParams{Optimizer: sp.Family, Adam: adamParams(sp.Adam)}
	if sp.Dimuon != nil {
		d := dimuonParams(*sp.Dimuon)
		op.Dimuon = &d
	}
	id, err := h.svc.OptimStep(r.Context(), tenant, m, op, h.enc)
	h.opFuture(w, r, tenant, m, telemetry.OpOptimStep, id, err)
}

func (h *Handler) saveWeights(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.SaveWeightsRequest
	body, ok := h.decodeOp(w, r, tenant, telemetry.OpSaveWeights, &req)
	if !ok {
		return
	}
	r = annotate(r, telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpSaveWeights})
	name := deref(req.Path)
	if name == "" {
		name = fmt.Sprintf("%06d", deref(req.SeqID))
	}
	m := opMeta(r, req.ModelID, req.SeqID, body)
	id, err := h.svc.Save(r.Context(), tenant, service.SaveInput{
		OpMeta: m, Name: name, TTLSeconds: req.TTLSeconds, Overwrite: req.Overwrite, UserMetadata: req.UserMetadata}, h.enc)
	h.opFuture(w, r, tenant, m, telemetry.OpSaveWeights, id, err)
}

// saveWeightsForSampler saves a sampler checkpoint (named) or makes a sampling session
// of the current weights (ephemeral). kind "inflight" (SDK 0.38, ephemeral form) makes
// one that follows the run's newest inflight save (see service/inflight.go).
func (h *Handler) saveWeightsForSampler(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.SaveWeightsForSamplerRequest
	body, ok := h.decodeOp(w, r, tenant, telemetry.OpSaveWeightsForSampler, &req)
	if !ok {
		return
	}
	r = annotate(r, telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpSaveWeightsForSampler})
	m := opMeta(r, req.ModelID, req.SeqID, body)
	if k := deref(req.Kind); k != "" && k != "snapshot" && k != "inflight" {
		h.refuse(w, r, tenant, m, telemetry.OpSaveWeightsForSampler, invalid(fmt.Errorf("kind %q must be \"snapshot\" or \"inflight\"", k)))
		return
	}
	id, err := h.svc.Save(r.Context(), tenant, service.SaveInput{
		OpMeta: m, Name: deref(req.Path), TTLSeconds: req.TTLSeconds, Sampler: true, SamplerSeq: req.SamplingSessionSeqID,
		UserMetadata: req.UserMetadata, Inflight: deref(req.Kind) == service.SamplerInflight}, h.enc)
	h.opFuture(w, r, tenant, m, telemetry.OpSaveWeightsForSampler, id, err)
}

// loadWeights serves both forms of load_weights: on an existing run (model_id and
// seq_id: SDK <= 0.36, and TrainingClient.load_state), and create-via-load (session_id
// and model_seq_id: SDK 0.38's create_training_client_from_state), which creates the run.
func (h *Handler) loadWeights(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.LoadWeightsRequest
	body, ok := h.decodeOp(w, r, tenant, telemetry.OpLoadWeights, &req)
	if !ok {
		return
	}
	var tokenErr error
	if req.WeightsAccessToken != nil && *req.WeightsAccessToken != "" {
		tokenErr = fmt.Errorf("weights_access_token is not supported: this server shares checkpoints by publishing them (load a published checkpoint without a token)")
	}
	if req.ModelID == "" {
		if tokenErr != nil {
			h.badRequest(w, r, tokenErr)
			return
		}
		h.createViaLoad(w, r, tenant, &req, body)
		return
	}
	m := opMeta(r, req.ModelID, req.SeqID, body)
	r = annotate(r, telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpLoadWeights})
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
		h.refuse(w, r, tenant, m, telemetry.OpLoadWeights, invalid(err))
		return
	}
	id, err := h.svc.Load(r.Context(), tenant, service.LoadInput{OpMeta: m, Path: req.Path, Optimizer: req.Optimizer}, h.enc)
	h.opFuture(w, r, tenant, m, telemetry.OpLoadWeights, id, err)
}

func (h *Handler) createViaLoad(w http.ResponseWriter, r *http.Request, tenant string, req *wire.LoadWeightsRequest, body []byte) {
	switch {
	case req.SessionID == nil || req.ModelSeqID == nil:
		h.badRequest(w, r, fmt.Errorf("load_weights needs model_id (load into an existing run) or session_id and model_seq_id (create a run from the checkpoint)"))
		return
	case req.SeqID != nil:
		h.badRequest(w, r, fmt.Errorf("seq_id goes with model_id; a load that creates a run (session_id and model_seq_id) is the run's seq_id 0"))
		return
	}
	family, err := req.OptimizerConfig.Family("optimizer_config")
	if err != nil {
		h.badRequest(w, r, err)
		return
	}
	runID := service.RunID(*req.SessionID, *req.ModelSeqID)
	r = annotate(r, telemetry.Keys{SessionID: *req.SessionID, TrainingRunID: runID, OperationType: telemetry.OpLoadWeights})
	id, runID, err := h.svc.CreateFromCheckpoint(r.Context(), tenant, service.CreateFromCheckpointInput{
		SessionID: *req.SessionID, ModelSeqID: *req.ModelSeqID, Path: req.Path, Optimizer: req.Optimizer,
		BaseModel: deref(req.BaseModel), OptimizerConfig: family, UserMetadata: req.UserMetadata, PayloadHash: payloadHash(body)}, h.enc)
	h.future(w, r, id, runID, err)
}
