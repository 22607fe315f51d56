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
	m.HandleFunc("GET /api/v1/archive/{token}", h.archiveDownload)              // signed link, no API key
	m.HandleFunc("GET /api/v1/external_weights/{token}/{file}", h.externalFile) // signed link, no API key

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
	a("POST /api/v1/save_weights_external", h.saveWeightsExternal)
	a("POST /api/v1/asample", h.asample)
	a("POST /api/v1/retrieve_future", h.retrieveFuture)
	a("POST /api/v1/retrieve_futures", h.retrieveFutures)
	a("POST /api/v1/cancel_future", h.cancelFuture)
	a("POST /api/v1/join_sampling_session", h.joinSamplingSession)
	a("POST /api/v1/copy_weights", h.copyWeights)
	a("POST /api/v1/sessions/search", h.searchSessions)
	a("GET /api/v1/billing/usage/checkpoints/current", h.checkpointStorage)
	a("GET /api/v1/auth/apikey/me", h.apiKeyMe)
	a("DELETE /api/v1/auth/apikey/me", h.deleteAPIKeyMe)
	// Newer SDK routes this server does not implement: a 400 that says why rather than a
	// 404 (docs/compatibility.md).
	a("POST /api/v1/create_custom_loss", h.refusedRoute("server-side custom losses (create_custom_loss) are not supported: this server "+
		"advertises custom_loss_server_side false, so the SDK runs forward_backward_custom on the client"))
	a("GET /api/v1/billing/usage/events", h.refusedRoute("billing usage events are not recorded: TuFT bills nothing "+
		"(GET /api/v1/billing/usage/checkpoints/current reports checkpoint storage)"))
	a("GET /api/v1/audit", h.refusedRoute("audit logs are not kept by this server (the server's log and traces record operations)"))

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
	a("POST /api/v1/sessions/{session_id}/finish", h.finishSession)

	h.mountCompat() // /oai/api/v1 and /anthropic/api (compat.go)

	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Detail: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path), Category: "user"})
	})
}

func payloadHash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// decode reads and decodes a JSON request body into v, answering 400/413 itself on
// failure. Fields v does not declare are refused unless they hold their zero value
// (wire.DecodeRequest).
func (h *Handler) decode(w http.ResponseWriter, r *http.Request, v any) ([]byte, bool) {
	b, ok := h.readBody(w, r)
	if !ok {
		return nil, false
	}
	if err := wire.DecodeRequest(b, v); err != nil {
		h.badRequest(w, r, err)
		return nil, false
	}
	return b, true
}

// decodeOp is decode for a training operation: a body refused here still settles the
// seq_id it names (see refuse).
func (h *Handler) decodeOp(w http.ResponseWriter, r *http.Request, tenant, op string, v any) ([]byte, bool) {
	b, ok := h.readBody(w, r)
	if !ok {
		return nil, false
	}
	if err := wire.DecodeRequest(b, v); err != nil {
		model, seq, _ := wire.OpAddress(b)
		h.refuse(w, r, tenant, service.OpMeta{ModelID: model, SeqID: seq, PayloadHash: payloadHash(b), InOrder: inOrderSender(r)}, op, invalid(err))
		return nil, false
	}
	return b, true
}

func invalid(err error) error {
	return &service.Error{Kind: service.KindInvalid, Msg: err.Error(), Err: err}
}

// refuse answers a training operation refused at submission, after settling its seq_id:
// the SDK has reserved it and never sends it again, so the run's next operation must not
// wait for it. The answer names the problem (400 for bad input). A request about a run
// of another replica is forwarded there instead, which refuses and settles it itself.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, tenant string, m service.OpMeta, op string, err error) {
	if m.ModelID != "" {
		if ee := h.svc.Refused(r.Context(), tenant, m, op, err); ee != nil {
			h.fail(w, r, ee)
			return
		}
	}
	h.fail(w, r, err)
}

// opFuture answers a training operation's submission: its future, or the refusal.
func (h *Handler) opFuture(w http.ResponseWriter, r *http.Request, tenant string, m service.OpMeta, op, id string, err error) {
	if err != nil {
		h.refuse(w, r, tenant, m, op, err)
		return
	}
	h.future(w, r, id, m.ModelID, nil)
}

// refusedRoute answers a route of a newer SDK that this server does not implement, with
// the reason.
func (h *Handler) refusedRoute(why string) func(w http.ResponseWriter, r *http.Request, tenant string) {
	return func(w http.ResponseWriter, r *http.Request, tenant string) {
		h.badRequest(w, r, fmt.Errorf("%s %s: %s", r.Method, r.URL.Path, why))
	}
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, wire.HealthResponse{Status: "ok"})
}

func (h *Handler) clientConfig(w http.ResponseWriter, r *http.Request, tenant string) {
	writeJSON(w, http.StatusOK, wire.ServerClientConfig())
}

func (h *Handler) dynamicConfig(w http.ResponseWriter, r *http.Request, tenant string) {
	// The body only says which SDK asks; it is read so the connection stays reusable (a
	// reply that leaves a body unread closes it, see guardBody).
	if _, ok := h.readBody(w, r); !ok {
		return
	}
	writeJSON(w, http.StatusOK, wire.ServerDynamicConfig())
}

func (h *Handler) capabilities(w http.ResponseWriter, r *http.Request, tenant string) {
	var resp wire.GetServerCapabilitiesResponse
	for _, m := range h.svc.Models() {
		// Every served model takes LoRA training runs and sampling.
		name, ctx, yes := m.Name, m.MaxContextLength, true
		resp.SupportedModels = append(resp.SupportedModels, wire.SupportedModel{ModelName: &name, MaxContextLength: &ctx,
			Trainable: &yes, Sampleable: &yes})
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler) createSession(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.CreateSessionRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	in := service.CreateSessionInput{Tags: req.Tags, UserMetadata: req.UserMetadata, SDKVersion: req.SDKVersion,
		ProjectID: deref(req.ProjectID), DisplayName: deref(req.DisplayName)}
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
	optimizer, err := req.OptimizerConfig.Family("optimizer_config")
	if err != nil {
		h.badRequest(w, r, err)
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
		UserMetadata: req.UserMetadata, PayloadHash: payloadHash(body), Optimizer: optimizer}, h.enc)
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
	req := call.Req
	req.Backward = !call.ForwardOnly
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
	op := service.OptimParams{Optimizer: sp.Family, Adam: sp.Adam.Engine()}
	if sp.Dimuon != nil {
		d := sp.Dimuon.Engine()
		op.Dimuon = &d
	}
	id, err := h.svc.OptimStep(r.Context(), tenant, m, op, h.enc)
	h.opFuture(w, r, tenant, m, telemetry.OpOptimStep, id, err)
}

// opMeta names a training operation.
func opMeta(r *http.Request, modelID string, seq *int64, body []byte) service.OpMeta {
	return service.OpMeta{ModelID: modelID, SeqID: deref(seq), PayloadHash: payloadHash(body), InOrder: inOrderSender(r)}
}

// inOrderSender reports whether a request comes from the official Tinker SDK, which
// sends a training run's operations one after another (each once the previous
// submission was answered; this server advertises parallel_fwdbwd_chunks false). The
// run's queue then never waits for a seq_id the SDK reserved but did not send.
func inOrderSender(r *http.Request) bool {
	ua := r.Header.Get("User-Agent")
	return strings.HasPrefix(ua, "AsyncTinker/Python ") || strings.HasPrefix(ua, "Tinker/Python ")
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
	runID := fmt.Sprintf("%s:train:%d", *req.SessionID, *req.ModelSeqID)
	r = annotate(r, telemetry.Keys{SessionID: *req.SessionID, TrainingRunID: runID, OperationType: telemetry.OpLoadWeights})
	id, runID, err := h.svc.CreateFromCheckpoint(r.Context(), tenant, service.CreateFromCheckpointInput{
		SessionID: *req.SessionID, ModelSeqID: *req.ModelSeqID, Path: req.Path, Optimizer: req.Optimizer,
		BaseModel: deref(req.BaseModel), OptimizerConfig: family, UserMetadata: req.UserMetadata, PayloadHash: payloadHash(body)}, h.enc)
	h.future(w, r, id, runID, err)
}

func (h *Handler) asample(w http.ResponseWriter, r *http.Request, tenant string) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	if id, ok := wire.PeekJSONString(body, "sampling_session_id"); ok && id != "" {
		if err := h.svc.CheckSampler(tenant, id); err != nil {
			h.fail(w, r, err) // before the costly decode, as for forward_backward
			return
		}
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
		PayloadHash: payloadHash(body), Req: call.Req, PromptLogprobsLastN: call.PromptLogprobsLastN}, h.enc)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	annotate(r, telemetry.Keys{RequestID: id})
	writeJSON(w, http.StatusOK, wire.UntypedAPIFuture{RequestID: id, SampleSequenceIDs: wire.SampleSequenceIDs(id, call.Req.NumSamples)})
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
		if r.Context().Err() != nil {
			// The client went away (or timed out) during the long-poll: nobody to answer,
			// and nothing went wrong here.
			h.log.DebugContext(r.Context(), "client left during a long-poll", "request_id", req.RequestID)
			return
		}
		if ctx.Err() != nil {
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
	b, ok := h.readBody(w, r)
	if !ok {
		return
	}
	// Events are free-form: every field is logged, none is refused.
	if err := wire.DecodeJSON(b, &req); err != nil {
		h.badRequest(w, r, err)
		return
	}
	h.recordClientTelemetry(r.Context(), tenant, &req)
	writeJSON(w, http.StatusOK, wire.TelemetryResponse{Status: "accepted"})
}
