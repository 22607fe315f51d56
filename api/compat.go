package api

import (
	"net/http"
	"strings"

	"github.com/tuft-go/tuft/api/anthropic"
	"github.com/tuft-go/tuft/api/openai"
	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/service"
)

// mountCompat adds the OpenAI-compatible routes (/oai/api/v1) and the Anthropic-compatible
// ones (/anthropic/api). They answer in their own APIs' error shapes, so they take the
// tenant from authenticate rather than from authed (whose errors are Tinker-shaped).
func (h *Handler) mountCompat() {
	d := textgen.Deps{Service: h.svc, Authenticate: h.authenticate, MaxRequestBytes: h.opt.MaxRequestBytes, Log: h.log}
	openai.Mount(h.mux, d)
	anthropic.Mount(h.mux, d)
}

// authenticate maps the request's API key to its tenant. The key may come as X-API-Key
// (Tinker; also the Anthropic clients' x-api-key) or Authorization: Bearer (OpenAI
// clients). It mirrors authed.
func (h *Handler) authenticate(r *http.Request) (string, error) {
	key := r.Header.Get("X-API-Key")
	if key == "" {
		if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
			key = strings.TrimPrefix(a, "Bearer ")
		}
	}
	if key == "" {
		return "", &service.Error{Kind: service.KindUnauthorized, Msg: "missing API key: send it as Authorization: Bearer <key> or in the X-API-Key header"}
	}
	tenant, ok := h.svc.Authenticate(key)
	if !ok {
		return "", &service.Error{Kind: service.KindUnauthorized, Msg: "invalid API key"}
	}
	return tenant, nil
}
