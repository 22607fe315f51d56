package textgen

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
)

// Deps is what the api package hands the compatible routes.
type Deps struct {
	Service *service.Service
	// Authenticate returns the tenant of the request's API key (Authorization: Bearer,
	// X-API-Key), or a service error of KindUnauthorized.
	Authenticate    func(r *http.Request) (string, error)
	MaxRequestBytes int64
	Log             *slog.Logger
	// Now and NewID make responses reproducible in tests (default: the clock, random ids).
	Now   func() time.Time
	NewID func() string
}

// WithDefaults fills the optional fields.
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
	if d.MaxRequestBytes <= 0 {
		d.MaxRequestBytes = 64 << 20
	}
	return d
}

// ErrTooLarge is returned by ReadBody for a body over the limit.
var ErrTooLarge = errors.New("request body too large")

// ReadBody reads the whole body, at most limit bytes.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, fmt.Errorf("%w: the limit is limits.max_request_bytes = %d bytes", ErrTooLarge, mbe.Limit)
	}
	if err != nil {
		return nil, fmt.Errorf("could not read the request body: %w", err)
	}
	return b, nil
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
