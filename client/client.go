package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/telemetry"
)

// APIError is a non-2xx answer from the server.
type APIError struct {
	Status int
	Detail string
	Body   string
}

func (e *APIError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("tuft: HTTP %d: %s", e.Status, e.Detail)
	}
	return fmt.Sprintf("tuft: HTTP %d: %s", e.Status, e.Body)
}

// RequestFailedError is an operation that the server ran and that failed.
type RequestFailedError struct {
	Message  string
	Category string // user | server | unknown
}

func (e *RequestFailedError) Error() string {
	return fmt.Sprintf("tuft: operation failed (%s): %s", e.Category, e.Message)
}

type options struct {
	http         *http.Client
	maxRetries   int
	baseBackoff  time.Duration
	maxBackoff   time.Duration
	tracing      bool
	tp           trace.TracerProvider
	userMetadata map[string]any
	tags         []string
	heartbeat    time.Duration
}

// Option configures a client.
type Option func(*options)

// WithHTTPClient uses hc for every request.
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.http = hc } }

// WithRetries sets how many times a request is retried (default 8) and the backoff's
// first step (default 250 ms, doubling, capped at 10 s).
func WithRetries(n int, base time.Duration) Option {
	return func(o *options) { o.maxRetries, o.baseBackoff = n, base }
}

// WithTracing starts a span for every client call and sends traceparent to the server;
// tp nil uses the global provider. Off by default.
func WithTracing(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracing, o.tp = true, tp }
}

// WithUserMetadata attaches metadata to the session.
func WithUserMetadata(m map[string]any) Option { return func(o *options) { o.userMetadata = m } }

// WithTags tags the session.
func WithTags(tags ...string) Option { return func(o *options) { o.tags = tags } }

// WithHeartbeat sets the session heartbeat interval (default 10 s).
func WithHeartbeat(d time.Duration) Option { return func(o *options) { o.heartbeat = d } }

// conn is the HTTP layer shared by the clients.
type conn struct {
	base   string
	key    string
	o      options
	tracer trace.Tracer
	// noRedirect answers the archive route's 302 itself instead of following it.
	noRedirect *http.Client
}

func newConn(baseURL, apiKey string, opts []Option) (*conn, error) {
	if !strings.HasPrefix(apiKey, "tml-") {
		return nil, errors.New("tuft: the API key must start with tml-")
	}
	o := options{maxRetries: 8, baseBackoff: 250 * time.Millisecond, maxBackoff: 10 * time.Second, heartbeat: 10 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	if o.http == nil {
		o.http = &http.Client{Timeout: 60 * time.Second}
	}
	c := &conn{base: strings.TrimRight(baseURL, "/"), key: apiKey, o: o}
	if o.tracing {
		tp := o.tp
		if tp == nil {
			tp = otel.GetTracerProvider()
		}
		c.tracer = tp.Tracer(telemetry.ScopeClient)
		hc := *o.http
		rt := hc.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
		// The W3C propagator is the contract's, not whatever the application set globally.
		hc.Transport = otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(telemetry.Propagator()))
		c.o.http = &hc
	}
	nr := *c.o.http
	nr.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.noRedirect = &nr
	return c, nil
}

// span starts the client span name (a telemetry.SpanClient* name) when tracing is on.
func (c *conn) span(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, func(error)) {
	if c.tracer == nil {
		return ctx, func(error) {}
	}
	ctx, sp := c.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, func(err error) { telemetry.End(sp, err) }
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request with retries: connection errors, 408, 429 and 5xx are retried
// with exponential backoff (or the server's Retry-After); X-Should-Retry: false stops.
func (c *conn) do(ctx context.Context, method, path string, body []byte, contentType, accept string, retry bool) (*response, error) {
	var last error
	for attempt := 0; ; attempt++ {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-API-Key", c.key)
		req.Header.Set("User-Agent", "tuft-go-client")
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		hc := c.o.http
		if route, _, _ := strings.Cut(path, "?"); strings.HasSuffix(route, "/archive") {
			hc = c.noRedirect
		}
		resp, err := hc.Do(req)
		var wait time.Duration
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			r := &response{status: resp.StatusCode, header: resp.Header, body: b}
			if rerr != nil {
				err = rerr
			} else if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusFound || !retry || !retryable(resp) {
				return r, nil
			} else {
				last = apiError(r)
				wait = retryAfter(resp.Header)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			last = err
		}
		if attempt >= c.o.maxRetries {
			return nil, fmt.Errorf("tuft: %s %s failed after %d attempts: %w", method, path, attempt+1, last)
		}
		if wait == 0 {
			wait = c.o.baseBackoff << attempt
			if wait > c.o.maxBackoff || wait <= 0 {
				wait = c.o.maxBackoff
			}
			wait = time.Duration(float64(wait) * (0.75 + 0.25*rand.Float64()))
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func retryable(resp *http.Response) bool {
	if v := resp.Header.Get("X-Should-Retry"); v != "" {
		return v == "true"
	}
	return resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
}

// retryAfter reads Retry-After (seconds or an HTTP date) or retry-after-ms.
func retryAfter(h http.Header) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 && s <= 60 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 && d <= time.Minute {
			return d
		}
	}
	return 0
}

func apiError(r *response) error {
	e := &APIError{Status: r.status, Body: string(r.body)}
	var b struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(r.body, &b) == nil {
		e.Detail = b.Detail
	}
	return e
}

// call posts a JSON body (or GETs when body is nil and method is GET) and decodes a 2xx
// JSON answer into out.
func (c *conn) call(ctx context.Context, method, path string, body, out any) error {
	var b []byte
	ct := ""
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
		ct = "application/json"
	}
	r, err := c.do(ctx, method, path, b, ct, "application/json", true)
	if err != nil {
		return err
	}
	if r.status/100 != 2 {
		return apiError(r)
	}
	if out != nil && len(r.body) > 0 {
		if err := json.Unmarshal(r.body, out); err != nil {
			return fmt.Errorf("tuft: decode %s answer: %w", path, err)
		}
	}
	return nil
}

// poll long-polls retrieve_future until the future resolves and returns the result body
// and its content type.
func (c *conn) poll(ctx context.Context, id string, proto bool) ([]byte, string, error) {
	accept := "application/json"
	if proto {
		accept = "application/x-protobuf"
	}
	body, _ := json.Marshal(wire.FutureRetrieveRequest{RequestID: id})
	for {
		r, err := c.do(ctx, "POST", "/api/v1/retrieve_future", body, "application/json", accept, false)
		if err != nil {
			if ctx.Err() != nil {
				return nil, "", ctx.Err()
			}
			// A dropped connection during a long poll: poll again after a pause.
			select {
			case <-time.After(time.Second):
				continue
			case <-ctx.Done():
				return nil, "", ctx.Err()
			}
		}
		switch {
		case r.status == http.StatusRequestTimeout:
			continue // still running: the server held the poll as long as it could
		case r.status == http.StatusTooManyRequests || r.status >= 500:
			time.Sleep(max(retryAfter(r.header), 500*time.Millisecond))
			continue
		case r.status != http.StatusOK:
			return nil, "", apiError(r)
		}
		ct := r.header.Get("Content-Type")
		if strings.HasPrefix(ct, "application/json") {
			var probe struct {
				Type     string `json:"type"`
				Error    *string
				Category string
			}
			if json.Unmarshal(r.body, &probe) == nil {
				if probe.Error != nil {
					return nil, "", &RequestFailedError{Message: *probe.Error, Category: probe.Category}
				}
				if probe.Type == "try_again" {
					continue
				}
			}
		}
		return r.body, ct, nil
	}
}

// Future is the pending result of an operation.
type Future[T any] struct {
	id     string
	mu     sync.Mutex
	done   bool
	val    T
	err    error
	decode func(ctx context.Context) (T, error)
}

// RequestID is the server's id of the operation.
func (f *Future[T]) RequestID() string { return f.id }

// Result waits for the operation and returns its result. It may be called many times.
func (f *Future[T]) Result(ctx context.Context) (T, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return f.val, f.err
	}
	v, err := f.decode(ctx)
	if err != nil && ctx.Err() != nil {
		return v, err // cancelled waiting: the operation itself may still succeed
	}
	f.val, f.err, f.done = v, err, true
	return v, err
}

func newFuture[T any](c *conn, id string, proto bool, dec func(body []byte, ct string) (T, error)) *Future[T] {
	return &Future[T]{id: id, decode: func(ctx context.Context) (T, error) {
		var zero T
		body, ct, err := c.poll(ctx, id, proto)
		if err != nil {
			return zero, err
		}
		return dec(body, ct)
	}}
}

func jsonDecoder[T any](body []byte, _ string) (T, error) {
	var v T
	err := json.Unmarshal(body, &v)
	return v, err
}
