package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/service"
)

func (h *Handler) routes() {
	m := h.table
	public := routeInfo{public: true}
	m.handle("GET /api/v1/healthz", public, h.healthz)
	m.handle("GET /api/v1/archive/{token}", public, h.archiveDownload)              // signed link, no API key
	m.handle("GET /api/v1/external_weights/{token}/{file}", public, h.externalFile) // signed link, no API key
	m.handle("GET /api/v1/session_trace/{token}", public, h.traceDownload)          // signed link, no API key

	a := func(pattern string, f func(w http.ResponseWriter, r *http.Request, tenant string)) {
		m.HandleFunc(pattern, h.authed(f))
	}
	// The asynchronous operations: each answers a future (ops.go).
	op := func(pattern string, parse func(r *http.Request, tenant string, body []byte) (*operation, error)) {
		a(pattern, h.opRoute(parse))
	}
	// Closed after the reply, whatever its outcome (a 401 of the tenant layer too): the SDK
	// asks through a client it never closes (see closeAfter).
	m.handle("POST /api/v1/client/config", routeInfo{closeAfter: true}, h.authed(h.clientConfig))
	a("POST /api/v1/client/dynamic_config", h.dynamicConfig)
	a("GET /api/v1/get_server_capabilities", h.capabilities)
	a("POST /api/v1/telemetry", h.telemetryIntake)
	a("POST /api/v1/create_session", h.createSession)
	a("POST /api/v1/session_heartbeat", h.heartbeat)
	a("POST /api/v1/create_sampling_session", h.createSamplingSession)
	a("GET /api/v1/samplers/{sampler_id}", h.getSampler)

	op("POST /api/v1/create_model", h.createModel)
	a("POST /api/v1/get_info", h.getInfo)
	op("POST /api/v1/unload_model", h.unloadModel)
	a("POST /api/v1/weights_info", h.weightsInfo)
	op("POST /api/v1/forward_backward", h.forwardBackward)
	op("POST /api/v1/forward", h.forward)
	op("POST /api/v1/optim_step", h.optimStep)
	op("POST /api/v1/save_weights", h.saveWeights)
	op("POST /api/v1/save_weights_for_sampler", h.saveWeightsForSampler)
	op("POST /api/v1/load_weights", h.loadWeights)
	op("POST /api/v1/save_weights_external", h.saveWeightsExternal)
	op("POST /api/v1/asample", h.asample)
	a("POST /api/v1/retrieve_future", h.retrieveFuture)
	a("POST /api/v1/retrieve_futures", h.retrieveFutures)
	a("POST /api/v1/cancel_future", h.cancelFuture)
	a("POST /api/v1/join_sampling_session", h.joinSamplingSession)
	a("POST /api/v1/copy_weights", h.copyWeights)
	a("POST /api/v1/sessions/search", h.searchSessions)
	a("GET /api/v1/billing/usage/checkpoints/current", h.checkpointStorage)
	a("GET /api/v1/auth/apikey/me", h.apiKeyMe)
	a("DELETE /api/v1/auth/apikey/me", h.deleteAPIKeyMe)
	a("GET /api/v1/audit", h.auditLog)
	// Newer SDK routes this server does not implement: a 400 that says why rather than a
	// 404 (docs/compatibility.md).
	a("POST /api/v1/create_custom_loss", h.refusedRoute("server-side custom losses (create_custom_loss) are not supported: this server "+
		"advertises custom_loss_server_side false, so the SDK runs forward_backward_custom on the client"))

	a("GET /api/v1/training_runs", h.listRuns)
	a("GET /api/v1/training_runs/{run_id}", h.getRun)
	a("GET /api/v1/training_runs/{run_id}/checkpoints", h.listRunCheckpoints)
	a("GET /api/v1/checkpoints", h.listCheckpoints)
	// A checkpoint id holds a slash ("weights/<name>"), so the tail is parsed by hand.
	a("DELETE /api/v1/training_runs/{run_id}/checkpoints/{ckpt...}", h.checkpointDelete)
	a("POST /api/v1/training_runs/{run_id}/checkpoints/{ckpt...}", h.checkpointPost)
	a("PUT /api/v1/training_runs/{run_id}/checkpoints/{ckpt...}", h.checkpointPut)
	a("GET /api/v1/training_runs/{run_id}/checkpoints/{ckpt...}", h.checkpointGet)
	h.consoleRoutes(a) // the console's data (routes_console.go)
	a("GET /api/v1/sessions", h.listSessions)
	a("GET /api/v1/sessions/{session_id}", h.getSession)
	a("PUT /api/v1/sessions/{session_id}/project", h.setSessionProject)
	a("POST /api/v1/sessions/{session_id}/finish", h.finishSession)
	a("GET /api/v1/sessions/{session_id}/spans", h.sessionSpans)
	a("GET /api/v1/sessions/{session_id}/trace_export", h.traceExport)

	h.mountCompat() // /oai/api/v1 and /anthropic/api (compat.go)

	m.handle("/", public, func(w http.ResponseWriter, r *http.Request) {
		textgen.WriteJSON(w, encodingFailed, http.StatusNotFound, errorBody{Detail: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path), Category: "user"})
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

// refusedRoute answers a route of a newer SDK that this server does not implement, with
// the reason.
func (h *Handler) refusedRoute(why string) func(w http.ResponseWriter, r *http.Request, tenant string) {
	return func(w http.ResponseWriter, r *http.Request, tenant string) {
		h.badRequest(w, r, fmt.Errorf("%s %s: %s", r.Method, r.URL.Path, why))
	}
}

func deref[T any](p *T) T {
	var z T
	if p == nil {
		return z
	}
	return *p
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
