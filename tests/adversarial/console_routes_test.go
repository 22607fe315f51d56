package adversarial

import (
	"bytes"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/console"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
)

// The console's routes sit outside the API's mux (TestEveryRouteIsBehindAdmissionAndBodyLimits
// walks that one), so they get their own walk: every page that reads the API and every
// route the console forwards is refused with the API's own 429 once the signed-in tenant
// is at its concurrency limit, a forwarded body over limits.max_request_bytes is a 413
// naming it, and the console's own forms are bounded. The console reaches the API only
// through the API's handler with the session's key, which is what this checks from outside.
func TestConsoleRoutesAreBehindAdmissionAndBodyLimits(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Console.Enabled = true
	cfg.Limits.MaxConcurrentRequestsPerTenant = 2
	cfg.Limits.MaxRequestBytes = 256 << 10
	cfg.Server.ReadBodyTimeoutSeconds = 60
	s := testenv.Start(t, cfg)
	web := signInToConsole(t, s.URL(), testenv.KeyA)

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := web.Get(s.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Signed in and free: the pages answer.
	for _, p := range []string{"/console/runs", "/console/checkpoints", "/console/usage", "/console/api/api/v1/training_runs"} {
		if code, body := get(p); code != http.StatusOK {
			t.Fatalf("GET %s while free: %d %.300s", p, code, body)
		}
	}

	// A forwarded body over limits.max_request_bytes is the API's 413.
	over := append(append([]byte(`{"x": "`), bytes.Repeat([]byte("y"), int(cfg.Limits.MaxRequestBytes))...), `"}`...)
	req, _ := http.NewRequest("POST", s.URL()+"/console/api/oai/api/v1/chat/completions", bytes.NewReader(over))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-CSRF-Token", consoleCSRF(t, web, s.URL()))
	resp, err := web.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "limits.max_request_bytes") {
		t.Errorf("forwarded chat completion over limits.max_request_bytes: %d %.300s", resp.StatusCode, b)
	}
	// The console's own form is bounded before it is parsed.
	resp, err = web.Post(s.URL()+"/console/login", "application/x-www-form-urlencoded", bytes.NewReader(bytes.Repeat([]byte("a"), 1<<20)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 || resp.StatusCode >= 500 {
		t.Errorf("a 1 MiB sign-in form: %d, want a refusal", resp.StatusCode)
	}

	// Tenant A's slots are held by stalled uploads: every page that reads the API and
	// every forwarded route answers the API's 429, naming the key.
	for i := 0; i < cfg.Limits.MaxConcurrentRequestsPerTenant; i++ {
		stall(t, s.URL(), testenv.KeyA, 1000, "{", false)
	}
	check.Eventually(t, 10*time.Second, "tenant A at its concurrency limit", func() bool {
		code, _ := get("/console/api/api/v1/training_runs")
		return code == http.StatusTooManyRequests
	})
	var walked int
	for _, p := range consoleAPIPaths() {
		code, body := get(p)
		if code != http.StatusTooManyRequests || !strings.Contains(body, "limits.max_concurrent_requests_per_tenant") {
			t.Errorf("GET %s by a tenant at its concurrency limit: %d %.300s", p, code, body)
		}
		walked++
	}
	t.Logf("%d console routes walked at the limit", walked)
}

// consoleAPIPaths are the console's pages that read the API and its forwarded GET routes,
// made concrete.
func consoleAPIPaths() []string {
	paths := []string{"/console/runs", "/console/runs/x", "/console/checkpoints", "/console/usage", "/console/sessions/x",
		"/console/sessions/x/trace"}
	for _, pattern := range console.ForwardedRoutes() {
		// The operator's routes answer a tenant's key 403 (the API's route walk covers them
		// with the operator key).
		if method, p := concrete(pattern); method == "GET" && !strings.Contains(p, "/admin/") {
			paths = append(paths, "/console/api"+p)
		}
	}
	return paths
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signInToConsole signs a cookie-keeping client in to the console with key.
func signInToConsole(t *testing.T, base, key string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	web := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := web.Get(base + "/console/login")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfField.FindSubmatch(b)
	if m == nil {
		t.Fatalf("the sign-in page has no CSRF field: %.300s", b)
	}
	resp, err = web.PostForm(base+"/console/login", url.Values{"csrf": {string(m[1])}, "api_key": {key}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sign-in: %d %.300s", resp.StatusCode, b)
	}
	return web
}

// consoleCSRF reads the signed-in session's CSRF token from a page.
func consoleCSRF(t *testing.T, web *http.Client, base string) string {
	t.Helper()
	resp, err := web.Get(base + "/console/runs")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, re := range []*regexp.Regexp{csrfField, regexp.MustCompile(`name="csrf-token" content="([^"]+)"`)} {
		if m := re.FindSubmatch(b); m != nil {
			return string(m[1])
		}
	}
	t.Fatalf("no CSRF token on the runs page: %.300s", b)
	return ""
}
