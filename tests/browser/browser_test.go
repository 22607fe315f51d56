package browser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Laptop and phone viewports of the screenshots.
const (
	laptopW, laptopH = 1366, 850
	phoneW, phoneH   = 390, 844
	maxShotBytes     = 300 << 10
)

// traps runs before any script of every page a tab opens: it records what an injected
// string would do if it ever ran (alert, prompt, an image's error handler) and the CSP
// violations the page reports. window.confirm answers yes so that buttons that ask
// (delete) go on.
const traps = `(() => {
  window.__tuftAlerts = [];
  window.__tuftImgErrors = [];
  window.__tuftCSP = [];
  for (const f of ['alert', 'prompt']) {
    window[f] = (...a) => { window.__tuftAlerts.push(f + ':' + String(a[0])); return null; };
  }
  window.confirm = () => true;
  window.addEventListener('error', e => {
    if (e.target && e.target.tagName === 'IMG') window.__tuftImgErrors.push(e.target.outerHTML);
  }, true);
  document.addEventListener('securitypolicyviolation', e => {
    window.__tuftCSP.push(e.violatedDirective + ' ' + e.blockedURI);
  });
})();`

// browser is one headless Chromium for the whole suite; each tab has its own browser
// context (its own cookie jar), as two people on two machines.
type browser struct {
	ctx   context.Context
	base  string
	shots string // where page screenshots go
	fails string // where failure screenshots go
}

func startBrowser(t *testing.T, chrome, base string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.Flag("no-sandbox", os.Geteuid() == 0), // Chromium refuses its sandbox as root (CI containers)
		chromedp.Flag("disable-gpu", true),
		chromedp.WindowSize(laptopW, laptopH),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser, bound to no timeout
		t.Fatalf("start chromium %s: %v", chrome, err)
	}
	b := &browser{ctx: ctx, base: base}
	b.shots, b.fails = shotDirs(t)
	return b
}

// shotDirs are where page screenshots (TUFT_BROWSER_SCREENSHOTS) and failure
// screenshots (TUFT_BROWSER_ARTIFACTS) go, made if missing.
func shotDirs(t *testing.T) (shots, fails string) {
	t.Helper()
	shots = os.Getenv("TUFT_BROWSER_SCREENSHOTS")
	if shots == "" {
		shots = filepath.Join(os.TempDir(), "tuft-browser-screenshots")
	} else if !filepath.IsAbs(shots) {
		shots = filepath.Join(root, shots)
	}
	fails = os.Getenv("TUFT_BROWSER_ARTIFACTS")
	if fails == "" {
		fails = filepath.Join(os.TempDir(), "tuft-browser-failures")
	}
	for _, d := range []string{shots, fails} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return shots, fails
}

// tab is one page in its own browser context, with the traps installed and every
// network response recorded.
type tab struct {
	b    *browser
	ctx  context.Context
	name string
	rec  *recorder
	page int // index of the first request recorded since the last open
}

func (b *browser) newTab(t *testing.T, name string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	tb := &tab{b: b, ctx: ctx, name: name, rec: newRecorder()}
	if err := chromedp.Listen(ctx, tb.rec.listen); err != nil {
		t.Fatalf("tab %s: %v", name, err)
	}
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: traps}); err != nil {
		t.Fatalf("tab %s: install traps: %v", name, err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(laptopW, laptopH)); err != nil {
		t.Fatalf("tab %s: viewport: %v", name, err)
	}
	return tb
}

// onFail saves a screenshot of the tab (and the page's text) when t fails.
func (tb *tab) onFail(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + tb.name
		ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
		defer cancel()
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Logf("failure screenshot: %v", err)
			return
		}
		path := filepath.Join(tb.b.fails, name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Logf("failure screenshot: %v", err)
			return
		}
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ''`))
		t.Logf("failure screenshot of %s (%s) at %s; page text:\n%s", tb.name, loc, path, text)
	})
}

// open navigates to a console path and returns the document's HTTP status.
func (tb *tab) open(t *testing.T, path string) int64 {
	t.Helper()
	return tb.openURL(t, tb.b.base+path)
}

// openURL navigates to an absolute URL and returns the document's HTTP status.
func (tb *tab) openURL(t *testing.T, u string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	tb.page = tb.rec.count()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(u))
	if err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
	if resp == nil {
		return 0
	}
	return resp.Status
}

// eval evaluates a JavaScript expression (promises awaited) into T.
func eval[T any](t *testing.T, tb *tab, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// wait polls a JavaScript condition until it holds; fails naming what after timeout.
func (tb *tab) wait(t *testing.T, what, cond string, timeout time.Duration) {
	t.Helper()
	js := condJS(cond)
	waitFor(t, tb.name, what, timeout, func() (bool, error) {
		ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
		defer cancel()
		return chromedp.Run(ctx, chromedp.Evaluate[bool](js))
	})
}

// condJS is a JavaScript condition as an expression that is false while it throws (an
// element not there yet).
func condJS(cond string) string {
	return `(() => { try { return !!(` + cond + `); } catch (e) { return false; } })()`
}

// waitFor polls check every 100ms until it reports true, failing the test naming who
// (the tab or browser) and what after timeout, with check's last error.
func waitFor(t *testing.T, who, what string, timeout time.Duration, check func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := check()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v (%s; last error %v)", who, timeout, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// do runs chromedp actions with a timeout.
func (tb *tab) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %s: %v", tb.name, what, err)
	}
}

// submitLogin fills the login form with key, submits it and waits for the page the
// server answers with; it returns that page's path and text.
func (tb *tab) submitLogin(t *testing.T, key string) (path, text string) {
	t.Helper()
	tb.open(t, "/console/login")
	eval[bool](t, tb, `window.__tuftOldPage = true`)
	tb.do(t, "sign in",
		chromedp.WaitVisible(chromedp.CSS(`form#login input[name=api_key]`)),
		chromedp.SendKeys(chromedp.CSS(`form#login input[name=api_key]`), key),
		chromedp.Click(chromedp.CSS(`form#login button[type=submit]`)),
	)
	tb.wait(t, "the sign-in's answer loaded", `window.__tuftOldPage !== true && document.readyState === 'complete'`, 15*time.Second)
	return eval[string](t, tb, `location.pathname`), eval[string](t, tb, `document.body.innerText`)
}

// signIn signs in with key and checks it lands on the runs page.
func (tb *tab) signIn(t *testing.T, key string) {
	t.Helper()
	if path, text := tb.submitLogin(t, key); path != "/console/runs" || !eval[bool](t, tb, `!!document.querySelector('nav#nav')`) {
		t.Fatalf("%s: signed in, the browser is on %s, not /console/runs with nav#nav:\n%s", tb.name, path, text)
	}
}

// cookies are the browser's cookies for the console.
func (tb *tab) cookies(t *testing.T) []*network.Cookie {
	t.Helper()
	res, err := chromedp.Call(tb.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{tb.b.base + "/console/runs"}})
	if err != nil {
		t.Fatalf("getCookies: %v", err)
	}
	return res.Cookies
}

// shot writes a screenshot of the viewport as name.png into the screenshot folder.
func (tb *tab) shot(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	// No focus ring or caret in the pictures.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur && document.activeElement.blur()`)); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) > maxShotBytes {
		t.Errorf("screenshot %s is %d bytes, over %d", name, len(png), maxShotBytes)
	}
	path := filepath.Join(tb.b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d KB)", path, len(png)>>10)
}

// settle waits until the page opened last has no request in flight (event streams
// aside) for quiet, or fails after timeout.
func (tb *tab) settle(t *testing.T, quiet, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	idleSince := time.Time{}
	for {
		if tb.rec.inFlight(tb.page) == 0 {
			if idleSince.IsZero() {
				idleSince = time.Now()
			} else if time.Since(idleSince) >= quiet {
				return
			}
		} else {
			idleSince = time.Time{}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: requests still in flight after %v: %v", tb.name, timeout, tb.rec.pending(tb.page))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitRequest waits until the page opened last has finished a request whose URL holds
// part (a live page's refresh), then until it is quiet.
func (tb *tab) waitRequest(t *testing.T, part string, timeout time.Duration) {
	t.Helper()
	tb.waitRequestFrom(t, tb.page, part, timeout)
}

// waitRequestFrom is waitRequest for the requests from the from'th recorded on.
func (tb *tab) waitRequestFrom(t *testing.T, from int, part string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done := false
		for _, e := range tb.rec.exchanges()[from:] {
			if e.finished && strings.Contains(e.url, part) {
				done = true
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no request to %s finished after %v", tb.name, part, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.settle(t, 300*time.Millisecond, timeout)
}

// exchange is one request the page made and what came back.
type exchange struct {
	url, method string
	status      int64
	typ         network.ResourceType
	finished    bool
	stream      bool // an event stream: never finishes, its messages are in body
	loader      cdp.LoaderID
	body        string // response body (fetched after it finished), or the stream's messages
	fetched     bool
}

// recorder keeps every request of a tab, and their bodies once fetched (fetchBodies).
type recorder struct {
	mu  sync.Mutex
	ex  map[network.RequestID]*exchange
	ids []network.RequestID
	// doc is the loader of the document shown now (its last Document request): a request
	// the page before it made as the navigation began belongs to a torn-down document,
	// whose end Chromium may never report.
	doc cdp.LoaderID
}

func newRecorder() *recorder { return &recorder{ex: map[network.RequestID]*exchange{}} }

func (r *recorder) get(id network.RequestID) *exchange {
	e := r.ex[id]
	if e == nil {
		e = &exchange{}
		r.ex[id] = e
		r.ids = append(r.ids, id)
	}
	return e
}

// listen runs in chromedp's event loop: it only records.
func (r *recorder) listen(ev any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		e := r.get(ev.RequestID)
		e.url, e.method, e.typ, e.loader = ev.Request.URL, ev.Request.Method, ev.Type, ev.LoaderID
		e.stream = ev.Type == network.ResourceTypeEventSource
		if ev.Type == network.ResourceTypeDocument {
			r.doc = ev.LoaderID
		}
	case *network.EventResponseReceived:
		e := r.get(ev.RequestID)
		e.status = ev.Response.Status
		if strings.HasPrefix(ev.Response.MimeType, "text/event-stream") {
			e.stream = true
		}
	case *network.EventEventSourceMessageReceived:
		e := r.get(ev.RequestID)
		e.stream = true
		e.body += ev.Data + "\n"
	case *network.EventLoadingFinished:
		r.get(ev.RequestID).finished = true
	case *network.EventRequestServedFromCache:
		r.get(ev.RequestID).finished = true
	case *network.EventLoadingFailed:
		r.get(ev.RequestID).finished = true
	}
}

// count is how many requests have been recorded.
func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// inFlight counts the requests from the from'th on that have not finished.
func (r *recorder) inFlight(from int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, id := range r.ids[min(from, len(r.ids)):] {
		if r.waiting(r.ex[id]) {
			n++
		}
	}
	return n
}

// waiting says whether the shown page still waits for e. The console's own static files
// and the favicon hold no tenant's data, and Chromium does not always report the end of
// one it had in its memory cache; a request of an earlier document (a live page's
// refresh that the navigation away cancelled) is not the shown page's.
func (r *recorder) waiting(e *exchange) bool {
	if e.finished || e.stream || e.url == "" || strings.HasPrefix(e.url, "data:") || strings.Contains(e.url, "/console/static/") || strings.HasSuffix(e.url, "/favicon.ico") {
		return false
	}
	return e.loader == "" || r.doc == "" || e.loader == r.doc
}

// pending lists the requests from the from'th on that the shown page still waits for.
func (r *recorder) pending(from int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, id := range r.ids[min(from, len(r.ids)):] {
		if e := r.ex[id]; r.waiting(e) {
			out = append(out, e.method+" "+e.url)
		}
	}
	return out
}

// fetchBodies fetches the bodies of the finished requests of the page opened last (a
// body is only kept while its page is open: call it before navigating away).
func (tb *tab) fetchBodies(t *testing.T) {
	t.Helper()
	tb.rec.mu.Lock()
	var todo []network.RequestID
	for _, id := range tb.rec.ids[min(tb.page, len(tb.rec.ids)):] {
		if e := tb.rec.ex[id]; e.finished && !e.fetched && !e.stream {
			todo = append(todo, id)
		}
	}
	tb.rec.mu.Unlock()
	for _, id := range todo {
		res, err := chromedp.Call(tb.ctx, network.GetResponseBody, network.GetResponseBodyParams{RequestID: id})
		tb.rec.mu.Lock()
		e := tb.rec.ex[id]
		e.fetched = true
		if err == nil {
			e.body = string(res.Body)
		} else if e.status != 0 && e.status != 204 && !(e.status >= 300 && e.status < 400) {
			// A response the page received but whose body Chromium no longer holds
			// cannot be scanned: say so rather than pass silently.
			t.Logf("%s: no body for %s %s (%d): %v", tb.name, e.method, e.url, e.status, err)
		}
		tb.rec.mu.Unlock()
	}
}

// exchanges is a snapshot of everything recorded so far, in order.
func (r *recorder) exchanges() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]exchange, 0, len(r.ids))
	for _, id := range r.ids {
		out = append(out, *r.ex[id])
	}
	return out
}

// leaks lists each forbidden string found in a recorded body or in the page's DOM.
// allowed (the id the user typed into the address, which an error may echo) is cut
// out first: ids nest (a run id starts with its session's id).
func leaks(exs []exchange, dom string, forbidden []string, allowed string) []string {
	cut := func(s string) string {
		if allowed == "" {
			return s
		}
		return strings.ReplaceAll(s, allowed, "")
	}
	dom = cut(dom)
	var out []string
	for _, e := range exs {
		body := cut(e.body)
		for _, s := range forbidden {
			if s != "" && strings.Contains(body, s) {
				out = append(out, fmt.Sprintf("%s %s (%d) body holds %q", e.method, e.url, e.status, s))
			}
		}
	}
	for _, s := range forbidden {
		if s != "" && strings.Contains(dom, s) {
			out = append(out, fmt.Sprintf("page DOM holds %q", s))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
