package api

import (
	"net/http"

	"github.com/tuft-go/tuft/api/anthropic"
	"github.com/tuft-go/tuft/api/openai"
	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/service"
)

// mountCompat adds the OpenAI-compatible routes (/oai/api/v1) and the Anthropic-compatible
// ones (/anthropic/api) to the route table, behind the same layers as every route
// (layers.go): the tenant, admission and the body limits apply to them as to the Tinker
// routes, and the layers answer a refusal in the route's own error shape. Their
// catch-all not-found answers are public, like the Tinker one.
func (h *Handler) mountCompat() {
	d := textgen.Deps{Service: h.svc, Authenticate: h.layerTenant, MaxRequestBytes: h.opt.MaxRequestBytes, Log: h.log}
	openai.Mount(h.table, d)
	anthropic.Mount(h.table, d)
	for _, p := range []string{openai.Prefix + "/", anthropic.Prefix + "/"} {
		if ri, ok := h.table.info[p]; ok {
			ri.public = true
			h.table.info[p] = ri
		}
	}
}

// layerTenant returns the tenant tenantLayer authenticated for r.
func (h *Handler) layerTenant(r *http.Request) (string, error) {
	if t := tenantFrom(r.Context()); t != "" {
		return t, nil
	}
	return "", &service.Error{Kind: service.KindUnauthorized, Msg: "missing API key: send it as Authorization: Bearer <key> or in the X-API-Key header"}
}
