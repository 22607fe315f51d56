package console_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
)

// startServer runs a test server (tenants alice = KeyA, bob = KeyB) with the console.
func startServer(t *testing.T, mutate func(*config.Config)) *server.Server {
	t.Helper()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	if mutate != nil {
		mutate(&cfg)
	}
	return testenv.Start(t, cfg)
}

// browser is a user agent as the console sees one: a cookie jar, and the Origin and
// Sec-Fetch-Site a browser sends with a same-origin request.
type browser struct {
	t    *testing.T
	base string
	hc   *http.Client
	csrf string // the session's token, read from a page
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, hc: &http.Client{Jar: jar, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type resp struct {
	*http.Response
	body string
}

// do sends a same-origin request (header may add or override headers; "" deletes one).
func (b *browser) do(method, path string, body io.Reader, header map[string]string) resp {
	b.t.Helper()
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if method != http.MethodGet {
		req.Header.Set("Origin", b.base)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	r, err := b.hc.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer r.Body.Close()
	buf, _ := io.ReadAll(r.Body)
	return resp{Response: r, body: string(buf)}
}

func (b *browser) get(path string) resp { b.t.Helper(); return b.do(http.MethodGet, path, nil, nil) }

func (b *browser) postForm(path string, form url.Values, header map[string]string) resp {
	b.t.Helper()
	h := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	for k, v := range header {
		h[k] = v
	}
	return b.do(http.MethodPost, path, strings.NewReader(form.Encode()), h)
}

var (
	csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	csrfMeta  = regexp.MustCompile(`<meta name="csrf-token" content="([^"]*)">`)
)

// signIn signs in with key through the form, as a user does, requiring success.
func (b *browser) signIn(key string) resp {
	b.t.Helper()
	r := b.signInStatus(key)
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/console/runs" {
		b.t.Fatalf("sign-in: %d %s", r.StatusCode, r.body)
	}
	page := b.get("/console/runs")
	m := csrfMeta.FindStringSubmatch(page.body)
	if page.StatusCode != 200 || m == nil || m[1] == "" {
		b.t.Fatalf("runs page after sign-in: %d %s", page.StatusCode, page.body)
	}
	b.csrf = m[1]
	return r
}

func (b *browser) signInStatus(key string) resp {
	b.t.Helper()
	login := b.get("/console/login")
	m := csrfField.FindStringSubmatch(login.body)
	if login.StatusCode != 200 || m == nil {
		b.t.Fatalf("login page: %d %s", login.StatusCode, login.body)
	}
	return b.postForm("/console/login", url.Values{"csrf": {m[1]}, "api_key": {key}}, nil)
}

// cookie is the Set-Cookie of name in r.
func cookie(r resp, name string) *http.Cookie {
	for _, c := range r.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}
