package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
)

func (h *Handler) routes() {
	m := h.mux
	m.HandleFunc("GET /api/v1/healthz", h.healthz)
	m.HandleFunc("GET /api/v1/archive/{token}", h.archiveDownload) // signed link, no API key

	a := func(pattern string, f func(w http.ResponseWriter, r *http.Request, tenant string)) {
		m.HandleFunc(pattern, h.authed(f))
	}
	// Closed after the reply: the SDK asks through a client it never closes (see closeAfter).
	m.HandleFunc("POST /api/v1/client/config", closeAfter(h.authed(h.clientConfig)))
	a("POST /api/v1/client/dynamic_config", h.dynamicConfig)
	a("GET /api/v1/get_server_capabilities", h.capabilities)
	a("POST /api/v1/telemetry", h.telemetryIntake)
	a("POST /api/v1/create_session", h.createSession)
	a("POST /api/v1/session_heartbeat", h.heartbeat)
	a("POST /api/v1/create_sampling_session", h.createSamplingSession)
	a("GET /api/v1/samplers/{sampler_id}", h.getSampler)

	a("POST /api/v1/create_model", h.createModel)
	a("POST /api/v1/get_info", h.getInfo)
	a("POST /api/v1/unload_model", h.unloadModel)
	a("POST /api/v1/weights_info", h.weightsInfo)
	a("POST /api/v1/forward_backward", h.forwardBackward)
	a("POST /api/v1/forward", h.forward)
	a("POST /api/v1/optim_step", h.optimStep)
	a("POST /api/v1/save_weights", h.saveWeights)
	a("POST /api/v1/save_weights_for_sampler", h.saveWeightsForSampler)
	a("POST /api/v1/load_weights", h.loadWeights)
	a("POST /api/v1/asample", h.asample)
	a("POST /api/v1/retrieve_future", h.retrieveFuture)

	a("GET /api/v1/training_runs", h.listRuns)
	a("GET /api/v1/training_runs/{run_id}", h.getRun)
	a("GET /api/v1/training_runs/{run_id}/checkpoints", h.listRunCheckpoints)
	a("GET /api/v1/checkpoints", h.listCheckpoints)
	// A checkpoint id holds a slash ("weights/<name>"), so the tail is parsed by hand.
	a("DELETE /api/v1/training_runs/{run_id}/checkpoints/{ckpt...}", h.checkpointDelete)
	a("POST /api/v1/training_runs/{run_id}/checkpoints/{ckpt...}", h.checkpointPost)
	a("PUT /api/v1/training_runs/{run_id}/checkpoints/{ckpt...}", h.checkpointPut)
	a("GET /api/v1/training_runs/{run_id}/checkpoints/{ckpt...}", h.checkpointGet)
	a("GET /api/v1/sessions", h.listSessions)
	a("GET /api/v1/sessions/{session_id}", h.getSession)
	a("PUT /api/v1/sessions/{session_id}/project", h.setSessionProject)

	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Detail: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path), Category: "user"})
	})
}

func payloadHash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// decode reads and decodes a JSON body into v, answering 400/413 itself on failure.
func (h *Handler) decode(w http.ResponseWriter, r *http.Request, v any) ([]byte, bool) {
	b, ok := h.readBody(w, r)
	if !ok {
		return nil, false
	}
	if err := wire.DecodeJSON(b, v); err != nil {
		h.badRequest(w, r, err)
		return nil, false
	}
	return b, true
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, wire.HealthResponse{Status: "ok"})
}

func (h *Handler) clientConfig(w http.ResponseWriter, r *http.Request, tenant string) {
	writeJSON(w, http.StatusOK, wire.ServerClientConfig())
}

func (h *Handler) dynamicConfig(w http.ResponseWriter, r *http.Request, tenant string) {
	writeJSON(w, http.StatusOK, wire.ClientDynamicConfigResponse{RefreshIntervalSec: 300})
}

func (h *Handler) capabilities(w http.ResponseWriter, r *http.Request, tenant string) {
	var resp wire.GetServerCapabilitiesResponse
	for _, m := range h.svc.Models() {
		name, ctx := m.Name, m.MaxContextLength
		resp.SupportedModels = append(resp.SupportedModels, wire.SupportedModel{ModelName: &name, MaxContextLength: &ctx})
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler) createSession(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.CreateSessionRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	in := service.CreateSessionInput{Tags: req.Tags, UserMetadata: req.UserMetadata, SDKVersion: req.SDKVersion}
	if req.ProjectID != nil {
		in.ProjectID = *req.ProjectID
	}
	se, err := h.svc.CreateSession(r.Context(), tenant, in)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	annotate(r, telemetry.Keys{SessionID: se.ID})
	writeJSON(w, http.StatusOK, wire.CreateSessionResponse{SessionID: se.ID, Type: "create_session"})
}

func (h *Handler) heartbeat(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.SessionHeartbeatRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	r = annotate(r, telemetry.Keys{SessionID: req.SessionID})
	if err := h.svc.Heartbeat(r.Context(), tenant, req.SessionID); err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.SessionHeartbeatResponse{Type: "session_heartbeat"})
}

func (h *Handler) createSamplingSession(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.CreateSamplingSessionRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	r = annotate(r, telemetry.Keys{SessionID: req.SessionID})
	base, path := deref(req.BaseModel), deref(req.ModelPath)
	sm, err := h.svc.CreateSamplingSession(r.Context(), tenant, req.SessionID, req.SamplingSessionSeqID, base, path)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	annotate(r, telemetry.Keys{SamplingSessionID: sm.ID})
	writeJSON(w, http.StatusOK, wire.CreateSamplingSessionResponse{SamplingSessionID: sm.ID, Type: "create_sampling_session"})
}

func deref[T any](p *T) T {
	var z T
	if p == nil {
		return z
	}
	return *p
}

func (h *Handler) getSampler(w http.ResponseWriter, r *http.Request, tenant string) {
	sm, err := h.svc.GetSampler(tenant, r.PathValue("sampler_id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resp := wire.GetSamplerResponse{SamplerID: sm.ID, BaseModel: sm.BaseModel}
	if sm.ModelPath != "" {
		resp.ModelPath = &sm.ModelPath
	}
	writeJSON(w, http.StatusOK, resp)
}

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
	r = annotate(r, telemetry.Keys{SessionID: req.SessionID, BaseModel: req.BaseModel, LoraRank: req.LoraConfig.Rank,
		OperationType: telemetry.OpCreateModel, TrainingRunID: fmt.Sprintf("%s:train:%d", req.SessionID, req.ModelSeqID)})
	lc := engine.LoraConfig{Rank: req.LoraConfig.Rank, TrainAttn: req.LoraConfig.TrainAttn, TrainMLP: req.LoraConfig.TrainMLP,
		TrainUnembed: req.LoraConfig.TrainUnembed}
	if req.LoraConfig.Seed != nil {
		lc.Seed = *req.LoraConfig.Seed
	} else {
		lc.Seed = time.Now().UnixNano()
	}
	id, runID, err := h.svc.CreateModel(r.Context(), tenant, service.CreateModelInput{
		SessionID: req.SessionID, ModelSeqID: req.ModelSeqID, BaseModel: req.BaseModel, Lora: lc,
		UserMetadata: req.UserMetadata, PayloadHash: payloadHash(body)}, h.enc)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.UntypedAPIFuture{RequestID: id, ModelID: &runID})
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
	writeJSON(w, http.StatusOK, wire.GetInfoResponse{
		ModelID: info.ModelID, ModelData: wire.ModelData{Arch: &arch, ModelName: &name, TokenizerID: &name},
		IsLora: &isLora, LoraRank: &rank, ModelName: &name, Type: "get_info"})
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

func (h *Handler) future(w http.ResponseWriter, r *http.Request, id, modelID string, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	annotate(r, telemetry.Keys{RequestID: id})
	f := wire.UntypedAPIFuture{RequestID: id}
	if modelID != "" {
		f.ModelID = &modelID
	}
	writeJSON(w, http.StatusOK, f)
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
	writeJSON(w, http.StatusOK, wire.WeightsInfoResponse{BaseModel: c.BaseModel, IsLora: true, LoraRank: &rank,
		TrainAttn: &ta, TrainMLP: &tm, TrainUnembed: &tu})
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
	hash := payloadHash(body)
	body, err := wire.Decompress(r.Header.Get("Content-Encoding"), body, h.opt.MaxRequestBytes)
	if err != nil {
		h.badRequest(w, r, err)
		return
	}
	var call *wire.ForwardBackwardCall
	ct := r.Header.Get("Content-Type")
	if strings.Contains(ct, "protobuf") {
		call, err = wire.DecodeForwardBackwardProto(body)
	} else {
		call, err = wire.DecodeForwardBackwardJSON(body, forwardRoute)
	}
	if err != nil {
		h.badRequest(w, r, err)
		return
	}
	if forwardRoute {
		call.ForwardOnly = true
	}
	req := call.Req
	req.Backward = !call.ForwardOnly
	op := telemetry.OpForward
	if req.Backward {
		op = telemetry.OpForwardBackward
	}
	r = annotate(r, telemetry.Keys{TrainingRunID: call.ModelID, OperationType: op, Backward: &req.Backward})
	id, err := h.svc.ForwardBackward(r.Context(), tenant, service.OpMeta{ModelID: call.ModelID, SeqID: call.SeqID, PayloadHash: hash}, req, h.enc)
	h.future(w, r, id, call.ModelID, err)
}

func (h *Handler) optimStep(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.OptimStepRequest
	body, ok := h.decode(w, r, &req)
	if !ok {
		return
	}
	p := req.AdamParams.Engine()
	r = annotate(r, telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpOptimStep})
	id, err := h.svc.OptimStep(r.Context(), tenant, service.OpMeta{ModelID: req.ModelID, SeqID: deref(req.SeqID), PayloadHash: payloadHash(body)}, p, h.enc)
	h.future(w, r, id, req.ModelID, err)
}

func (h *Handler) saveWeights(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.SaveWeightsRequest
	body, ok := h.decode(w, r, &req)
	if !ok {
		return
	}
	r = annotate(r, telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpSaveWeights})
	name := deref(req.Path)
	if name == "" {
		name = fmt.Sprintf("%06d", deref(req.SeqID))
	}
	id, err := h.svc.Save(r.Context(), tenant, service.SaveInput{
		OpMeta: service.OpMeta{ModelID: req.ModelID, SeqID: deref(req.SeqID), PayloadHash: payloadHash(body)},
		Name:   name, TTLSeconds: req.TTLSeconds, Overwrite: req.Overwrite}, h.enc)
	h.future(w, r, id, req.ModelID, err)
}

func (h *Handler) saveWeightsForSampler(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.SaveWeightsForSamplerRequest
	body, ok := h.decode(w, r, &req)
	if !ok {
		return
	}
	id, err := h.svc.Save(r.Context(), tenant, service.SaveInput{
		OpMeta: service.OpMeta{ModelID: req.ModelID, SeqID: deref(req.SeqID), PayloadHash: payloadHash(body)},
		Name:   deref(req.Path), TTLSeconds: req.TTLSeconds, Sampler: true, SamplerSeq: req.SamplingSessionSeqID}, h.enc)
	h.future(w, r, id, req.ModelID, err)
}

func (h *Handler) loadWeights(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.LoadWeightsRequest
	body, ok := h.decode(w, r, &req)
	if !ok {
		return
	}
	if req.ModelID == "" {
		h.badRequest(w, r, fmt.Errorf("load_weights needs model_id (create the training run first; create_model_via_load_weights is not enabled)"))
		return
	}
	r = annotate(r, telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpLoadWeights})
	id, err := h.svc.Load(r.Context(), tenant, service.LoadInput{
		OpMeta: service.OpMeta{ModelID: req.ModelID, SeqID: deref(req.SeqID), PayloadHash: payloadHash(body)},
		Path:   req.Path, Optimizer: req.Optimizer}, h.enc)
	h.future(w, r, id, req.ModelID, err)
}

func (h *Handler) asample(w http.ResponseWriter, r *http.Request, tenant string) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	call, err := wire.DecodeSampleRequest(body)
	if err != nil {
		h.badRequest(w, r, err)
		return
	}
	if call.ModelPath != "" && call.SamplingSessionID == "" {
		h.badRequest(w, r, fmt.Errorf("asample with model_path is not supported: create a sampling session for the checkpoint first"))
		return
	}
	r = annotate(r, telemetry.Keys{SamplingSessionID: call.SamplingSessionID, OperationType: telemetry.OpSample, BaseModel: call.BaseModel})
	id, err := h.svc.Sample(r.Context(), tenant, service.SampleInput{
		SamplingSessionID: call.SamplingSessionID, BaseModel: call.BaseModel, SeqID: call.SeqID,
		PayloadHash: payloadHash(body), Req: call.Req}, h.enc)
	h.future(w, r, id, "", err)
}

func (h *Handler) retrieveFuture(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.FutureRetrieveRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	r = annotate(r, telemetry.Keys{RequestID: req.RequestID})
	ctx, cancel := h.waitCtx(r.Context())
	defer cancel()
	rec, err := h.svc.Retrieve(ctx, tenant, req.RequestID, h.opt.LongPoll)
	if err != nil {
		if ctx.Err() != nil && r.Context().Err() == nil {
			// Shutting down: answer try_again so the client polls the next server.
			writeJSON(w, http.StatusRequestTimeout, wire.TryAgainResponse{Type: "try_again", RequestID: req.RequestID, QueueState: "active"})
			return
		}
		h.fail(w, r, err)
		return
	}
	switch rec.Status {
	case futures.Status("ready"):
		h.writeResult(w, r, rec.Result)
	case futures.Status("failed"):
		f := rec.Failure
		if f == nil {
			f = &futures.Failure{Message: "operation failed", Category: "unknown"}
		}
		writeJSON(w, http.StatusOK, wire.RequestFailedResponse{Error: f.Message, Category: string(f.Category)})
	default:
		qs := rec.QueueState
		if qs == "" {
			qs = "active"
		}
		writeJSON(w, http.StatusRequestTimeout, wire.TryAgainResponse{Type: "try_again", RequestID: req.RequestID, QueueState: qs})
	}
}

// writeResult answers with the stored result, converting protobuf results to JSON for
// clients that did not ask for protobuf (SDK 0.24 and older).
func (h *Handler) writeResult(w http.ResponseWriter, r *http.Request, res *futures.Result) {
	if res == nil {
		writeJSON(w, http.StatusOK, map[string]any{})
		return
	}
	if res.ContentType == ctProto && !strings.Contains(r.Header.Get("Accept"), "application/x-protobuf") {
		var b []byte
		var err error
		switch res.Kind {
		case kindForwardBackward:
			b, err = wire.ForwardBackwardOutputProtoToJSON(res.Body)
		case kindSample:
			b, err = wire.SampleResponseProtoToJSON(res.Body)
		default:
			err = fmt.Errorf("unknown result kind %q", res.Kind)
		}
		if err != nil {
			h.fail(w, r, fmt.Errorf("convert result to JSON: %w", err))
			return
		}
		w.Header().Set("Content-Type", ctJSON)
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Content-Type", res.ContentType)
	_, _ = w.Write(res.Body)
}

func queryInt(r *http.Request, name string, def, max int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || (max > 0 && n > max) {
		return 0, fmt.Errorf("query parameter %s=%q must be an integer in [0, %d]", name, v, max)
	}
	return n, nil
}

func (h *Handler) telemetryIntake(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.TelemetrySendRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	h.recordClientTelemetry(r.Context(), tenant, &req)
	writeJSON(w, http.StatusOK, wire.TelemetryResponse{Status: "accepted"})
}
