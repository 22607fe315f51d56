package api_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
)

// rawConn is a hand-driven HTTP/1.1 connection: it can declare a body and then stall.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, base string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

// send writes a request head declaring contentLength body bytes (-1: chunked), then the
// first part of the body.
func (rc *rawConn) send(method, path, key string, contentLength int64, part string) {
	rc.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n", method, path)
	if key != "" {
		fmt.Fprintf(&b, "X-API-Key: %s\r\n", key)
	}
	if contentLength >= 0 {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", contentLength)
	} else {
		b.WriteString("Transfer-Encoding: chunked\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(part)
	if _, err := io.WriteString(rc.c, b.String()); err != nil {
		rc.t.Fatal(err)
	}
}

// response reads the reply within d; ok is false when none came (or the connection was
// closed without one).
func (rc *rawConn) response(d time.Duration) (resp *http.Response, body string, ok bool) {
	_ = rc.c.SetReadDeadline(time.Now().Add(d))
	r, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		return nil, "", false
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	return r, string(b), true
}

// closedWithin reports whether the server closes the connection within d.
func (rc *rawConn) closedWithin(d time.Duration) bool {
	_ = rc.c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, rc.br)
	var ne net.Error
	return err == nil || !(asNetErr(err, &ne) && ne.Timeout())
}

func asNetErr(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	if ok {
		*ne = e
	}
	return ok
}

func limitsServer(t *testing.T, edit func(*config.Config)) string {
	t.Helper()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return testenv.Start(t, cfg).URL()
}

// A request that declares a body and never sends it must not hold up the answer of a
// route that reads no body, nor its connection.
func TestStalledBodyDoesNotBlockBodylessRoutes(t *testing.T) {
	t.Parallel()
	base := limitsServer(t, nil)
	rc := dialRaw(t, base)
	rc.send("GET", "/api/v1/healthz", "", 100, "")
	r, body, ok := rc.response(3 * time.Second)
	if !ok || r.StatusCode != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("healthz with a declared, unsent body: answered=%v %v %q", ok, r, body)
	}
	if !rc.closedWithin(3 * time.Second) {
		t.Fatal("the connection of an unread body stays open")
	}
}

// Without a key, a stalled body is answered 401 at once and its connection closed: an
// anonymous client cannot hold the server's connections with bodies it never sends.
func TestUnauthenticatedStallIsAnsweredAndClosedAtOnce(t *testing.T) {
	t.Parallel()
	base := limitsServer(t, nil)
	for _, key := range []string{"", "tml-not-a-key"} {
		for _, cl := range []int64{100, 63 << 20, -1} {
			rc := dialRaw(t, base)
			rc.send("POST", "/api/v1/create_session", key, cl, "")
			r, _, ok := rc.response(3 * time.Second)
			if !ok || r.StatusCode != http.StatusUnauthorized {
				t.Fatalf("key %q content-length %d: answered=%v %v", key, cl, ok, r)
			}
			if !rc.closedWithin(3 * time.Second) {
				t.Fatalf("key %q content-length %d: connection left open", key, cl)
			}
		}
	}
}

// An authenticated upload that stalls is cut off after server.read_body_timeout_seconds
// with a 408 naming the limit.
func TestStalledAuthenticatedUploadTimesOut(t *testing.T) {
	base := limitsServer(t, func(c *config.Config) { c.Server.ReadBodyTimeoutSeconds = 0.5 })
	for _, cl := range []int64{63 << 20, 1000, -1} {
		rc := dialRaw(t, base)
		part := `{"model_id": "x", `
		if cl < 0 {
			part = fmt.Sprintf("%x\r\n%s\r\n", len(part), part)
		}
		start := time.Now()
		rc.send("POST", "/api/v1/forward_backward", testenv.KeyA, cl, part)
		r, body, ok := rc.response(5 * time.Second)
		if !ok || r.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, "server.read_body_timeout_seconds") {
			t.Fatalf("content-length %d: answered=%v %v %q", cl, ok, r, body)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Fatalf("content-length %d: answered after %s", cl, d)
		}
		if !rc.closedWithin(3 * time.Second) {
			t.Fatalf("content-length %d: connection left open", cl)
		}
	}
}

// A tenant over limits.max_concurrent_requests_per_tenant gets 429 naming the limit; the
// other tenant is served; over limits.max_concurrent_requests everyone gets 503.
func TestConcurrentRequestLimits(t *testing.T) {
	base := limitsServer(t, func(c *config.Config) {
		c.Limits.MaxConcurrentRequestsPerTenant = 2
		c.Limits.MaxConcurrentRequests = 3
		c.Server.ReadBodyTimeoutSeconds = 30
	})
	// Two stalled uploads of tenant A hold its two slots.
	for i := 0; i < 2; i++ {
		rc := dialRaw(t, base)
		rc.send("POST", "/api/v1/create_session", testenv.KeyA, 1000, "{")
	}
	a := testenv.NewClient(t, base, testenv.KeyA)
	b := testenv.NewClient(t, base, testenv.KeyB)
	check.Eventually(t, 10*time.Second, "tenant A at its concurrency limit (429)", func() bool {
		r := a.Do("GET", "/api/v1/sessions", nil, nil)
		return r.Status == http.StatusTooManyRequests
	})
	r := a.Do("GET", "/api/v1/sessions", nil, nil)
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "limits.max_concurrent_requests_per_tenant") {
		t.Fatalf("tenant over its limit: %d %q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	if r := b.Do("GET", "/api/v1/sessions", nil, nil); r.Status != 200 {
		t.Fatalf("the other tenant: %d %s", r.Status, r.Body)
	}
	// A third stalled request (tenant B) fills the server.
	rc := dialRaw(t, base)
	rc.send("POST", "/api/v1/create_session", testenv.KeyB, 1000, "{")
	check.Eventually(t, 10*time.Second, "the server at its concurrency limit (503)", func() bool { return b.Do("GET", "/api/v1/sessions", nil, nil).Status == http.StatusServiceUnavailable })
	r = b.Do("GET", "/api/v1/sessions", nil, nil)
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "limits.max_concurrent_requests") {
		t.Fatalf("server over its limit: %d %q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
}

// A tenant's bodies in memory are bounded by limits.max_body_bytes_in_flight_per_tenant:
// a declared body that does not fit is refused before a byte of it is read.
func TestBodyBytesInFlightLimit(t *testing.T) {
	base := limitsServer(t, func(c *config.Config) {
		c.Limits.MaxRequestBytes = 1 << 20
		c.Limits.MaxBodyBytesInFlightPerTenant = 3 << 19
		c.Limits.MaxBodyBytesInFlight = 3 << 20
		c.Server.ReadBodyTimeoutSeconds = 30
	})
	// Tenant A stalls an upload of 1 MiB after 600 KiB: its buffer holds (and the budget
	// counts) about 1 MiB.
	rc0 := dialRaw(t, base)
	rc0.send("POST", "/api/v1/create_session", testenv.KeyA, 1<<20, "{"+strings.Repeat(" ", 600<<10))
	a := testenv.NewClient(t, base, testenv.KeyA)
	big := []byte(`{"tags": [], "pad": "` + strings.Repeat("x", (1<<20)-40) + `"}`)
	check.Eventually(t, 10*time.Second, "tenant A at its body budget (429)", func() bool {
		return a.Do("POST", "/api/v1/create_session", big, nil).Status == http.StatusTooManyRequests
	})
	r := a.Do("POST", "/api/v1/create_session", big, nil)
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "limits.max_body_bytes_in_flight_per_tenant") {
		t.Fatalf("tenant over its body budget: %d %s", r.Status, r.Body)
	}
	b := testenv.NewClient(t, base, testenv.KeyB)
	if r := b.Do("POST", "/api/v1/create_session", []byte(`{"tags": []}`), nil); r.Status != 200 {
		t.Fatalf("the other tenant: %d %s", r.Status, r.Body)
	}
	// A body declared larger than limits.max_request_bytes is refused unread.
	rc := dialRaw(t, base)
	rc.send("POST", "/api/v1/create_session", testenv.KeyB, 2<<20, "")
	resp, body, ok := rc.response(3 * time.Second)
	if !ok || resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "limits.max_request_bytes") {
		t.Fatalf("oversized declared body: answered=%v %v %q", ok, resp, body)
	}
}

// When server.max_connections are open, a new connection evicts the one idle longest
// instead of being refused; only when every connection is busy with a request is the new
// one closed at once (finding 4 of issue 22).
func TestConnectionLimit(t *testing.T) {
	base := limitsServer(t, func(c *config.Config) { c.Server.MaxConnections = 16 })
	var held []*rawConn
	for i := 0; i < 16; i++ {
		rc := dialRaw(t, base)
		rc.send("GET", "/api/v1/healthz", "", 0, "")
		if _, _, ok := rc.response(3 * time.Second); !ok {
			t.Fatalf("connection %d not served", i)
		}
		// The server marks a connection idle (its ConnState hook) after the client may
		// already have read the response: wait so the idle times are in dial order.
		time.Sleep(20 * time.Millisecond)
		held = append(held, rc)
	}
	extra := dialRaw(t, base)
	extra.send("GET", "/api/v1/healthz", "", 0, "")
	if _, _, ok := extra.response(3 * time.Second); !ok {
		t.Fatal("a connection over server.max_connections was refused while idle ones held the slots")
	}
	if !held[0].closedWithin(3 * time.Second) {
		t.Fatal("the connection idle longest was not evicted")
	}
	// Sixteen busy connections (stalled authenticated uploads): a seventeenth is closed.
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Server.MaxConnections, cfg.Server.ReadBodyTimeoutSeconds = 16, 30
	s := testenv.Start(t, cfg)
	for i := 0; i < 16; i++ {
		rc := dialRaw(t, s.URL())
		rc.send("POST", "/api/v1/create_session", testenv.KeyA, 1000, "{")
	}
	// Until the server has read a request's head, its connection counts as idle.
	check.Eventually(t, 10*time.Second, "16 open busy connections", func() bool { st := s.Conns.Stats(); return st.Open == 16 && st.Idle == 0 })
	c, err := net.Dial("tcp", strings.TrimPrefix(s.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if rc := (&rawConn{t: t, c: c, br: bufio.NewReader(c)}); !rc.closedWithin(3 * time.Second) {
		t.Fatal("a connection over server.max_connections stays open while every connection is busy")
	}
}

func zstdBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	e, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.EncodeAll(b, nil)
}

// Content-Encoding is honoured on every route (zstd, gzip) or refused with 415; a body
// that inflates past limits.max_decompression_ratio is refused once it has inflated that
// much.
func TestContentEncodingOnJSONRoutes(t *testing.T) {
	t.Parallel()
	base := limitsServer(t, nil)
	a := testenv.NewClient(t, base, testenv.KeyA)
	body := []byte(`{"tags": ["zipped"], "user_metadata": {}, "sdk_version": "0.25.0"}`)
	if r := a.Do("POST", "/api/v1/create_session", zstdBytes(t, body), map[string]string{"Content-Encoding": "zstd"}); r.Status != 200 {
		t.Fatalf("zstd JSON body: %d %s", r.Status, r.Body)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(body)
	zw.Close()
	if r := a.Do("POST", "/api/v1/create_session", gz.Bytes(), map[string]string{"Content-Encoding": "gzip"}); r.Status != 200 {
		t.Fatalf("gzip JSON body: %d %s", r.Status, r.Body)
	}
	if r := a.Do("POST", "/api/v1/create_session", body, map[string]string{"Content-Encoding": "br"}); r.Status != http.StatusUnsupportedMediaType || !strings.Contains(string(r.Body), "br") {
		t.Fatalf("unsupported encoding: %d %s", r.Status, r.Body)
	}
	// 16 MiB of spaces in a few KiB: over the default ratio of 100.
	bomb := zstdBytes(t, append(append([]byte(`{"tags": [`), bytes.Repeat([]byte(" "), 16<<20)...), `]}`...))
	r := a.Do("POST", "/api/v1/create_session", bomb, map[string]string{"Content-Encoding": "zstd"})
	if r.Status != http.StatusRequestEntityTooLarge || !strings.Contains(string(r.Body), "limits.max_decompression_ratio") {
		t.Fatalf("zstd bomb (%d bytes): %d %s", len(bomb), r.Status, r.Body)
	}
	if r := a.Do("POST", "/api/v1/forward_backward", bomb, map[string]string{"Content-Encoding": "zstd", "Content-Type": "application/x-protobuf"}); r.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("zstd bomb on forward_backward: %d %s", r.Status, r.Body)
	}
}
