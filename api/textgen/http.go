package textgen

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
)

// Deps is what the api package hands the compatible routes.
type Deps struct {
	Service *service.Service
	// Authenticate returns the tenant the api package's layers found for the request's
	// API key (Authorization: Bearer, X-API-Key), or a service error of KindUnauthorized.
	// Those layers have also admitted the request and read its body (HeldBody).
	Authenticate    func(r *http.Request) (string, error)
	MaxRequestBytes int64
	Log             *slog.Logger
	// Now and NewID make responses reproducible in tests (default: the clock, random ids).
	Now   func() time.Time
	NewID func() string
}

// Mux is where the compatible routes are registered (an *http.ServeMux, or the api
// package's route table, which records each route so that every one of them is known to
// pass its layers).
type Mux interface {
	HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request))
}

// WithDefaults fills the optional fields (the log, clock and ids); the numbers come from
// the configuration, and a zero one panics naming its key.
func (d Deps) WithDefaults() Deps {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.NewID == nil {
		d.NewID = func() string {
			b := make([]byte, 12)
			_, _ = rand.Read(b)
			return hex.EncodeToString(b)
		}
	}
	// limits.max_request_bytes comes from the handler's options; no second default here.
	config.MustPositive("limits.max_request_bytes", d.MaxRequestBytes)
	return d
}

// BodyError is a request body refused before any route saw it (too large, an encoding
// we do not decode, too slow, unreadable): each API answers it with Status in its own
// error shape.
type BodyError struct {
	Status int // 413, 415, 408 or 400
	Msg    string
}

func (e *BodyError) Error() string { return e.Msg }

// HeldBody is a request body the api package's body layer has read whole (within the
// body budgets, its Content-Encoding undone); it replaces the request's Body, so a
// route takes the bytes without a second copy.
type HeldBody struct {
	*bytes.Reader
	b []byte
}

// NewHeldBody holds b as a request body.
func NewHeldBody(b []byte) *HeldBody { return &HeldBody{Reader: bytes.NewReader(b), b: b} }

// Bytes returns the whole body, however much of it was read.
func (h *HeldBody) Bytes() []byte { return h.b }

// Close implements io.Closer.
func (h *HeldBody) Close() error { return nil }

// ReadBody returns the body the api package's layers read (HeldBody); a body that was not
// read there (a handler mounted on its own, in a test) is read here, at most limit bytes.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if hb, ok := r.Body.(*HeldBody); ok {
		return hb.Bytes(), nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, &BodyError{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("the request body exceeds limits.max_request_bytes (%d bytes)", mbe.Limit)}
	}
	if err != nil {
		return nil, &BodyError{Status: http.StatusBadRequest, Msg: "could not read the request body: " + err.Error()}
	}
	return b, nil
}

// WriteJSON answers v as JSON with status code: the one JSON writer of every dialect.
// A value that does not encode (a NaN in a result) is answered as a 500 with
// encodingFailed, the body the dialect gives that error in its own shape.
func WriteJSON(w http.ResponseWriter, encodingFailed []byte, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, encodingFailed
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// SSE writes server-sent events, each flushed to the client as it is written.
type SSE struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

// NewSSE prepares w for events; nothing is written until the first event, so an error
// found before it can still be a plain JSON reply.
func NewSSE(w http.ResponseWriter) *SSE { return &SSE{w: w, rc: http.NewResponseController(w)} }

// Started reports whether the event stream (its 200 status) has begun.
func (s *SSE) Started() bool { return s.started }

func (s *SSE) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // no proxy buffering: tokens must reach the client as drawn
	// A stream lasts as long as generation: a server-wide write deadline must not cut it.
	_ = s.rc.SetWriteDeadline(time.Time{})
	s.w.WriteHeader(http.StatusOK)
}

// Event writes one event: an "event:" line when name is set, then the data line.
func (s *SSE) Event(name string, data []byte) error {
	s.start()
	buf := make([]byte, 0, len(name)+len(data)+16)
	if name != "" {
		buf = append(append(append(buf, "event: "...), name...), '\n')
	}
	buf = append(append(append(buf, "data: "...), data...), "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// EventID writes one event with an "id:" line (what a reconnecting EventSource sends
// back as Last-Event-ID), an "event:" line when name is set, then the data line.
func (s *SSE) EventID(id, name string, data []byte) error {
	s.start()
	buf := make([]byte, 0, len(id)+len(name)+len(data)+24)
	buf = append(append(append(buf, "id: "...), id...), '\n')
	if name != "" {
		buf = append(append(append(buf, "event: "...), name...), '\n')
	}
	buf = append(append(append(buf, "data: "...), data...), "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// Comment writes a comment line (": text"): a heartbeat that keeps proxies and the
// client from taking a quiet stream for a dead one, ignored by EventSource.
func (s *SSE) Comment(text string) error {
	s.start()
	if _, err := s.w.Write([]byte(": " + text + "\n\n")); err != nil {
		return err
	}
	return s.rc.Flush()
}

// NoWriteDeadline lifts a server-wide write deadline for a generation's reply: its length
// is bounded by max_tokens, not by the server's timeout for ordinary requests.
func NoWriteDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
}

// Span attributes and events of a compatible request: the gen_ai semantic conventions
// plus the correlation keys, on the HTTP server span.

// GenAIRequest records what was asked on the request's span.
func GenAIRequest(r *http.Request, op string, t *service.InferenceTarget, req Request) {
	sp := trace.SpanFromContext(r.Context())
	if !sp.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String(telemetry.AttrGenAIOperationName, op),
		attribute.String(telemetry.AttrGenAIRequestModel, t.Model),
		attribute.Int(telemetry.AttrGenAIRequestMaxTokens, req.Params.MaxTokens),
		attribute.Float64(telemetry.AttrGenAIRequestTemperature, req.Params.Temperature),
		attribute.Float64(telemetry.AttrGenAIRequestTopP, req.Params.TopP),
		attribute.Int(telemetry.AttrGenAIRequestChoiceCount, req.N*len(req.Prompts)),
		attribute.String(telemetry.AttrOperationType, telemetry.OpSample),
		attribute.String(telemetry.AttrBaseModel, t.BaseModel),
		attribute.Bool(telemetry.AttrHasLora, t.Checkpoint != ""),
	}
	if req.Params.TopK > 0 {
		attrs = append(attrs, attribute.Int(telemetry.AttrGenAIRequestTopK, req.Params.TopK))
	}
	if req.Params.Seed != nil {
		attrs = append(attrs, attribute.Int64(telemetry.AttrGenAIRequestSeed, *req.Params.Seed))
	}
	if t.RunID != "" {
		attrs = append(attrs, attribute.String(telemetry.AttrTrainingRunID, t.RunID))
	}
	sp.SetAttributes(attrs...)
}

// GenAIResponse records the outcome on the request's span.
func GenAIResponse(r *http.Request, id, model string, sum Summary, finish []string) {
	sp := trace.SpanFromContext(r.Context())
	if !sp.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String(telemetry.AttrGenAIResponseID, id),
		attribute.String(telemetry.AttrGenAIResponseModel, model),
		attribute.Int(telemetry.AttrGenAIInputTokens, sum.PromptTokens),
		attribute.Int(telemetry.AttrGenAIOutputTokens, sum.CompletionTokens),
		attribute.StringSlice(telemetry.AttrGenAIFinishReasons, finish),
	}
	if len(sum.RequestIDs) > 0 && sum.RequestIDs[0] != "" {
		// One future per prompt; the first names the request for queries by tuft.request_id.
		attrs = append(attrs, attribute.String(telemetry.AttrRequestID, sum.RequestIDs[0]))
	}
	sp.SetAttributes(attrs...)
}

// FirstToken marks, on the request's span, when the first generated text went out.
func FirstToken(r *http.Request, since time.Time) {
	sp := trace.SpanFromContext(r.Context())
	if sp.IsRecording() {
		sp.AddEvent(telemetry.EventFirstToken, trace.WithAttributes(
			attribute.Float64(telemetry.AttrTimeToFirstToken, float64(time.Since(since).Microseconds())/1000)))
	}
}
