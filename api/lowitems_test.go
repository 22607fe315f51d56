package api_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
	"github.com/tuft-go/tuft/server"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func loggedServer(t *testing.T) (*harness, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cfg := testenv.Config(t, t.TempDir(), "memory")
	s := testenv.StartWith(t, cfg, server.Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	return &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}, logs
}

// A client that gives up on a long-poll is not a server error.
func TestClientLeavingALongPollIsNotAServerError(t *testing.T) {
	h, logs := loggedServer(t)
	model := h.model(h.a, h.session(h.a), 0, 4)
	var f future
	// seq_id 5 waits for 1..4: the future stays pending.
	h.a.Post("/api/v1/optim_step", optim(model, 5, 1e-3), &f)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", h.url+"/api/v1/retrieve_future", strings.NewReader(`{"request_id":"`+f.RequestID+`"}`))
	req.Header.Set("X-API-Key", testenv.KeyA)
	req.Header.Set("Content-Type", "application/json")
	wrote := make(chan struct{})
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(wrote) }}))
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-wrote
	cancel()
	<-done
	// The server notices the client left: the log says so at debug, and nothing at ERROR.
	check.Eventually(t, 10*time.Second, "the log to say the client left", func() bool { return strings.Contains(logs.String(), "client left") })
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("a client leaving a long-poll was logged as an error:\n%s", logs.String())
	}
}

// Client telemetry is logged capped and sanitised, each record marked as the client's.
func TestClientTelemetryIsCappedAndSanitised(t *testing.T) {
	h, logs := loggedServer(t)
	huge := strings.Repeat("A", 32<<10)
	ev := map[string]any{"event": "UNHANDLED_EXCEPTION", "event_id": "e1", "event_session_index": 0, "severity": "ERROR",
		"timestamp": time.Now().UTC().Format(time.RFC3339), "error_type": "Boom\x1b[31m", "error_message": huge, "traceback": huge}
	events := []any{}
	for i := 0; i < 200; i++ {
		events = append(events, ev)
	}
	r := h.a.Do("POST", "/api/v1/telemetry", map[string]any{"events": events, "session_id": "s", "platform": "p", "sdk_version": "0.25.0"}, nil)
	if r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	out := logs.String()
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "client unhandled exception") && !strings.Contains(line, "source=tinker-sdk") {
			t.Fatalf("a client's exception is not marked as the client's: %.200s", line)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Fatal("control characters from the client reached the log")
	}
	if n := strings.Count(out, "client unhandled exception"); n == 0 || n > 100 {
		t.Fatalf("%d client events logged from one request", n)
	}
	if len(out) > 4<<20 {
		t.Fatalf("one telemetry request logged %d bytes", len(out))
	}
}

// A redirect to a path with a trailing slash keeps the path's escaping.
func TestTrailingSlashRedirectKeepsEscaping(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	for _, p := range []string{"/api/v1/training_runs/a%2Fb/checkpoints", "/api/v1/training_runs/a%25b/checkpoints", "/api/v1/training_runs/a%20b/checkpoints"} {
		r := h.a.Do("DELETE", p, nil, nil)
		if r.Status == http.StatusTemporaryRedirect || r.Status == http.StatusMovedPermanently || r.Status == http.StatusPermanentRedirect {
			if got := r.Header.Get("Location"); got != p+"/" {
				t.Fatalf("%s redirects to %s", p, got)
			}
		}
	}
}
