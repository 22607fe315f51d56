package api

import (
	"net/http"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
)

// Handlers of the client configuration, capabilities, sessions and the SDK's telemetry.

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.HealthResponse{Status: "ok"})
}

func (h *Handler) clientConfig(w http.ResponseWriter, r *http.Request, tenant string) {
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.ServerClientConfig())
}

func (h *Handler) dynamicConfig(w http.ResponseWriter, r *http.Request, tenant string) {
	// The body only says which SDK asks; it is read so the connection stays reusable (a
	// reply that leaves a body unread closes it, see guardBody).
	if _, ok := h.readBody(w, r); !ok {
		return
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.ServerDynamicConfig())
}

func (h *Handler) capabilities(w http.ResponseWriter, r *http.Request, tenant string) {
	var resp wire.GetServerCapabilitiesResponse
	for _, m := range h.svc.Models() {
		// Every served model takes LoRA training runs and sampling.
		name, ctx, yes := m.Name, m.MaxContextLength, true
		resp.SupportedModels = append(resp.SupportedModels, wire.SupportedModel{ModelName: &name, MaxContextLength: &ctx,
			Trainable: &yes, Sampleable: &yes})
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, resp)
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
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.CreateSessionResponse{SessionID: se.ID, Type: "create_session"})
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
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.SessionHeartbeatResponse{Type: "session_heartbeat"})
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
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.TelemetryResponse{Status: "accepted"})
}
