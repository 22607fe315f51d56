package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/tuft-go/tuft/api/anthropic"
	"github.com/tuft-go/tuft/api/openai"
	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Every request passes the same layers before its route's handler, whatever API dialect
// the route speaks (Tinker, the REST routes, OpenAI under /oai, Anthropic under
// /anthropic, and any route added later):
//
//	routeLayer      which route it is; Connection: close where the route asks for it
//	tenantLayer     the tenant of its API key (401 without one), unless the route is public
//	admissionLayer  limits.max_concurrent_requests(_per_tenant)
//	bodyLayer       the whole body within limits.max_request_bytes and the body budgets
//	                (limits.max_body_bytes_in_flight(_per_tenant)), its Content-Encoding
//	                undone (zstd, gzip; else 415) within limits.max_decompression_ratio;
//	                the bytes are held (textgen.HeldBody) for the route and for a replay
//	forwardLayer    on an API replica, a request about what another replica owns is
//	                replayed there with the held body, and the owner's reply relayed
//	                (forward.go); the route's error writer only hands it the error
//
// A route is authenticated unless it is registered as public (a signed link, the health
// check, the not-found answers), so a new route cannot skip admission by omission. A
// refusal is answered in the error shape of the route's dialect (dialectError).

// routeInfo is what the layers need to know of a route.
type routeInfo struct {
	// public routes take no API key: no tenant, no admission, and their handlers read no
	// body (guardBody closes the connection of a body left unread).
	public bool
	// closeAfter makes the server close the connection once it has answered, by sending
	// "Connection: close" with the reply (on every outcome, errors included).
	//
	// It guards POST /api/v1/client/config. The Tinker SDK (0.25 through 0.38 at least) fetches
	// that route through a one-off HTTP client that it never closes. When Python's cyclic
	// garbage collector later frees that client on a thread that runs an event loop (a
	// recipe's asyncio.run), the socket's finalizer releases the file descriptor at once
	// while the client's __del__ schedules aclose() on that loop. In the meantime the SDK's
	// own loop opens a new connection, which the kernel gives the same descriptor number;
	// the stale aclose() then unregisters that number from the SDK loop's selector, so the
	// new connection's reply, already received, is never read: one result poll hangs for the
	// SDK's full 45-second timeout. With the connection closed by the server after this one
	// reply, the SDK closes its end when it has read the reply, on its own loop, and the
	// forgotten client holds no socket by the time it is collected.
	// tests/cookbook/stall_repro.py reproduces the hang; api's TestClientConfigClosesConnection
	// and tests/cookbook's transport test keep it fixed.
	closeAfter bool
	// operator routes take the operator key (auth.operator_key_sha256) and no tenant's
	// (403); the operator key takes no other route (403).
	operator bool
}

// routeTable is the mux with a record of every pattern registered on it, so the layers
// can tell a route's kind and a test can walk every route.
type routeTable struct {
	mux   *http.ServeMux
	info  map[string]routeInfo
	order []string
}

func newRouteTable() *routeTable {
	return &routeTable{mux: http.NewServeMux(), info: map[string]routeInfo{}}
}

// HandleFunc registers an authenticated route (textgen.Mux).
func (t *routeTable) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	t.handle(pattern, routeInfo{}, f)
}

func (t *routeTable) handle(pattern string, ri routeInfo, f func(http.ResponseWriter, *http.Request)) {
	t.mux.HandleFunc(pattern, f)
	t.info[pattern] = ri
	t.order = append(t.order, pattern)
}

// of returns the route r goes to, and sets r.Pattern to it: the layers pass copies of r
// on, so the mux's own setting would not reach the telemetry middleware, which names the
// server span after it. A request the mux answers itself (a redirect, 404 or 405 with no
// route) has no pattern: it is public, as it reaches no handler.
func (t *routeTable) of(r *http.Request) routeInfo {
	_, pattern := t.mux.Handler(r)
	r.Pattern = pattern
	if pattern == "" {
		return routeInfo{public: true}
	}
	return t.info[pattern]
}

// Route is one mounted route, for tests that check every route passes the layers.
type Route struct {
	Pattern string // as registered on the mux: "METHOD /path/{wildcard}" or "/prefix/"
	Public  bool   // takes no API key, so no tenant layer, admission or body layer
	// Operator routes take the operator key only (auth.operator_key_sha256).
	Operator bool
}

// Routes lists every route mounted on the handler, in registration order.
func (h *Handler) Routes() []Route {
	out := make([]Route, 0, len(h.table.order))
	for _, p := range h.table.order {
		out = append(out, Route{Pattern: p, Public: h.table.info[p].public, Operator: h.table.info[p].operator})
	}
	return out
}

// layers wraps next (the mux) in the layers every request passes, outermost first.
func (h *Handler) layers(next http.Handler) http.Handler {
	ls := []func(http.Handler) http.Handler{h.routeLayer, h.tenantLayer, h.admissionLayer, h.bodyLayer, h.forwardLayer}
	for _, l := range slices.Backward(ls) {
		next = l(next)
	}
	return next
}

type routeKey struct{}

type tenantKey struct{}

func routeFrom(ctx context.Context) routeInfo {
	ri, _ := ctx.Value(routeKey{}).(routeInfo)
	return ri
}

// tenantFrom returns the tenant tenantLayer authenticated ("" on a public route).
func tenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

func (h *Handler) routeLayer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri := h.table.of(r)
		if ri.closeAfter {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, ri)))
	})
}

func (h *Handler) tenantLayer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if routeFrom(r.Context()).public {
			next.ServeHTTP(w, r)
			return
		}
		tenant, err := h.authenticate(r, routeFrom(r.Context()).operator)
		if err != nil {
			h.dialectError(w, r, err)
			return
		}
		markAuthenticated(r.Context())
		// The tenant goes on the request's server span and into the context of the spans
		// below it, so the session-span record (telemetry.SessionSpan) keeps a span only
		// for the tenant that owns its session.
		if sp := trace.SpanFromContext(r.Context()); sp.IsRecording() {
			sp.SetAttributes(attribute.String(telemetry.AttrTenant, tenant))
		}
		ctx := telemetry.WithTenant(context.WithValue(r.Context(), tenantKey{}, tenant), tenant)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (h *Handler) admissionLayer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := tenantFrom(r.Context())
		if tenant == "" {
			next.ServeHTTP(w, r)
			return
		}
		t, err := h.adm.enter(tenant)
		if err != nil {
			h.dialectError(w, r, err)
			return
		}
		defer t.leave()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ticketKey{}, t)))
	})
}

func (h *Handler) bodyLayer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := ticketFrom(r.Context())
		if t == nil {
			next.ServeHTTP(w, r)
			return
		}
		var b []byte
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			var err error
			if b, err = h.readWhole(w, r, t); err != nil {
				h.dialectError(w, r, err)
				return
			}
		}
		// The route sees the body as sent before encoding: the bytes, their length, and
		// no Content-Encoding (a request relayed to another replica goes as it is now).
		r.Body = textgen.NewHeldBody(b)
		r.ContentLength = int64(len(b))
		r.Header.Del("Content-Encoding")
		next.ServeHTTP(w, r)
	})
}

// dialectError answers a refusal of the layers in the error shape of the API the route
// belongs to.
func (h *Handler) dialectError(w http.ResponseWriter, r *http.Request, err error) {
	p := r.URL.Path
	switch {
	case p == openai.Prefix || strings.HasPrefix(p, openai.Prefix+"/"):
		openai.WriteError(w, err)
	case p == anthropic.Prefix || strings.HasPrefix(p, anthropic.Prefix+"/"):
		anthropic.WriteError(w, err)
	default:
		h.fail(w, r, err)
	}
}

// requestKey is the API key a request presents, "" for none: X-API-Key (Tinker; also the
// Anthropic clients' x-api-key) or else Authorization: Bearer (OpenAI clients). It is
// the one place a key is read from a request, whichever dialect the route speaks.
func requestKey(r *http.Request) string {
	if k := r.Header.Get("X-API-Key"); k != "" {
		return k
	}
	if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
		return strings.TrimPrefix(a, "Bearer ")
	}
	return ""
}

// operatorTenant is who an operator route's requests are admitted as: the colon makes
// it a name no tenant can have (auth.api_keys[].tenant).
const operatorTenant = "operator:"

// authenticate maps the request's API key (requestKey) to its tenant, or to
// operatorTenant on an operator route (which no tenant key opens, and the operator key
// opens alone).
func (h *Handler) authenticate(r *http.Request, operatorRoute bool) (string, error) {
	key := requestKey(r)
	if key == "" {
		return "", &service.Error{Kind: service.KindUnauthorized, Msg: "missing API key: send it in the X-API-Key header (or as Authorization: Bearer <key>)"}
	}
	if h.svc.IsOperator(key) {
		if !operatorRoute {
			return "", &service.Error{Kind: service.KindForbidden, Msg: "the operator key (auth.operator_key_sha256) opens the operator routes (/api/v1/admin/...) only; use a tenant's API key"}
		}
		return operatorTenant, nil
	}
	tenant, ok := h.svc.Authenticate(key)
	if !ok {
		return "", &service.Error{Kind: service.KindUnauthorized, Msg: "invalid API key"}
	}
	if operatorRoute {
		return "", &service.Error{Kind: service.KindForbidden, Msg: fmt.Sprintf("%s %s needs the operator key (auth.operator_key_sha256), not a tenant's", r.Method, r.URL.Path)}
	}
	return tenant, nil
}
