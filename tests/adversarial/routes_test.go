package adversarial

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
)

// publicRoutes are the routes that take no API key, so no admission and no body: the
// health check, the two signed links, and the not-found answers. A route added later is
// authenticated unless it is registered as public; one registered as public fails this
// test until it is listed here, on purpose.
var publicRoutes = map[string]bool{
	"GET /api/v1/healthz": true, "GET /api/v1/archive/{token}": true, "GET /api/v1/external_weights/{token}/{file}": true,
	"/": true, "/oai/api/v1/": true, "/anthropic/api/": true,
	"GET /api/v1/session_trace/{token}": true, // a signed trace-export link, like an archive's
}

var wildcard = regexp.MustCompile(`\{[a-z_]+(\.\.\.)?\}`)

// concrete turns a route pattern into a method and a path that the route serves.
func concrete(pattern string) (method, path string) {
	method, path = "POST", pattern
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		method, path = pattern[:i], pattern[i+1:]
	}
	path = wildcard.ReplaceAllStringFunc(path, func(w string) string {
		if strings.HasSuffix(w, "...}") {
			return "weights/x"
		}
		return "x"
	})
	return method, path
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

// Finding 2 of issue 22: the OpenAI and Anthropic routes skipped per-tenant admission
// (limits.max_concurrent_requests_per_tenant, the body budgets) and read a gzip body as
// raw JSON. Every route now passes the same layers. The test walks every route mounted
// on the server's mux (not a hand-made list that could go stale) and checks, on each:
// a tenant at its concurrency limit gets 429 naming the key; a body in an encoding the
// server does not decode is 415; a gzip body that inflates past limits.max_request_bytes
// is 413 (so the body was inflated before the route); a body over
// limits.max_request_bytes is 413 naming it. A gzip body is decoded on the OpenAI,
// Anthropic and Tinker routes alike.
func TestEveryRouteIsBehindAdmissionAndBodyLimits(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Limits.MaxConcurrentRequestsPerTenant = 2
	cfg.Limits.MaxRequestBytes = 256 << 10
	cfg.Server.ReadBodyTimeoutSeconds = 60
	const opKey = "tml-operator-adversarial-0123456789"
	cfg.Auth.OperatorKeySHA256 = testenv.HashKey(opKey)
	s := testenv.Start(t, cfg)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	b := testenv.NewClient(t, s.URL(), testenv.KeyB)
	op := testenv.NewClient(t, s.URL(), opKey)

	// A gzip body is decoded on every dialect.
	for _, c := range []struct {
		route string
		body  any
	}{
		{"/api/v1/create_session", map[string]any{"tags": []string{}, "user_metadata": map[string]any{}, "sdk_version": "0.38.0"}},
		{"/oai/api/v1/completions", map[string]any{"model": testenv.Model, "prompt": "Hi", "max_tokens": 2}},
		{"/oai/api/v1/chat/completions", map[string]any{"model": testenv.Model, "messages": []any{map[string]any{"role": "user", "content": "Hi"}}, "max_tokens": 2}},
		{"/anthropic/api/v1/messages", map[string]any{"model": testenv.Model, "messages": []any{map[string]any{"role": "user", "content": "Hi"}}, "max_tokens": 2}},
	} {
		j, _ := json.Marshal(c.body)
		if r := b.Do("POST", c.route, gzipped(j), map[string]string{"Content-Encoding": "gzip"}); r.Status != 200 {
			t.Errorf("%s with a gzip body: %d %s", c.route, r.Status, r.Body)
		}
	}

	routes := s.Handler.Routes()
	var authed []string
	operator := map[string]bool{} // routes of the operator key, which has slots of its own
	seenPublic, prefixes := map[string]bool{}, map[string]int{}
	for _, rt := range routes {
		if rt.Public {
			if !publicRoutes[rt.Pattern] {
				t.Errorf("route %q is public (no API key, no admission): list it in publicRoutes only if it must be", rt.Pattern)
			}
			seenPublic[rt.Pattern] = true
			continue
		}
		authed = append(authed, rt.Pattern)
		operator[rt.Pattern] = rt.Operator
		for _, p := range []string{"/api/v1/", "/oai/", "/anthropic/"} {
			if strings.Contains(rt.Pattern, p) {
				prefixes[p]++
			}
		}
	}
	for p := range publicRoutes {
		if !seenPublic[p] {
			t.Errorf("public route %q is not mounted (or not public)", p)
		}
	}
	if prefixes["/api/v1/"] < 30 || prefixes["/oai/"] < 3 || prefixes["/anthropic/"] < 2 {
		t.Fatalf("the route walk found too few routes: %v of %d", prefixes, len(routes))
	}

	bomb := gzipped(append(append([]byte(`{"x": "`), bytes.Repeat([]byte(" "), 300<<10)...), `"}`...))
	over := append(append([]byte(`{"x": "`), bytes.Repeat([]byte("y"), int(cfg.Limits.MaxRequestBytes))...), `"}`...)
	bodyLimits := func(c *testenv.Client, method, path string) {
		t.Helper()
		if r := c.Do(method, path, []byte(`{}`), map[string]string{"Content-Encoding": "br"}); r.Status != http.StatusUnsupportedMediaType {
			t.Errorf("%s %s with Content-Encoding br: %d %s", method, path, r.Status, r.Body)
		}
		if r := c.Do(method, path, bomb, map[string]string{"Content-Encoding": "gzip"}); r.Status != http.StatusRequestEntityTooLarge ||
			!strings.Contains(string(r.Body), "decompressed body exceeds limits.max_request_bytes") {
			t.Errorf("%s %s with a gzip bomb: %d %s", method, path, r.Status, r.Body)
		}
		if r := c.Do(method, path, over, nil); r.Status != http.StatusRequestEntityTooLarge || !strings.Contains(string(r.Body), "limits.max_request_bytes") {
			t.Errorf("%s %s with a body over limits.max_request_bytes: %d %.200s", method, path, r.Status, r.Body)
		}
	}
	// The operator's routes, with its slots free; then its slots are held too.
	for _, pattern := range authed {
		if operator[pattern] {
			method, path := concrete(pattern)
			bodyLimits(op, method, path)
		}
	}

	// Tenant A's two slots, and the operator's, are held by stalled uploads.
	for i := 0; i < cfg.Limits.MaxConcurrentRequestsPerTenant; i++ {
		stall(t, s.URL(), testenv.KeyA, 1000, "{", false)
		c, err := net.Dial("tcp", strings.TrimPrefix(s.URL(), "http://")) // the operator's route, its body stalled
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_, _ = fmt.Fprintf(c, "GET /api/v1/admin/overview HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\nContent-Length: 1000\r\n\r\n{", opKey)
	}
	check.Eventually(t, 10*time.Second, "tenant A and the operator at their concurrency limit", func() bool {
		return a.Do("GET", "/api/v1/sessions", nil, nil).Status == http.StatusTooManyRequests &&
			op.Do("GET", "/api/v1/admin/overview", nil, nil).Status == http.StatusTooManyRequests
	})
	for _, pattern := range authed {
		method, path := concrete(pattern)
		c := a
		if operator[pattern] {
			c = op
		}
		if r := c.Do(method, path, []byte(`{}`), nil); r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" ||
			!strings.Contains(string(r.Body), "limits.max_concurrent_requests_per_tenant") {
			t.Errorf("%s %s by a tenant at its concurrency limit: %d %s", method, path, r.Status, r.Body)
		}
		if !operator[pattern] {
			bodyLimits(b, method, path)
		}
	}
	t.Logf("%d routes walked: %d authenticated (%v), %d public", len(routes), len(authed), prefixes, len(seenPublic))
}
