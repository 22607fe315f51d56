package browser

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"

	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/client"
)

// tenantB makes bob's records with the Go client: a session, a run with one step and a
// sampler checkpoint.
func tenantB(t *testing.T, srv *server) (run, session, ckpt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc, err := client.NewServiceClient(ctx, srv.base, srv.keyB, client.WithUserMetadata(map[string]any{"name": "bob-session"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.Close)
	tc, err := sc.CreateLoRATrainingClient(ctx, "tuft/tiny", client.DefaultLora(4))
	if err != nil {
		t.Fatal(err)
	}
	toks := []int32{10, 11, 12, 13, 14, 15, 16, 17}
	d := wire.Datum{Tokens: toks[:7], LossInputs: map[string]wire.Tensor{"target_tokens": {DType: wire.Int64, Shape: []int{7}, I64: []int64{11, 12, 13, 14, 15, 16, 17}}}}
	fb, err := tc.ForwardBackward(ctx, []wire.Datum{d}, "cross_entropy", nil)
	if err == nil {
		_, err = fb.Result(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	opt, err := tc.OptimStep(ctx, wire.AdamParams{LearningRate: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
	if err == nil {
		_, err = opt.Result(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	sv, err := tc.SaveWeightsForSampler(ctx, "bob-sampler")
	if err != nil {
		t.Fatal(err)
	}
	ckpt, err = sv.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tc.ModelID, sc.SessionID(), ckpt
}

// checkNav asserts the signed-in navigation's links.
func checkNav(t *testing.T, tb *tab) {
	t.Helper()
	for _, p := range []string{"/console/runs", "/console/checkpoints", "/console/playground", "/console/usage"} {
		if !eval[bool](t, tb, fmt.Sprintf(`[...document.querySelectorAll('nav#nav a')].some(a => new URL(a.href).pathname === %q)`, p)) {
			t.Errorf("nav#nav has no link to %s", p)
		}
	}
	if !eval[bool](t, tb, `!!document.querySelector('form#signout')`) {
		t.Errorf("no form#signout")
	}
}

// checkInert asserts that no user-supplied string ran on the page: no alert, no image
// made of the injected markup, no error handler fired.
func checkInert(t *testing.T, tb *tab, page string) {
	t.Helper()
	if v := eval[[]string](t, tb, `window.__tuftAlerts`); len(v) > 0 {
		t.Errorf("%s: script ran: %v", page, v)
	}
	if n := eval[int](t, tb, `document.querySelectorAll('img[src="x"]').length`); n > 0 {
		t.Errorf("%s: %d <img src=x> element(s) made from a user-supplied string", page, n)
	}
	if v := eval[[]string](t, tb, `window.__tuftImgErrors`); len(v) > 0 {
		t.Errorf("%s: image error handlers reached: %v", page, v)
	}
	if n := eval[int](t, tb, `[...document.querySelectorAll('b')].filter(b => b.textContent === 'session' || b.textContent === '1 2 3').length`); n > 0 {
		t.Errorf("%s: user-supplied <b> markup rendered as HTML", page)
	}
}

// setField sets a form control's value as a user would and fires event.
func setField(t *testing.T, tb *tab, sel, value, event string) {
	t.Helper()
	if !eval[bool](t, tb, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false;
	  e.value = %q; e.dispatchEvent(new Event(%q, {bubbles: true})); return true; })()`, sel, value, event)) {
		t.Fatalf("no %s on the page", sel)
	}
}

func public(cks []wire.Checkpoint, path string) bool {
	for _, c := range cks {
		if c.TinkerPath == path {
			return c.Public
		}
	}
	return false
}

// eventually polls cond every 100ms until it holds, failing after timeout.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not after %v: %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// archiveFiles counts the non-empty regular files of a tar, tar.gz or zip archive.
func archiveFiles(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	if len(b) == 0 {
		return 0, errors.New("empty file")
	}
	if bytes.HasPrefix(b, []byte("PK\x03\x04")) {
		zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return 0, err
		}
		n := 0
		for _, f := range zr.File {
			if f.UncompressedSize64 > 0 {
				n++
			}
		}
		return n, nil
	}
	var r io.Reader = bytes.NewReader(b)
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		if r, err = gzip.NewReader(r); err != nil {
			return 0, err
		}
	}
	tr := tar.NewReader(r)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("not a tar, tar.gz or zip archive: %w", err)
		}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			n++
		}
	}
}

// noRedirect is an HTTP client that reports redirects instead of following them.
var noRedirect = &http.Client{
	Timeout:       20 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// doWithCookies sends a request carrying the browser's cookies, as a script outside the
// browser holding a stolen cookie would; returns the status and Location.
func doWithCookies(t *testing.T, method, u string, cookies []*network.Cookie, hdr http.Header) (int, string) {
	t.Helper()
	resp := send(t, method, u, cookies, hdr)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

func getWithCookies(t *testing.T, u string, cookies []*network.Cookie, hdr http.Header) (int, string) {
	t.Helper()
	return doWithCookies(t, "GET", u, cookies, hdr)
}

func headerWithCookies(t *testing.T, u string, cookies []*network.Cookie, name string) string {
	t.Helper()
	resp := send(t, "GET", u, cookies, nil)
	resp.Body.Close()
	return resp.Header.Get(name)
}

func send(t *testing.T, method, u string, cookies []*network.Cookie, hdr http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	for _, c := range cookies {
		req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	return resp
}

// directive is the first of names present in a Content-Security-Policy, its sources.
func directive(csp string, names ...string) string {
	for _, name := range names {
		for _, d := range strings.Split(csp, ";") {
			f := strings.Fields(d)
			if len(f) > 0 && strings.EqualFold(f[0], name) {
				return strings.Join(f[1:], " ")
			}
		}
	}
	return ""
}
