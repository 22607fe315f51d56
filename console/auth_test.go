package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/console"
	"github.com/tuft-go/tuft/internal/testenv"
)

func TestSignInCookie(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	b := newBrowser(t, s.URL())
	r := b.signIn(testenv.KeyA)
	c := cookie(r, "tuft_console")
	if c == nil {
		t.Fatalf("no session cookie in %v", r.Header.Values("Set-Cookie"))
	}
	ttl := int(s.Cfg.Console.SessionTTLSeconds)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/console" || c.Secure || c.MaxAge <= ttl-5 || c.MaxAge > ttl ||
		c.Expires.IsZero() || strings.Contains(c.Value, testenv.KeyA) {
		t.Fatalf("session cookie %+v (raw %q): want HttpOnly, SameSite=Strict, Path=/console, not Secure over plain HTTP, expiry in %d s, no key",
			c, c.Raw, ttl)
	}
	if page := b.get("/console/runs"); page.StatusCode != 200 || !strings.Contains(page.body, `id="nav"`) || !strings.Contains(page.body, "alice") {
		t.Fatalf("runs page: %d %s", page.StatusCode, page.body)
	}

	// A wrong key gets the form again with the API's refusal, and no session.
	b2 := newBrowser(t, s.URL())
	r = b2.signInStatus("tml-not-a-key-0123456789abcdef")
	if r.StatusCode != http.StatusUnauthorized || cookie(r, "tuft_console") != nil || !strings.Contains(r.body, "invalid API key") {
		t.Fatalf("wrong key: %d %v %s", r.StatusCode, r.Header.Values("Set-Cookie"), r.body)
	}
	if p := b2.get("/console/runs"); p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != "/console/login" {
		t.Fatalf("runs without a session: %d %s", p.StatusCode, p.Header.Get("Location"))
	}
}

// Behind a TLS proxy (public_url https) the cookies are Secure.
func TestCookieSecureWithHTTPSPublicURL(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *config.Config) { c.Server.PublicURL = "https://tuft.example" })
	b := newBrowser(t, s.URL())
	login := b.get("/console/login")
	if c := cookie(login, "tuft_console_login"); c == nil || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Fatalf("login cookie %+v", c)
	}
	m := csrfField.FindStringSubmatch(login.body)
	// Go's cookie jar does not send a Secure cookie over http: send it by hand.
	r := b.postForm("/console/login", url.Values{"csrf": {m[1]}, "api_key": {testenv.KeyA}},
		map[string]string{"Cookie": "tuft_console_login=" + m[1]})
	if c := cookie(r, "tuft_console"); r.StatusCode != http.StatusSeeOther || c == nil || !c.Secure || !c.HttpOnly {
		t.Fatalf("sign-in: %d cookie %+v %s", r.StatusCode, c, r.body)
	}
}

func TestSignOutEndsTheSession(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	b := newBrowser(t, s.URL())
	r := b.signIn(testenv.KeyA)
	token := cookie(r, "tuft_console").Value

	if r := b.postForm("/console/signout", url.Values{}, nil); r.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-out without the CSRF token: %d", r.StatusCode)
	}
	r = b.postForm("/console/signout", url.Values{"csrf": {b.csrf}}, nil)
	c := cookie(r, "tuft_console")
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/console/login" || c == nil || c.MaxAge >= 0 {
		t.Fatalf("sign-out: %d %q cookie %+v", r.StatusCode, r.Header.Get("Location"), c)
	}
	// The old token is dead on the server, not only forgotten by this browser.
	replay := newBrowser(t, s.URL())
	if p := replay.do("GET", "/console/runs", nil, map[string]string{"Cookie": "tuft_console=" + token}); p.StatusCode != http.StatusSeeOther {
		t.Fatalf("runs with a signed-out token: %d", p.StatusCode)
	}
	if p := replay.do("GET", "/console/api/api/v1/training_runs", nil, map[string]string{"Cookie": "tuft_console=" + token}); p.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forwarder with a signed-out token: %d %s", p.StatusCode, p.body)
	}
}

// clock is a settable clock for session expiry.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// consoleWith serves a console over s's API with its own config and clock.
func consoleWith(t *testing.T, api http.Handler, cc config.Console, clk *clock) *httptest.Server {
	t.Helper()
	con, err := console.New(console.Options{API: api, Config: cc, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(con)
	t.Cleanup(ts.Close)
	return ts
}

func TestSessionExpires(t *testing.T) {
	s := startServer(t, nil)
	clk := &clock{t: time.Now()}
	cc := s.Cfg.Console
	cc.SessionTTLSeconds = 120
	ts := consoleWith(t, s.Handler, cc, clk)
	b := newBrowser(t, ts.URL)
	r := b.signIn(testenv.KeyA)
	if c := cookie(r, "tuft_console"); c.MaxAge != 120 || !c.Expires.Equal(clk.now().Add(120*time.Second).Truncate(time.Second)) {
		t.Fatalf("cookie expiry: max-age %d expires %v", c.MaxAge, c.Expires)
	}
	clk.add(119 * time.Second)
	if p := b.get("/console/runs"); p.StatusCode != 200 {
		t.Fatalf("before expiry: %d", p.StatusCode)
	}
	clk.add(2 * time.Second)
	if p := b.get("/console/runs"); p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != "/console/login" {
		t.Fatalf("after expiry: %d %s", p.StatusCode, p.Header.Get("Location"))
	}
	if p := b.get("/console/api/api/v1/training_runs"); p.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forwarder after expiry: %d", p.StatusCode)
	}
}

// console.max_sessions_per_tenant ends the tenant's oldest sign-in; console.max_sessions
// refuses a sign-in when others hold every place.
func TestSessionBounds(t *testing.T) {
	s := startServer(t, nil)
	clk := &clock{t: time.Now()}
	cc := s.Cfg.Console
	cc.MaxSessions, cc.MaxSessionsPerTenant = 2, 1
	ts := consoleWith(t, s.Handler, cc, clk)
	a1, a2, b1, b2 := newBrowser(t, ts.URL), newBrowser(t, ts.URL), newBrowser(t, ts.URL), newBrowser(t, ts.URL)
	a1.signIn(testenv.KeyA)
	clk.add(time.Second)
	a2.signIn(testenv.KeyA)
	if p := a1.get("/console/runs"); p.StatusCode != http.StatusSeeOther {
		t.Fatalf("the tenant's older sign-in survived its newer one: %d", p.StatusCode)
	}
	if p := a2.get("/console/runs"); p.StatusCode != 200 {
		t.Fatalf("newer sign-in: %d", p.StatusCode)
	}
	b1.signIn(testenv.KeyB)
	// Full (alice 1 + bob 1 of 2): bob's second replaces bob's first, alice's stays.
	b2.signIn(testenv.KeyB)
	if p := a2.get("/console/runs"); p.StatusCode != 200 {
		t.Fatalf("another tenant's sign-in ended alice's: %d", p.StatusCode)
	}
	cc.MaxSessions, cc.MaxSessionsPerTenant = 1, 1
	ts = consoleWith(t, s.Handler, cc, clk)
	newBrowser(t, ts.URL).signIn(testenv.KeyA)
	if r := newBrowser(t, ts.URL).signInStatus(testenv.KeyB); r.StatusCode != http.StatusServiceUnavailable || !strings.Contains(r.body, "console.max_sessions") {
		t.Fatalf("sign-in over console.max_sessions: %d %s", r.StatusCode, r.body)
	}
}

func TestCSRFRefusals(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	b := newBrowser(t, s.URL())
	b.signIn(testenv.KeyA)
	publish := "/console/api/api/v1/training_runs/no-such-run/checkpoints/weights/x/publish"
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"no token", nil, 403},
		{"wrong token", map[string]string{"X-CSRF-Token": "not-the-token"}, 403},
		{"cross-site fetch", map[string]string{"X-CSRF-Token": b.csrf, "Sec-Fetch-Site": "cross-site"}, 403},
		{"foreign origin", map[string]string{"X-CSRF-Token": b.csrf, "Sec-Fetch-Site": "", "Origin": "http://evil.example"}, 403},
		// The right token reaches the API, which answers for the (missing) checkpoint.
		{"right token", map[string]string{"X-CSRF-Token": b.csrf}, 404},
	} {
		if r := b.do("POST", publish, nil, tc.header); r.StatusCode != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, r.StatusCode, r.body, tc.want)
		}
	}
	// The console's own forms: the checkpoint actions and sign-in.
	form := url.Values{"run": {"no-such-run"}, "id": {"weights/x"}, "action": {"publish"}}
	if r := b.postForm("/console/checkpoints/action", form, nil); r.StatusCode != 403 {
		t.Errorf("checkpoint form without token: %d", r.StatusCode)
	}
	form.Set("csrf", b.csrf)
	if r := b.postForm("/console/checkpoints/action", form, map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": ""}); r.StatusCode != 403 {
		t.Errorf("checkpoint form from another origin: %d", r.StatusCode)
	}
	if r := b.postForm("/console/checkpoints/action", form, nil); r.StatusCode != 404 {
		t.Errorf("checkpoint form with token: %d %s, want the API's 404", r.StatusCode, r.body)
	}
	fresh := newBrowser(t, s.URL())
	fresh.get("/console/login")
	if r := fresh.postForm("/console/login", url.Values{"api_key": {testenv.KeyA}}, nil); r.StatusCode != 403 || cookie(r, "tuft_console") != nil {
		t.Errorf("sign-in without the form's token: %d", r.StatusCode)
	}
	if r := fresh.postForm("/console/login", url.Values{"api_key": {testenv.KeyA}, "csrf": {"forged"}}, nil); r.StatusCode != 403 {
		t.Errorf("sign-in with a forged token: %d", r.StatusCode)
	}
}

func TestConsoleOff(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *config.Config) { c.Console.Enabled = false })
	if s.Console != nil {
		t.Fatal("console built while console.enabled is off")
	}
	r := newBrowser(t, s.URL()).get("/console/login")
	if r.StatusCode != http.StatusNotFound || !strings.Contains(r.body, "no route") {
		t.Fatalf("/console/login with the console off: %d %s", r.StatusCode, r.body)
	}
}

// Signing in again in the same browser ends the browser's previous session.
func TestSignInAgainReplacesTheSession(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	b := newBrowser(t, s.URL())
	first := cookie(b.signIn(testenv.KeyA), "tuft_console").Value
	// The sign-in form is reachable while signed in only by posting to it directly.
	login := newBrowser(t, s.URL()).get("/console/login")
	m := csrfField.FindStringSubmatch(login.body)
	r := b.postForm("/console/login", url.Values{"csrf": {m[1]}, "api_key": {testenv.KeyB}},
		map[string]string{"Cookie": "tuft_console=" + first + "; tuft_console_login=" + m[1]})
	if r.StatusCode != http.StatusSeeOther || cookie(r, "tuft_console") == nil {
		t.Fatalf("second sign-in: %d %s", r.StatusCode, r.body)
	}
	if p := newBrowser(t, s.URL()).do("GET", "/console/runs", nil, map[string]string{"Cookie": "tuft_console=" + first}); p.StatusCode != http.StatusSeeOther {
		t.Fatalf("the replaced session still opens pages: %d", p.StatusCode)
	}
}
