package console_test

import (
	"io"
	"log/slog"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
)

// A page has its HTTP server span named after its route; a forwarded call has the API's
// span of the API route it reaches.
func TestPagesAndForwardedCallsHaveServerSpans(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	cfg := testenv.Config(t, t.TempDir(), "memory")
	s := testenv.StartWith(t, cfg, server.Options{TracerProvider: tp, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	b := newBrowser(t, s.URL())
	b.signIn(testenv.KeyA)
	b.get("/console/runs")
	b.get("/console/api/api/v1/training_runs")
	var names []string
	for _, sp := range rec.Ended() {
		names = append(names, sp.Name())
	}
	for _, want := range []string{"GET /console/login", "POST /console/login", "GET /console/runs", "GET /api/v1/training_runs", "GET /api/v1/auth/apikey/me"} {
		if !slices.Contains(names, want) {
			t.Errorf("no span %q in %v", want, names)
		}
	}
}
