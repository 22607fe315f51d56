package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/server"
	"github.com/tuft-go/tuft/telemetry"
	"github.com/tuft-go/tuft/telemetry/setup"
)

// Keys of the two test tenants.
const (
	KeyA = "tml-test-key-tenant-a-0123456789"
	KeyB = "tml-test-key-tenant-b-0123456789"
	// Model is the base model name tests use.
	Model = "tuft/tiny"
)

var (
	presetOnce sync.Once
	presetDir  string
	presetErr  error
)

// TinyDir returns a directory holding the tiny preset, written once per process.
func TinyDir(t testing.TB) string {
	presetOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tuft-tiny-*")
		if err != nil {
			presetErr = err
			return
		}
		presetDir = filepath.Join(dir, "tiny")
		presetErr = engine.WritePreset("tiny", presetDir)
	})
	if presetErr != nil {
		t.Fatalf("write tiny preset: %v", presetErr)
	}
	return presetDir
}

// Config returns a config for a test server under dir: tiny model from TinyDir, two
// tenants, the given persistence mode.
func Config(t testing.TB, dir, mode string) config.Config {
	cfg := config.Default(dir)
	cfg.Models = []config.Model{{Name: Model, Path: TinyDir(t), MaxLoraRank: 32, LoraAlphaRatio: 1}}
	cfg.Auth.APIKeys = []config.APIKey{{Tenant: "alice", KeySHA256: config.HashAPIKey(KeyA).String()}, {Tenant: "bob", KeySHA256: config.HashAPIKey(KeyB).String()}}
	cfg.Persistence.Mode = mode
	cfg.Persistence.Path = filepath.Join(dir, "tuft.db")
	cfg.CheckpointDir = filepath.Join(dir, "checkpoints")
	cfg.Server.Port = 0
	cfg.Server.LongPollSeconds = 2
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// Start runs a server with cfg until the test ends.
func Start(t testing.TB, cfg config.Config) *server.Server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return StartWith(t, cfg, server.Options{Logger: log})
}

// StartWith runs a server with cfg and options until the test ends.
func StartWith(t testing.TB, cfg config.Config, o server.Options) *server.Server {
	t.Helper()
	if cfg.Sessions.RecordSpans && o.TracerProvider == nil && o.SessionSpans == nil {
		// As tuft launch does: the session-span processor on the server's own provider.
		tel, err := setup.New(context.Background(), cfg.Telemetry, "server", setup.WithSessionSpans(&telemetry.SpanSink{}),
			setup.WithLogWriter(io.Discard))
		if err != nil {
			t.Fatalf("telemetry: %v", err)
		}
		t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
		o.TracerProvider, o.MeterProvider, o.Instruments, o.SessionSpans = tel.TracerProvider(), tel.MeterProvider(), tel.Instruments(), tel.SessionSpans()
	}
	s, err := server.Start(context.Background(), cfg, o)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

// Client is a minimal HTTP client for the Tinker routes.
type Client struct {
	T    testing.TB
	Base string
	Key  string
	HTTP *http.Client
}

// transport keeps a connection per concurrent client alive: the default transport keeps
// only two idle connections per host, so many concurrent clients would redial (and
// measure TCP setup, not the server) on almost every request.
var transport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 1024, 1024
	return t
}()

// NewClient returns a client for base with key.
func NewClient(t testing.TB, base, key string) *Client {
	return &Client{T: t, Base: base, Key: key, HTTP: &http.Client{Transport: transport, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Response is a finished HTTP exchange.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test on error.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %d body %q: %v", r.Status, r.Body, err)
	}
}

// Do sends a request; body may be nil, []byte or a value marshalled as JSON.
func (c *Client) Do(method, path string, body any, header map[string]string) *Response {
	c.T.Helper()
	var rd io.Reader
	ct := "application/json"
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			c.T.Fatalf("marshal: %v", err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.Base+path, rd)
	if err != nil {
		c.T.Fatalf("new request: %v", err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", ct)
	}
	if c.Key != "" {
		req.Header.Set("X-API-Key", c.Key)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		c.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.T.Fatalf("read body: %v", err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Post sends a JSON POST and requires a 2xx answer decoded into out (if non-nil).
func (c *Client) Post(path string, body, out any) *Response {
	c.T.Helper()
	r := c.Do("POST", path, body, nil)
	if r.Status/100 != 2 {
		c.T.Fatalf("POST %s: %d %s", path, r.Status, r.Body)
	}
	if out != nil {
		r.JSON(c.T, out)
	}
	return r
}

// Wait polls retrieve_future until the future resolves and returns the final response.
func (c *Client) Wait(requestID string, accept string) *Response {
	c.T.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		h := map[string]string{}
		if accept != "" {
			h["Accept"] = accept
		}
		r := c.Do("POST", "/api/v1/retrieve_future", map[string]any{"request_id": requestID, "allow_metadata_only": false}, h)
		if r.Status == http.StatusRequestTimeout {
			continue
		}
		return r
	}
	c.T.Fatalf("future %s did not resolve", requestID)
	return nil
}

// Result waits for a future and requires success, decoding a JSON result into out.
func (c *Client) Result(requestID string, out any) *Response {
	c.T.Helper()
	r := c.Wait(requestID, "")
	if r.Status != 200 {
		c.T.Fatalf("future %s: %d %s", requestID, r.Status, r.Body)
	}
	var probe map[string]any
	if json.Unmarshal(r.Body, &probe) == nil {
		if e, ok := probe["error"]; ok {
			c.T.Fatalf("future %s failed: %v (%v)", requestID, e, probe["category"])
		}
	}
	if out != nil {
		r.JSON(c.T, out)
	}
	return r
}

// HashKey is the SHA-256 of an API key, as auth.api_keys stores it.
func HashKey(k string) string { return config.HashAPIKey(k).String() }

// FreePort returns a loopback TCP port that is free now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// BuildTuft compiles the tuft binary into a temporary directory, for tests that run real
// processes.
func BuildTuft(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tuft")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/tuft-go/tuft/cmd/tuft").CombinedOutput(); err != nil {
		t.Fatalf("build tuft: %v\n%s", err, out)
	}
	return bin
}
