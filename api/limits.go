package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/service"
)

// Limits bound what requests may hold at once; every field comes from the configuration
// (LimitsFrom), and New panics on a zero one.
type Limits struct {
	// ReadBodyTimeout bounds the time from a request's start to the end of its body.
	ReadBodyTimeout time.Duration
	// MaxConcurrent and MaxConcurrentPerTenant bound the authenticated requests being
	// served at once (long-polls included), in total (503) and per tenant (429).
	MaxConcurrent          int
	MaxConcurrentPerTenant int
	// MaxBodyBytes and MaxBodyBytesPerTenant bound the request bodies (decompressed ones
	// included) held in memory at once, in total (503) and per tenant (429).
	MaxBodyBytes          int64
	MaxBodyBytesPerTenant int64
	// MaxDecompressionRatio refuses a compressed body that inflates more than this.
	MaxDecompressionRatio int
	// MaxClientEvents and MaxClientEventBytes bound what one /telemetry request logs:
	// its events, and each text field of an event.
	MaxClientEvents     int
	MaxClientEventBytes int
	// MaxRetrievedRequestIDs bounds the retrieved_request_ids of a retrieve_futures poll.
	MaxRetrievedRequestIDs int
	// MaxMetricStreamsPerTenant bounds a tenant's open metric streams, which hold no
	// request slot once started (ticket.detach).
	MaxMetricStreamsPerTenant int
}

// LimitsFrom maps the configuration's keys to the handler's limits: the one place the
// handler's numbers come from.
func LimitsFrom(c config.Config) Limits {
	l := c.Limits
	return Limits{ReadBodyTimeout: c.Server.ReadBodyTimeoutSeconds.Duration(),
		MaxConcurrent: l.MaxConcurrentRequests, MaxConcurrentPerTenant: l.MaxConcurrentRequestsPerTenant,
		MaxBodyBytes: l.MaxBodyBytesInFlight, MaxBodyBytesPerTenant: l.MaxBodyBytesInFlightPerTenant,
		MaxDecompressionRatio: l.MaxDecompressionRatio, MaxClientEvents: l.MaxClientEvents, MaxClientEventBytes: l.MaxClientEventBytes,
		MaxRetrievedRequestIDs: l.MaxRetrievedRequestIDs, MaxMetricStreamsPerTenant: l.MaxMetricStreamsPerTenant}
}

// check panics, naming the key, on a limit the configuration did not give (config.MustPositive).
func (l Limits) check() {
	config.MustPositive("server.read_body_timeout_seconds", l.ReadBodyTimeout)
	config.MustPositive("limits.max_concurrent_requests", l.MaxConcurrent)
	config.MustPositive("limits.max_concurrent_requests_per_tenant", l.MaxConcurrentPerTenant)
	config.MustPositive("limits.max_body_bytes_in_flight", l.MaxBodyBytes)
	config.MustPositive("limits.max_body_bytes_in_flight_per_tenant", l.MaxBodyBytesPerTenant)
	config.MustPositive("limits.max_decompression_ratio", l.MaxDecompressionRatio)
	config.MustPositive("limits.max_client_events", l.MaxClientEvents)
	config.MustPositive("limits.max_client_event_bytes", l.MaxClientEventBytes)
	config.MustPositive("limits.max_retrieved_request_ids", l.MaxRetrievedRequestIDs)
	config.MustPositive("limits.max_metric_streams_per_tenant", l.MaxMetricStreamsPerTenant)
}

// retryBusy is the Retry-After of a refusal for concurrency: slots free up as requests
// finish, which is quick for everything but long-polls.
const retryBusy = time.Second

// requestAdmission is request admission, the HTTP layer's meaning of the word (see the
// glossary in docs/architecture.md): it counts what authenticated requests hold, per
// tenant and in total, against limits.max_concurrent_requests(_per_tenant) and the body
// budgets.
type requestAdmission struct {
	l       Limits
	mu      sync.Mutex
	reqs    int
	bytes   int64
	tenants map[string]*tenantUse
	// streams counts each tenant's open metric streams (limits.max_metric_streams_per_tenant).
	streams map[string]int
}

type tenantUse struct {
	reqs  int
	bytes int64
}

func newRequestAdmission(l Limits) *requestAdmission {
	return &requestAdmission{l: l, tenants: map[string]*tenantUse{}, streams: map[string]int{}}
}

// ticket is one admitted request: what it holds, released once when it ends.
type ticket struct {
	a      *requestAdmission
	tenant string
	bytes  int64
	left   bool // leave ran (detach, then the layer's own leave)
}

type ticketKey struct{}

func ticketFrom(ctx context.Context) *ticket {
	t, _ := ctx.Value(ticketKey{}).(*ticket)
	return t
}

// enter admits one request of tenant, or says which limit it is over.
func (a *requestAdmission) enter(tenant string) (*ticket, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	u := a.tenants[tenant]
	if u == nil {
		u = &tenantUse{}
		a.tenants[tenant] = u
	}
	switch {
	case u.reqs >= a.l.MaxConcurrentPerTenant:
		return nil, &service.Error{Kind: service.KindTooMany, RetryAfter: retryBusy,
			Msg: fmt.Sprintf("too many concurrent requests: at most %d per tenant (limits.max_concurrent_requests_per_tenant)", a.l.MaxConcurrentPerTenant)}
	case a.reqs >= a.l.MaxConcurrent:
		return nil, &service.Error{Kind: service.KindUnavailable, RetryAfter: retryBusy,
			Msg: fmt.Sprintf("the server is serving its maximum of %d concurrent requests (limits.max_concurrent_requests); retry shortly", a.l.MaxConcurrent)}
	}
	u.reqs++
	a.reqs++
	return &ticket{a: a, tenant: tenant}, nil
}

// fits says whether n more body bytes would fit now, without reserving them.
func (t *ticket) fits(n int64) error { return t.a.reserve(t, n, false) }

// grow reserves n more body bytes for the request.
func (t *ticket) grow(n int64) error { return t.a.reserve(t, n, true) }

func (a *requestAdmission) reserve(t *ticket, n int64, take bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	u := a.tenants[t.tenant]
	switch {
	case u.bytes+n > a.l.MaxBodyBytesPerTenant:
		return &service.Error{Kind: service.KindTooMany, RetryAfter: retryBusy,
			Msg: fmt.Sprintf("request bodies in flight would exceed limits.max_body_bytes_in_flight_per_tenant (%d bytes); retry once earlier requests finish", a.l.MaxBodyBytesPerTenant)}
	case a.bytes+n > a.l.MaxBodyBytes:
		return &service.Error{Kind: service.KindUnavailable, RetryAfter: retryBusy,
			Msg: fmt.Sprintf("the server holds its maximum of request bodies in memory (limits.max_body_bytes_in_flight, %d bytes); retry shortly", a.l.MaxBodyBytes)}
	}
	if take {
		u.bytes += n
		a.bytes += n
		t.bytes += n
	}
	return nil
}

// leave releases everything the request held; once.
func (t *ticket) leave() {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.left {
		return
	}
	t.left = true
	u := a.tenants[t.tenant]
	u.reqs--
	u.bytes -= t.bytes
	a.reqs--
	a.bytes -= t.bytes
	t.bytes = 0
	if u.reqs == 0 {
		delete(a.tenants, t.tenant)
	}
}

// detachStream turns an admitted request into a long-lived stream: it takes one of the
// tenant's stream slots (limits.max_metric_streams_per_tenant, 429 over it) and gives
// back its request slot and body bytes, so open streams (a console tab each) never use
// up limits.max_concurrent_requests(_per_tenant) for the tenant's other requests. The
// returned func frees the stream slot.
func (t *ticket) detachStream() (func(), error) {
	a := t.a
	a.mu.Lock()
	if a.streams[t.tenant] >= a.l.MaxMetricStreamsPerTenant {
		a.mu.Unlock()
		return nil, &service.Error{Kind: service.KindTooMany, RetryAfter: 5 * time.Second, Limit: "limits.max_metric_streams_per_tenant",
			Msg: fmt.Sprintf("too many open metric streams: at most %d per tenant (limits.max_metric_streams_per_tenant); close one", a.l.MaxMetricStreamsPerTenant)}
	}
	a.streams[t.tenant]++
	a.mu.Unlock()
	t.leave()
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.streams[t.tenant]--; a.streams[t.tenant] <= 0 {
			delete(a.streams, t.tenant)
		}
	}, nil
}

// watchedBody notes when a request body has been read to its end, and then lifts the
// read deadline that bounded it: a long-poll after the body must not be cut by it (the
// server's background read would cancel the request).
type watchedBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	mu   sync.Mutex
	done bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.mu.Lock()
		if !b.done {
			b.done = true
			_ = b.rc.SetReadDeadline(time.Time{})
		}
		b.mu.Unlock()
	}
	return n, err
}

func (b *watchedBody) finished() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done
}

// closingWriter closes the connection after a reply sent before the request's body was
// read to its end (a route that reads no body, a refused key, a limit): otherwise the
// server would first wait for the rest of the body, to reuse the connection, and a
// client that never sends it would hold the reply and the connection as long as it likes.
type closingWriter struct {
	http.ResponseWriter
	body *watchedBody
	sent bool
}

func (w *closingWriter) before() {
	if !w.sent {
		w.sent = true
		if !w.body.finished() {
			w.Header().Set("Connection", "close")
			// The server still drains a small unread body after the reply: end that at
			// once instead of waiting for bytes that may never come.
			_ = w.body.rc.SetReadDeadline(time.Now())
		}
	}
}

func (w *closingWriter) WriteHeader(code int) { w.before(); w.ResponseWriter.WriteHeader(code) }

func (w *closingWriter) Write(b []byte) (int, error) { w.before(); return w.ResponseWriter.Write(b) }

// Unwrap lets http.ResponseController reach the connection.
func (w *closingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher.
func (w *closingWriter) Flush() {
	w.before()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// guardBody bounds the time to receive a request's body and makes replies that leave it
// unread close the connection. Requests without a body pass untouched.
func (h *Handler) guardBody(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return w, r
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(h.opt.Limits.ReadBodyTimeout))
	b := &watchedBody{ReadCloser: r.Body, rc: rc}
	r.Body = b
	return &closingWriter{ResponseWriter: w, body: b}, r
}

// minReadBuffer is the first size of a body buffer. It grows as bytes arrive: memory
// follows what a client sends, not the length it declares.
const minReadBuffer = 4 << 10

// readBody returns the request's body, which the body layer has read (see bodyLayer): a
// handler never reads the connection itself. It reports false only for a request that
// did not pass the layer, which has then been answered.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := textgen.ReadBody(w, r, h.opt.MaxRequestBytes)
	if err != nil {
		h.fail(w, r, err)
		return nil, false
	}
	return b, true
}

// readWhole reads the whole (capped) body, growing its buffer as bytes arrive and
// reserving them against the tenant's and the server's body budgets (t), then undoes its
// Content-Encoding. A refusal is a *textgen.BodyError (413, 408, 400, 415) or the
// budget's *service.Error (429, 503).
func (h *Handler) readWhole(w http.ResponseWriter, r *http.Request, t *ticket) ([]byte, error) {
	limit := h.opt.MaxRequestBytes
	if r.ContentLength > limit {
		h.drain(w, r)
		return nil, h.tooLarge(fmt.Sprintf("request body of %d bytes", r.ContentLength))
	}
	if r.ContentLength > 0 {
		// Refused before a byte is kept when the declared body cannot fit now.
		if err := t.fits(r.ContentLength); err != nil {
			h.drain(w, r)
			return nil, err
		}
	}
	var b []byte
	for {
		if len(b) == cap(b) {
			// Doubling, so the buffer is at most twice what arrived; a declared length
			// caps it (+1 to see the end without growing again).
			step := max(int64(len(b)), minReadBuffer)
			if r.ContentLength >= 0 {
				step = min(step, r.ContentLength-int64(len(b))+1)
			} else {
				step = min(step, limit-int64(len(b))+1) // one past the limit tells it is over
			}
			if err := t.grow(step); err != nil {
				h.drain(w, r)
				return nil, err
			}
			nb := make([]byte, len(b), int64(len(b))+step)
			copy(nb, b)
			b = nb
		}
		n, err := r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			h.drain(w, r)
			return nil, h.tooLarge("the request body")
		}
		if err == io.EOF {
			return h.inflate(r, b, t)
		}
		if err != nil {
			return nil, h.bodyError(err)
		}
	}
}

// inflate undoes the body's Content-Encoding (on every route), within
// limits.max_request_bytes and limits.max_decompression_ratio, its output counted against
// the body budgets like the body itself.
func (h *Handler) inflate(r *http.Request, b []byte, t *ticket) ([]byte, error) {
	enc := r.Header.Get("Content-Encoding")
	if enc == "" {
		return b, nil
	}
	lim := wire.InflateLimits{MaxBytes: h.opt.MaxRequestBytes, MaxRatio: h.opt.Limits.MaxDecompressionRatio, Grow: t.grow}
	out, err := wire.Inflate(enc, b, lim)
	var ee *wire.EncodingError
	var le *wire.LimitError
	var se *service.Error
	switch {
	case err == nil:
		return out, nil
	case errors.As(err, &ee):
		return nil, &textgen.BodyError{Status: http.StatusUnsupportedMediaType, Msg: err.Error()}
	case errors.As(err, &le):
		return nil, &textgen.BodyError{Status: http.StatusRequestEntityTooLarge, Msg: err.Error()}
	case errors.As(err, &se):
		return nil, err // a body budget
	default:
		return nil, &textgen.BodyError{Status: http.StatusBadRequest, Msg: err.Error()}
	}
}

// drainWait bounds how long a refused body is read and thrown away: long enough for a
// client that is sending to finish, short enough that one that stalls costs little.
const drainWait = 2 * time.Second

// drain reads and throws away (up to twice limits.max_request_bytes of) a body about to
// be refused, for at most drainWait. It costs no memory (the request holds its
// concurrency slot and the body deadline bounds the time): a client still sending would
// otherwise see its connection reset instead of the answer (a 429 that tells it when to
// retry, a 413).
func (h *Handler) drain(w http.ResponseWriter, r *http.Request) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(drainWait))
	_, _ = io.CopyN(io.Discard, r.Body, 2*h.opt.MaxRequestBytes)
}

// tooLarge is the 413 for a body over limits.max_request_bytes.
func (h *Handler) tooLarge(what string) error {
	return &textgen.BodyError{Status: http.StatusRequestEntityTooLarge,
		Msg: fmt.Sprintf("%s exceeds limits.max_request_bytes (%d bytes)", what, h.opt.MaxRequestBytes)}
}

// bodyError is the answer to a failure to read the request body.
func (h *Handler) bodyError(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &textgen.BodyError{Status: http.StatusRequestTimeout,
			Msg: fmt.Sprintf("the request body did not arrive within server.read_body_timeout_seconds (%s)", h.opt.Limits.ReadBodyTimeout)}
	}
	return &textgen.BodyError{Status: http.StatusBadRequest, Msg: "could not read the request body: " + err.Error()}
}

// keepEscaping fixes the redirects ServeMux makes to a path with a trailing slash: it
// builds their Location from the decoded path, which turns an escaped "/" (%2F) into a
// real one and points the client elsewhere. The handlers themselves never answer 301,
// 307 or 308.
func keepEscaping(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&redirectWriter{ResponseWriter: w, r: r}, r)
	})
}

type redirectWriter struct {
	http.ResponseWriter
	r *http.Request
}

func (w *redirectWriter) WriteHeader(code int) {
	if code == http.StatusMovedPermanently || code == http.StatusTemporaryRedirect || code == http.StatusPermanentRedirect {
		if loc, err := url.Parse(w.Header().Get("Location")); err == nil && loc.Path == w.r.URL.Path+"/" {
			fixed := w.r.URL.EscapedPath() + "/"
			if w.r.URL.RawQuery != "" {
				fixed += "?" + w.r.URL.RawQuery
			}
			w.Header().Set("Location", fixed)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *redirectWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher.
func (w *redirectWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// use is what tenant holds now: requests being served, body bytes, open streams.
func (a *requestAdmission) use(tenant string) (reqs int, bytes int64, streams int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if u := a.tenants[tenant]; u != nil {
		reqs, bytes = u.reqs, u.bytes
	}
	return reqs, bytes, a.streams[tenant]
}
