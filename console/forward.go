package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
)

// forwarded are the API routes the console's pages call through /console/api/, as
// ServeMux patterns: anything else is refused (403) before it reaches the API.
var forwarded = []string{
	"GET /api/v1/auth/apikey/me",
	"GET /api/v1/training_runs",
	"GET /api/v1/training_runs/{run_id}",
	"GET /api/v1/training_runs/{run_id}/metrics",
	"GET /api/v1/training_runs/{run_id}/metrics/stream",
	"GET /api/v1/training_runs/{run_id}/checkpoints",
	// publish, unpublish, set TTL, delete, the archive download (the API parses the tail)
	"GET /api/v1/training_runs/{run_id}/checkpoints/{ckpt...}",
	"POST /api/v1/training_runs/{run_id}/checkpoints/{ckpt...}",
	"PUT /api/v1/training_runs/{run_id}/checkpoints/{ckpt...}",
	"DELETE /api/v1/training_runs/{run_id}/checkpoints/{ckpt...}",
	"GET /api/v1/checkpoints",
	"GET /api/v1/samplers/{sampler_id}",
	"GET /api/v1/sessions",
	"GET /api/v1/sessions/{session_id}",
	"GET /api/v1/sessions/{session_id}/spans",
	"GET /api/v1/sessions/{session_id}/trace_export",
	"GET /api/v1/usage",
	"GET /api/v1/admin/overview",
	"GET /api/v1/billing/usage/checkpoints/current",
	"GET /oai/api/v1/models",
	"POST /oai/api/v1/chat/completions",
	"POST /oai/api/v1/chat/render",
}

// ForwardedRoutes lists the API routes the console forwards (ServeMux patterns), for the
// suites that walk every route a client can reach.
func ForwardedRoutes() []string { return slices.Clone(forwarded) }

// forwardedHeaders are the request headers a forwarded request keeps; everything else
// (cookies, any API key or Authorization the browser sent) is dropped.
var forwardedHeaders = []string{"Accept", "Content-Type", "Last-Event-ID"}

func allowlist() *http.ServeMux {
	m := http.NewServeMux()
	for _, p := range forwarded {
		m.HandleFunc(p, func(http.ResponseWriter, *http.Request) {})
	}
	return m
}

// forward passes /console/api/<rest> to the API's /<rest> with the session's key, when
// <rest> is on the allowlist: the API's layers authenticate, admit and scope it to the
// session's tenant as any client's request. The reply streams through as the API writes
// it (server-sent events, streamed chat).
func (c *Console) forward(w http.ResponseWriter, r *http.Request) {
	se := c.sessionOf(r)
	if se == nil {
		forwardError(w, http.StatusUnauthorized, "not signed in to the console")
		return
	}
	if !safeMethod(r.Method) && r.Header.Get("X-CSRF-Token") == "" {
		forwardError(w, http.StatusForbidden, "missing CSRF token (X-CSRF-Token)")
		return
	}
	if !safeMethod(r.Method) && !sameToken(r.Header.Get("X-CSRF-Token"), se.csrf) {
		forwardError(w, http.StatusForbidden, "wrong CSRF token (X-CSRF-Token)")
		return
	}
	rest := strings.TrimPrefix(r.URL.EscapedPath(), Prefix+"/api")
	target, err := url.Parse(rest)
	if err != nil || rest == "" || path.Clean(target.Path) != target.Path || strings.Contains(rest, "//") {
		forwardError(w, http.StatusForbidden, "the console does not forward "+r.Method+" "+rest)
		return
	}
	probe := &http.Request{Method: r.Method, URL: target, Host: r.Host, Header: http.Header{}}
	if _, pattern := c.allow.Handler(probe); pattern == "" {
		forwardError(w, http.StatusForbidden, "the console does not forward "+r.Method+" "+target.Path)
		return
	}
	req := r.Clone(r.Context())
	req.URL = &url.URL{Path: target.Path, RawPath: target.RawPath, RawQuery: r.URL.RawQuery}
	req.RequestURI = req.URL.RequestURI()
	req.Pattern = ""
	req.Header = http.Header{}
	for _, k := range forwardedHeaders {
		if v := r.Header.Values(k); len(v) > 0 {
			req.Header[k] = v
		}
	}
	req.Header.Set("X-API-Key", se.key)
	req.Body, req.ContentLength = r.Body, r.ContentLength
	c.api.ServeHTTP(w, req)
}

// forwardError answers a request the forwarder refuses, in the API's error shape.
func forwardError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"detail": msg, "category": "user"})
}
