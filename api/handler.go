// Package api is the HTTP face of TuFT: the Tinker routes under /api/v1, their JSON and
// protobuf codecs (through package wire), authentication (X-API-Key → tenant), request
// limits and error replies. It is the only package that knows about HTTP.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
	"github.com/tuft-go/tuft/telemetry/httpserver"
)

// Options configure the handler.
type Options struct {
	LongPoll        time.Duration // how long retrieve_future holds a request (server.long_poll_seconds)
	MaxRequestBytes int64         // request body cap (limits.max_request_bytes)
	PublicURL       string        // base URL for archive links (default: from the listener)
	ArchiveTTL      time.Duration // lifetime of archive links (default 15 min; not a config key)
	Logger          *slog.Logger
	// TracerProvider and Instruments receive the HTTP server spans and durations
	// (default: the OTel global provider and telemetry.Metrics()).
	TracerProvider trace.TracerProvider
	Instruments    *telemetry.Instruments
	// Limits bound request bodies and concurrency (config: server.read_body_timeout_seconds
	// and limits.*).
	Limits Limits
}

// Handler serves the Tinker API.
type Handler struct {
	svc       *service.Service
	opt       Options
	log       *slog.Logger
	table     *routeTable
	root      http.Handler
	publicURL atomic.Pointer[string]
	closing   chan struct{}
	closeOnce sync.Once
	adm       *requestAdmission
	ins       *telemetry.Instruments // the handler's own metrics (metric streams)
}

// OptionsFrom is the handler's options from the configuration (the caller adds the
// logger and telemetry): the one place its numbers come from.
func OptionsFrom(c config.Config) Options {
	return Options{LongPoll: c.LongPoll(), MaxRequestBytes: c.Limits.MaxRequestBytes, PublicURL: c.Server.PublicURL, Limits: LimitsFrom(c)}
}

// New builds the handler with every route. The numbers of o come from the configuration
// (OptionsFrom); a zero one panics naming its key.
func New(svc *service.Service, o Options) *Handler {
	config.MustPositive("server.long_poll_seconds", o.LongPoll)
	config.MustPositive("limits.max_request_bytes", o.MaxRequestBytes)
	o.Limits.check()
	if o.ArchiveTTL <= 0 {
		o.ArchiveTTL = 15 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	h := &Handler{svc: svc, opt: o, log: o.Logger, table: newRouteTable(), closing: make(chan struct{}), adm: newRequestAdmission(o.Limits)}
	if o.PublicURL != "" {
		h.SetPublicURL(o.PublicURL)
	}
	h.ins = telemetry.NewSettings(telemetry.WithInstruments(o.Instruments)).Instruments
	h.routes()
	h.root = httpserver.NewHandler(h.recoverer(keepEscaping(h.layers(h.table.mux))), telemetry.WithTracerProvider(o.TracerProvider), telemetry.WithInstruments(o.Instruments))
	return h
}

// SetPublicURL sets the base URL archive links are built on.
func (h *Handler) SetPublicURL(u string) {
	u = strings.TrimRight(u, "/")
	h.publicURL.Store(&u)
}

// BeginShutdown makes pending long-polls return at once, so HTTP shutdown is not held
// up by them.
func (h *Handler) BeginShutdown() { h.closeOnce.Do(func() { close(h.closing) }) }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w, r = h.guardBody(w, r)
	h.root.ServeHTTP(w, r)
}

// recoverer turns a handler panic into a 500 with a JSON body instead of a dropped
// connection, and logs the stack.
func (h *Handler) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				h.log.ErrorContext(r.Context(), "handler panic", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				textgen.WriteJSON(w, encodingFailed, http.StatusInternalServerError, errorBody{Detail: "internal server error", Category: "server"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// authed adapts a route's handler to the tenant the layers authenticated (layers.go):
// by the time it runs, the request is admitted and its body read.
func (h *Handler) authed(f func(w http.ResponseWriter, r *http.Request, tenant string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f(w, r, tenantFrom(r.Context()))
	}
}

// errorBody is every error reply: never an empty 400 (the SDK retries those as
// Cloudflare rejections).
type errorBody struct {
	Detail   string `json:"detail"`
	Category string `json:"category,omitempty"`
}

func status(k service.Kind) int {
	switch k {
	case service.KindInvalid:
		return http.StatusBadRequest
	case service.KindNotFound:
		return http.StatusNotFound
	case service.KindConflict:
		return http.StatusConflict
	case service.KindTooMany:
		return http.StatusTooManyRequests
	case service.KindUnavailable:
		return http.StatusServiceUnavailable
	case service.KindUnauthorized:
		return http.StatusUnauthorized
	case service.KindGone:
		return http.StatusGone
	case service.KindForbidden:
		return http.StatusForbidden
	case service.KindTooLarge:
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}

// fail writes err as a JSON error reply with the status its kind maps to: the error
// writer of the Tinker and REST routes.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var be *textgen.BodyError
	if errors.As(err, &be) {
		textgen.WriteJSON(w, encodingFailed, be.Status, errorBody{Detail: be.Msg, Category: "user"})
		return
	}
	if handedOff(r, err) { // another replica owns it: forwardLayer replays the request there
		return
	}
	var se *service.Error
	if !errors.As(err, &se) {
		se = &service.Error{Kind: service.KindOf(err), Msg: err.Error()}
	}
	if se.Limit != "" { // a per-tenant quota refused it (service/quota.go)
		trace.SpanFromContext(r.Context()).SetAttributes(attribute.String(telemetry.AttrQuotaLimit, se.Limit))
	}
	code := status(se.Kind)
	cat := "user"
	if code >= 500 {
		cat = "server"
		if se.RetryAfter > 0 {
			// A limit doing its job (the server is busy), not a fault: under a flood an
			// ERROR line per refusal would only flood the logs too.
			h.log.DebugContext(r.Context(), "request refused", "route", r.Pattern, "error", err)
		} else {
			h.log.ErrorContext(r.Context(), "request failed", "route", r.Pattern, "error", err)
		}
	}
	switch {
	case code == http.StatusTooManyRequests || (code == http.StatusServiceUnavailable && se.RetryAfter > 0):
		secs := int(se.RetryAfter.Round(time.Second) / time.Second)
		if secs < 1 {
			secs = 1
		}
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	case code == http.StatusConflict || code == http.StatusBadRequest || code == http.StatusNotFound || code == http.StatusUnauthorized || code == http.StatusGone ||
		code == http.StatusForbidden:
		// The SDK would otherwise retry some of these (409) for minutes; a user error does
		// not heal by waiting.
		w.Header().Set("X-Should-Retry", "false")
	}
	textgen.WriteJSON(w, encodingFailed, code, errorBody{Detail: se.Msg, Category: cat})
}

// badRequest is a 400 naming the problem.
func (h *Handler) badRequest(w http.ResponseWriter, r *http.Request, err error) {
	h.fail(w, r, &service.Error{Kind: service.KindInvalid, Msg: err.Error(), Err: err})
}

func (h *Handler) waitCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-h.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// annotate puts correlation keys on the request's server span and into its context, so
// a query by tuft.training_run_id (or session, sampler) finds the HTTP span too, and
// futures enqueued by this request carry the keys to their execution.
func annotate(r *http.Request, k telemetry.Keys) *http.Request {
	ctx := telemetry.WithKeys(r.Context(), k)
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		sp.SetAttributes(telemetry.KeyAttributes(telemetry.KeysFrom(ctx))...)
	}
	return r.WithContext(ctx)
}

// encodingFailed is the error answered for a reply that does not encode (textgen.WriteJSON).
var encodingFailed = []byte(`{"detail":"internal server error: response encoding failed","category":"server"}`)
