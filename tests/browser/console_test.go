package browser

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/tuft-go/tuft/client"
)

// steps is how many forward_backward + optim_step steps the watched run trains.
const steps = 12

// xssName is the name of tenant A's hostile run (its session's name holds HTML too).
const xssName = `<img src=x onerror=alert(1)>`

// records are what the scenarios look for, by tenant.
type records struct {
	runA, sessionA         string // the run whose curve is watched, its session
	xssRun, xssSession     string // the run and session named with HTML
	statePath, samplerPath string // tenant A's checkpoints of runA
	runB, sessionB, ckptB  string // tenant B's
}

// TestConsole drives the console in a real browser: sign in, a live loss curve while
// the SDK trains, publish and download, a streamed playground reply, the other
// tenant's records nowhere, user strings never executed, CSRF, cookies and CSP; and
// it takes the screenshots docs/console.md shows.
func TestConsole(t *testing.T) {
	chrome := chromiumPath(t)
	py := sdkPython(t)
	srv := startServer(t)
	tr := startTrainer(t, py, srv, steps)
	b := startBrowser(t, chrome, srv.base)

	rec := &records{}
	rec.runB, rec.sessionB, rec.ckptB = tenantB(t, srv)
	x := tr.next(t, "xss", 90*time.Second)
	rec.xssRun, rec.xssSession = x["run_id"].(string), x["session_id"].(string)
	r := tr.next(t, "run", 60*time.Second)
	rec.runA, rec.sessionA = r["run_id"].(string), r["session_id"].(string)

	alice := b.newTab(t, "alice")
	alice.onFail(t)
	alice.signIn(t, srv.keyA)

	t.Run("sign_in_cookie_sign_out", func(t *testing.T) {
		alice := b.newTab(t, "alice-signin") // its own cookie jar: signing out here leaves the other tab signed in
		alice.onFail(t)
		alice.open(t, "/console/login")
		alice.shot(t, "login")
		if got := alice.open(t, "/console/runs"); got == http.StatusOK && eval[bool](t, alice, `!!document.querySelector('nav#nav')`) {
			t.Fatalf("/console/runs shows the signed-in page before sign-in")
		}
		alice.signIn(t, srv.keyA)
		checkNav(t, alice)
		cookies := alice.cookies(t)
		if len(cookies) == 0 {
			t.Fatal("signed in, but the browser holds no cookie for /console")
		}
		now := time.Now()
		for _, c := range cookies {
			if !c.HTTPOnly {
				t.Errorf("cookie %s is not HttpOnly", c.Name)
			}
			if c.SameSite != network.CookieSameSiteStrict {
				t.Errorf("cookie %s SameSite=%q, want Strict", c.Name, c.SameSite)
			}
			if !strings.HasPrefix(c.Path, "/console") {
				t.Errorf("cookie %s Path=%q, want it scoped to /console", c.Name, c.Path)
			}
			if c.Secure {
				t.Errorf("cookie %s is Secure over plain HTTP (the browser would never send it back)", c.Name)
			}
			exp := time.Unix(int64(c.Expires), 0)
			if c.Session || exp.Before(now.Add(sessionTTL-2*time.Minute)) || exp.After(now.Add(sessionTTL+2*time.Minute)) {
				t.Errorf("cookie %s expires %v (session %v), want about now+%v (console.session_ttl_seconds)", c.Name, exp, c.Session, sessionTTL)
			}
			if strings.Contains(c.Value, srv.keyA) {
				t.Errorf("cookie %s holds the API key", c.Name)
			}
		}
		old := cookies

		// Sign out: the cookie goes, and the old cookie no longer opens a page.
		alice.do(t, "sign out", chromedp.Click(chromedp.CSS(`form#signout [type=submit], form#signout button`)))
		alice.wait(t, "back on /console/login after sign-out", `location.pathname === '/console/login'`, 10*time.Second)
		for _, c := range alice.cookies(t) {
			for _, o := range old {
				if c.Name == o.Name && c.Value == o.Value {
					t.Errorf("cookie %s still held after sign-out", c.Name)
				}
			}
		}
		if code, loc := getWithCookies(t, srv.base+"/console/runs", old, nil); code == http.StatusOK {
			t.Errorf("the signed-out cookie still opens /console/runs (%d %s)", code, loc)
		}
		if got := alice.open(t, "/console/runs"); got == http.StatusOK && eval[bool](t, alice, `!!document.querySelector('nav#nav')`) {
			t.Errorf("/console/runs shows the signed-in page after sign-out")
		}
	})

	t.Run("loss_curve_grows_while_sdk_trains", func(t *testing.T) {
		alice.onFail(t)
		alice.open(t, "/console/runs/"+url.PathEscape(rec.runA))
		alice.wait(t, "svg#chart drawn", `document.querySelector('svg#chart')`, 10*time.Second)
		eval[bool](t, alice, `window.__tuftNoReload = true`)
		const points = `Math.max(-1, ...[...document.querySelectorAll('svg#chart path.series')].map(p => +p.getAttribute('data-points') || 0))`
		prev := eval[int](t, alice, points)
		for i := 1; i <= steps; i++ {
			tr.step(t)
			f := tr.next(t, "step", 60*time.Second)
			alice.wait(t, fmt.Sprintf("step %d (loss %v) drawn: data-points >= %d without reload", i, f["loss"], i),
				fmt.Sprintf(`window.__tuftNoReload === true && %s >= %d`, points, i), 15*time.Second)
			got := eval[int](t, alice, points)
			if got <= prev {
				t.Fatalf("after step %d data-points is %d, was %d: the curve did not grow", i, got, prev)
			}
			prev = got
		}
		s := tr.next(t, "saved", 60*time.Second)
		rec.statePath, rec.samplerPath = s["state"].(string), s["sampler"].(string)
		// The page lists the run's checkpoints once saved (live or on the next load).
		alice.open(t, "/console/runs/"+url.PathEscape(rec.runA))
		alice.wait(t, "the chart reloads with every point", fmt.Sprintf(`%s >= %d`, points, steps), 10*time.Second)
		for _, p := range []string{rec.statePath, rec.samplerPath} {
			alice.wait(t, "table#checkpoints lists "+p, fmt.Sprintf(`document.querySelector('table#checkpoints tr[data-checkpoint=%q]')`, p), 10*time.Second)
		}
		alice.wait(t, "table#samplers", `document.querySelector('table#samplers')`, 5*time.Second)
		alice.shot(t, "run")
	})

	t.Run("runs_page", func(t *testing.T) {
		alice.onFail(t)
		alice.open(t, "/console/runs")
		row := fmt.Sprintf(`document.querySelector('table#runs tr[data-run-id=%q]')`, rec.runA)
		alice.wait(t, "the watched run's row", row, 10*time.Second)
		cell := func(c string) string { return eval[string](t, alice, row+`.querySelector('`+c+`').textContent.trim()`) }
		if got := cell(".run-name"); got != "curve-run" {
			t.Errorf(".run-name = %q, want curve-run (user_metadata.name)", got)
		}
		if got := cell(".run-steps"); got != fmt.Sprint(steps) {
			t.Errorf(".run-steps = %q, want %d", got, steps)
		}
		if got := cell(".run-model"); !strings.Contains(got, "tuft/tiny") {
			t.Errorf(".run-model = %q, want tuft/tiny", got)
		}
		if got := cell(".run-rank"); got != "8" {
			t.Errorf(".run-rank = %q, want 8", got)
		}
		if got := cell(".run-loss"); got == "" || got == "-" || got == "—" {
			t.Errorf(".run-loss = %q, want the last loss", got)
		}
		if got := cell(".run-session"); !strings.Contains(got, rec.sessionA) && !eval[bool](t, alice, row+fmt.Sprintf(`.querySelector('.run-session a[href*=%q]') !== null`, rec.sessionA)) {
			t.Errorf(".run-session = %q, want session %s", got, rec.sessionA)
		}
		// The filter hides the other runs.
		alice.do(t, "filter", chromedp.SendKeys(chromedp.CSS(`input#run-filter`), "curve-run"))
		alice.wait(t, "the filter hides the HTML-named run",
			fmt.Sprintf(`[...document.querySelectorAll('table#runs tr[data-run-id]')].filter(r => r.offsetParent !== null).map(r => r.dataset.runId).join() === %q`, rec.runA), 5*time.Second)
		setField(t, alice, "input#run-filter", "", "input")
		alice.wait(t, "both runs shown again", fmt.Sprintf(`document.querySelector('tr[data-run-id=%q]').offsetParent !== null`, rec.xssRun), 5*time.Second)
		alice.shot(t, "runs")
	})

	t.Run("publish_and_download_checkpoint", func(t *testing.T) {
		alice.onFail(t)
		if rec.statePath == "" {
			t.Skip("no checkpoint: the loss-curve scenario failed before saving")
		}
		alice.open(t, "/console/checkpoints")
		row := fmt.Sprintf(`document.querySelector('tr[data-checkpoint=%q]')`, rec.statePath)
		alice.wait(t, "the state's row", row, 10*time.Second)
		if got := eval[string](t, alice, row+`.querySelector('.ckpt-size').textContent.trim()`); got == "" {
			t.Errorf(".ckpt-size is empty")
		}
		before := eval[string](t, alice, row+`.querySelector('.ckpt-published').textContent.trim()`)
		alice.do(t, "publish", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-checkpoint=%q] button[data-action=publish]`, rec.statePath))))
		rest, err := client.NewRestClient(srv.base, srv.keyA)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the API says the state is published", 10*time.Second, func() bool {
			cks, err := rest.ListCheckpoints(context.Background(), rec.runA)
			return err == nil && public(cks, rec.statePath)
		})
		alice.wait(t, ".ckpt-published changes once published",
			fmt.Sprintf(`%s.querySelector('.ckpt-published').textContent.trim() !== %q`, row, before), 10*time.Second)
		alice.shot(t, "checkpoints")
		// Unpublish again (its own button): the isolation scenario then holds with no
		// checkpoint of alice's shared on purpose.
		alice.do(t, "unpublish", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-checkpoint=%q] button[data-action=unpublish]`, rec.statePath))))
		eventually(t, "the API says the state is private again", 10*time.Second, func() bool {
			cks, err := rest.ListCheckpoints(context.Background(), rec.runA)
			return err == nil && !public(cks, rec.statePath)
		})

		dir := t.TempDir()
		c := chromedp.FromContext(alice.ctx)
		if _, err := chromedp.CallBrowser(alice.ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
			Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, BrowserContextID: c.BrowserContextID, DownloadPath: dir}); err != nil {
			t.Fatal(err)
		}
		alice.do(t, "download", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-checkpoint=%q] a[data-action=download]`, rec.statePath))))
		var file string
		eventually(t, "the archive lands in the download folder", 30*time.Second, func() bool {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if !strings.HasSuffix(e.Name(), ".crdownload") {
					file = filepath.Join(dir, e.Name())
					return true
				}
			}
			return false
		})
		n, err := archiveFiles(file)
		if err != nil || n == 0 {
			t.Fatalf("downloaded %s: %d files in it, %v", filepath.Base(file), n, err)
		}
		t.Logf("downloaded %s: an archive of %d files", filepath.Base(file), n)
	})

	t.Run("playground_streams_from_trained_checkpoint", func(t *testing.T) {
		alice.onFail(t)
		if rec.samplerPath == "" {
			t.Skip("no sampler checkpoint: the loss-curve scenario failed before saving")
		}
		alice.open(t, "/console/playground")
		alice.wait(t, "select#model offers the sampler checkpoint",
			fmt.Sprintf(`[...document.querySelectorAll('select#model option')].some(o => o.value === %q)`, rec.samplerPath), 10*time.Second)
		setField(t, alice, "select#model", rec.samplerPath, "change")
		setField(t, alice, "input#max-tokens", "48", "input")
		setField(t, alice, "input#temperature", "1", "input")
		// A reply the model ends at once (empty, or one token) cannot show streaming either
		// way: such a reply is asked again (at most three times); a server that buffered
		// the reply fails every time.
		var grew []int
		for attempt := 1; attempt <= 3 && len(grew) < 2; attempt++ {
			setField(t, alice, "textarea#prompt", "Count on: <b>1 2 3</b> "+xssName, "input")
			eval[bool](t, alice, `(() => {
			  const r = document.querySelector('#reply'); window.__tuftReply = [];
			  if (window.__tuftObserver) window.__tuftObserver.disconnect();
			  window.__tuftObserver = new MutationObserver(() => { const n = r.textContent.length; const s = window.__tuftReply;
			    if (n > 0 && s[s.length - 1] !== n) s.push(n); });
			  window.__tuftObserver.observe(r, {childList: true, subtree: true, characterData: true});
			  return true; })()`)
			from := alice.rec.count()
			alice.do(t, "send", chromedp.Click(chromedp.CSS(`button#send`)))
			alice.waitRequestFrom(t, from, "/chat/completions", 60*time.Second)
			alice.wait(t, "button#send enabled again", `!document.querySelector('button#send').disabled`, 10*time.Second)
			grew = eval[[]int](t, alice, `window.__tuftReply`)
			t.Logf("attempt %d: #reply grew in %d steps (text lengths %v)", attempt, len(grew), grew)
		}
		if len(grew) < 2 {
			t.Errorf("#reply took its text in %d step(s) (lengths %v), want a streamed reply (more than one)", len(grew), grew)
		}
		streamed := false
		for _, e := range alice.rec.exchanges()[alice.page:] {
			if strings.Contains(e.url, "/chat/completions") && e.stream && e.status == http.StatusOK {
				streamed = true
			}
		}
		if !streamed {
			t.Errorf("the playground's chat completion was not a text/event-stream reply")
		}
		if got := eval[string](t, alice, `document.querySelector('pre#rendered-template').textContent`); !strings.Contains(got, xssName) {
			t.Errorf("pre#rendered-template does not show the prompt as text: %q", got)
		}
		checkInert(t, alice, "playground")
		alice.shot(t, "playground")
	})

	t.Run("usage", func(t *testing.T) {
		alice.onFail(t)
		alice.open(t, "/console/usage")
		alice.wait(t, "table#usage-days has a day", `document.querySelectorAll('table#usage-days tbody tr').length >= 1`, 10*time.Second)
		alice.wait(t, "table#quotas has a meter per quota, limits.max_runs_per_tenant among them",
			`document.querySelectorAll('table#quotas meter').length >= 1 && document.querySelector('table#quotas').textContent.includes('limits.max_runs_per_tenant')`, 10*time.Second)
		today := time.Now().UTC().Format("2006-01-02")
		trained := eval[string](t, alice, fmt.Sprintf(`(() => { const r = [...document.querySelectorAll('table#usage-days tbody tr')]
		  .find(r => r.cells[0].textContent.trim() === %q); return r ? r.cells[1].textContent.trim() : 'no row'; })()`, today))
		if trained == "no row" || trained == "0" || trained == "" {
			t.Errorf("table#usage-days: tokens trained today (%s) = %q, want alice's training counted", today, trained)
		}
		alice.shot(t, "usage")
	})

	t.Run("session_trace", func(t *testing.T) {
		alice.onFail(t)
		alice.open(t, "/console/sessions/"+url.PathEscape(rec.sessionA))
		alice.wait(t, "svg#timeline has spans", `document.querySelectorAll('svg#timeline rect.span').length >= 1`, 15*time.Second)
		alice.wait(t, "a#trace-download", `document.querySelector('a#trace-download')`, 5*time.Second)
		alice.shot(t, "session")
	})

	t.Run("admin_operator_only", func(t *testing.T) {
		alice.onFail(t)
		if got := alice.open(t, "/console/admin"); got != http.StatusForbidden {
			t.Errorf("tenant alice opens /console/admin: %d, want 403", got)
		}
		op := b.newTab(t, "operator")
		op.onFail(t)
		if path, text := op.submitLogin(t, srv.keyOp); path == "/console/login" {
			t.Fatalf("the operator key does not sign in (auth.operator_key_sha256):\n%s", text)
		}
		if got := op.open(t, "/console/admin"); got != http.StatusOK {
			t.Fatalf("operator opens /console/admin: %d, want 200", got)
		}
		op.settle(t, 300*time.Millisecond, 15*time.Second)
		for _, tenant := range []string{"alice", "bob"} {
			op.wait(t, "the overview names tenant "+tenant, fmt.Sprintf(`document.body.innerText.includes(%q)`, tenant), 10*time.Second)
		}
		op.shot(t, "admin")
	})

	t.Run("tenant_isolation", func(t *testing.T) {
		bob := b.newTab(t, "bob")
		bob.onFail(t)
		bob.signIn(t, srv.keyB)
		secrets := []string{rec.runA, rec.sessionA, rec.xssRun, rec.xssSession, rec.statePath, rec.samplerPath, "curve-run", "browser-suite", "browser-state", "browser-sampler"}
		// visit opens a page as bob, waits for it to settle and scans what it loaded (its
		// requests' bodies, its event streams' messages, its DOM) for alice's strings.
		visit := func(path, ready, call, allowed string) []exchange {
			t.Helper()
			bob.open(t, path)
			if ready != "" {
				bob.wait(t, path+" ready", ready, 10*time.Second)
			}
			if call != "" { // the page's own API call, made by its script
				bob.waitRequest(t, call, 15*time.Second)
			}
			bob.settle(t, 500*time.Millisecond, 15*time.Second)
			bob.fetchBodies(t)
			dom := eval[string](t, bob, `document.documentElement.outerHTML`)
			exs := bob.rec.exchanges()[bob.page:]
			for _, l := range leaks(exs, dom, secrets, allowed) {
				t.Errorf("bob on %s: %s", path, l)
			}
			return exs
		}
		// Bob sees his own run (the pages work for him), and none of alice's records.
		visit("/console/runs", fmt.Sprintf(`document.querySelector('tr[data-run-id=%q]')`, rec.runB), "/console/api/api/v1/training_runs", "")
		visit("/console/runs/"+url.PathEscape(rec.runB), `document.querySelector('svg#chart')`, "/metrics", "")
		visit("/console/checkpoints", fmt.Sprintf(`document.querySelector('tr[data-checkpoint=%q]')`, rec.ckptB), "", "")
		visit("/console/playground", fmt.Sprintf(`[...document.querySelectorAll('select#model option')].some(o => o.value === %q)`, rec.ckptB), "", "")
		visit("/console/usage", `document.querySelector('table#quotas')`, "", "")
		visit("/console/sessions/"+url.PathEscape(rec.sessionB), `document.querySelector('svg#timeline')`, "/spans", "")
		// Alice's own ids, typed by bob into the address: a 404 page like a missing one,
		// and nothing else of hers shown.
		for _, p := range []struct{ path, id string }{
			{"/console/runs/" + url.PathEscape(rec.runA), rec.runA},
			{"/console/sessions/" + url.PathEscape(rec.sessionA), rec.sessionA},
		} {
			for _, e := range visit(p.path, "", "", p.id) {
				if e.typ == network.ResourceTypeDocument && e.status != http.StatusNotFound {
					t.Errorf("bob opens %s: %d, want 404 (another tenant's id)", e.url, e.status)
				}
			}
		}
		// And asked by script from bob's page, through the console's forwarder: every
		// route that takes one of alice's ids answers 404, naming nothing of hers.
		run, ck, _ := strings.Cut(strings.TrimPrefix(rec.statePath, "tinker://"), "/")
		for _, p := range []struct{ path, id string }{
			{"/api/v1/training_runs/" + url.PathEscape(rec.runA), rec.runA},
			{"/api/v1/training_runs/" + url.PathEscape(rec.runA) + "/metrics", rec.runA},
			{"/api/v1/training_runs/" + url.PathEscape(rec.runA) + "/metrics/stream", rec.runA},
			{"/api/v1/training_runs/" + url.PathEscape(rec.runA) + "/checkpoints", rec.runA},
			{"/api/v1/training_runs/" + url.PathEscape(run) + "/checkpoints/" + ck + "/archive", run},
			{"/api/v1/sessions/" + url.PathEscape(rec.sessionA), rec.sessionA},
			{"/api/v1/sessions/" + url.PathEscape(rec.sessionA) + "/spans", rec.sessionA},
			{"/api/v1/sessions/" + url.PathEscape(rec.sessionA) + "/trace_export", rec.sessionA},
		} {
			got := eval[[]any](t, bob, fmt.Sprintf(`fetch(%q).then(async r => [r.status, await Promise.race([r.text(), new Promise(ok => setTimeout(() => ok('(a stream, still open)'), 2000))])])`, "/console/api"+p.path))
			status, body := int(got[0].(float64)), got[1].(string)
			if status != http.StatusNotFound {
				t.Errorf("bob's page asks %s: %d, want 404 (another tenant's id)", p.path, status)
			}
			for _, l := range leaks([]exchange{{method: "GET", url: p.path, status: int64(status), body: body}}, "", secrets, p.id) {
				t.Errorf("bob: %s", l)
			}
		}
		var calls int
		for _, e := range bob.rec.exchanges() {
			if strings.Contains(e.url, "/console/api/") {
				calls++
			}
		}
		if calls == 0 {
			t.Errorf("bob's pages made no /console/api/ call: nothing was checked")
		}
		t.Logf("bob: %d requests recorded, %d of them /console/api/ calls, scanned for %d of alice's strings", len(bob.rec.exchanges()), calls, len(secrets))
	})

	t.Run("user_strings_never_execute", func(t *testing.T) {
		alice.onFail(t)
		alice.open(t, "/console/runs")
		alice.wait(t, "the HTML-named run is listed", fmt.Sprintf(`document.querySelector('tr[data-run-id=%q]')`, rec.xssRun), 10*time.Second)
		if got := eval[string](t, alice, fmt.Sprintf(`document.querySelector('tr[data-run-id=%q] .run-name').textContent.trim()`, rec.xssRun)); got != xssName {
			t.Errorf("the run's name shows as %q, want the text %q", got, xssName)
		}
		checkInert(t, alice, "runs")
		// The list is drawn again by script from the API's JSON: check after that too.
		alice.waitRequest(t, "/console/api/api/v1/training_runs", 15*time.Second)
		if got := eval[string](t, alice, fmt.Sprintf(`document.querySelector('tr[data-run-id=%q] .run-name').textContent.trim()`, rec.xssRun)); got != xssName {
			t.Errorf("after the live refresh the run's name shows as %q, want the text %q", got, xssName)
		}
		checkInert(t, alice, "runs after a live refresh")
		alice.open(t, "/console/runs/"+url.PathEscape(rec.xssRun))
		alice.wait(t, "the run page names the run as text", fmt.Sprintf(`document.body.innerText.includes(%q)`, xssName), 10*time.Second)
		checkInert(t, alice, "run")
		alice.open(t, "/console/sessions/"+url.PathEscape(rec.xssSession))
		alice.settle(t, 300*time.Millisecond, 10*time.Second)
		checkInert(t, alice, "session")
		if !eval[bool](t, alice, fmt.Sprintf(`document.body.innerText.includes(%q)`, "<b>session</b>"+xssName)) {
			t.Errorf("the session page does not show the session's name (user_metadata.name) as text")
		}
	})

	t.Run("csrf_and_csp", func(t *testing.T) {
		alice.onFail(t)
		alice.open(t, "/console/checkpoints")
		token := eval[string](t, alice, `(document.querySelector('form#signout input[name=csrf]') || {}).value || (document.querySelector('meta[name=csrf-token]') || {}).content || ''`)
		if token == "" {
			t.Fatal("no CSRF token in form#signout input[name=csrf] or meta[name=csrf-token]")
		}
		run, ck, _ := strings.Cut(strings.TrimPrefix(rec.samplerPath, "tinker://"), "/")
		publish := "/console/api/api/v1/training_runs/" + url.PathEscape(run) + "/checkpoints/" + ck + "/publish"
		fetch := func(method, path, tok string) int {
			hdr := "{}"
			if tok != "" {
				hdr = fmt.Sprintf(`{'X-CSRF-Token': %q}`, tok)
			}
			return eval[int](t, alice, fmt.Sprintf(`fetch(%q, {method: %q, headers: %s, credentials: 'same-origin'}).then(r => r.status)`, path, method, hdr))
		}
		if got := fetch("POST", publish, ""); got != http.StatusForbidden {
			t.Errorf("the page's POST without the CSRF token: %d, want 403", got)
		}
		if got := fetch("POST", publish, "not-the-token"); got != http.StatusForbidden {
			t.Errorf("the page's POST with a wrong CSRF token: %d, want 403", got)
		}
		rest, _ := client.NewRestClient(srv.base, srv.keyA)
		if cks, err := rest.ListCheckpoints(context.Background(), run); err != nil || public(cks, rec.samplerPath) {
			t.Errorf("the refused POSTs published the checkpoint anyway (err %v)", err)
		}
		// The same request with the token goes through: the 403s above were the token's.
		if got := fetch("POST", publish, token); got >= 300 {
			t.Errorf("the page's POST with the CSRF token: %d, want 2xx", got)
		}
		if cks, err := rest.ListCheckpoints(context.Background(), run); err != nil || !public(cks, rec.samplerPath) {
			t.Errorf("the POST with the token did not publish the checkpoint (err %v)", err)
		}
		if got := fetch("DELETE", publish, token); got >= 300 {
			t.Errorf("the page's DELETE (unpublish) with the CSRF token: %d, want 2xx", got)
		}
		// From outside the browser: the cookie and the token, but a foreign Origin.
		cookies := alice.cookies(t)
		code, _ := doWithCookies(t, "DELETE", srv.base+publish, cookies, http.Header{"X-CSRF-Token": {token}, "Origin": {"http://evil.example"}})
		if code != http.StatusForbidden {
			t.Errorf("DELETE with the cookie and token from Origin http://evil.example: %d, want 403", code)
		}
		code, _ = doWithCookies(t, "POST", srv.base+"/console/signout", cookies, http.Header{"Origin": {srv.base}, "Content-Type": {"application/x-www-form-urlencoded"}})
		if code != http.StatusForbidden {
			t.Errorf("sign-out POST without the csrf field: %d, want 403", code)
		}
		if code, _ := getWithCookies(t, srv.base+"/console/runs", cookies, nil); code != http.StatusOK {
			t.Errorf("after the refused sign-out the session no longer works (%d)", code)
		}
		// A page of another site (localhost is not 127.0.0.1) posts the sign-out form, with
		// the right token even: the browser withholds the SameSite=Strict cookie and the
		// console refuses the cross-site request.
		other := strings.Replace(srv.base, "127.0.0.1", "localhost", 1)
		alice.openURL(t, other+"/api/v1/healthz")
		eval[bool](t, alice, fmt.Sprintf(`(() => { const f = document.createElement('form'); f.method = 'post';
		  f.action = %q; const i = document.createElement('input'); i.name = 'csrf'; i.value = %q;
		  f.appendChild(i); document.body.appendChild(f); f.submit(); return true; })()`, srv.base+"/console/signout", token))
		alice.wait(t, "the cross-site form posted", fmt.Sprintf(`location.href === %q`, srv.base+"/console/signout"), 10*time.Second)
		alice.settle(t, 200*time.Millisecond, 10*time.Second)
		posted := 0
		for _, e := range alice.rec.exchanges()[alice.page:] {
			if e.method == "POST" && e.url == srv.base+"/console/signout" {
				posted++
				if e.status != http.StatusForbidden {
					t.Errorf("a cross-site form POST to /console/signout: %d, want 403", e.status)
				}
			}
		}
		if posted == 0 {
			t.Errorf("the browser recorded no cross-site POST to /console/signout")
		}
		if code, _ := getWithCookies(t, srv.base+"/console/runs", cookies, nil); code != http.StatusOK {
			t.Errorf("a cross-site form POST signed alice out (%d)", code)
		}

		// CSP: on every page, and no inline script runs (one injected by script here).
		for _, p := range []string{"/console/login", "/console/runs", "/console/checkpoints", "/console/playground"} {
			csp := headerWithCookies(t, srv.base+p, cookies, "Content-Security-Policy")
			if csp == "" {
				t.Errorf("%s has no Content-Security-Policy header", p)
				continue
			}
			if src := directive(csp, "script-src", "default-src"); src == "" || strings.Contains(src, "'unsafe-inline'") || strings.Contains(src, "'unsafe-eval'") {
				t.Errorf("%s: CSP %q lets inline or eval'd script run", p, csp)
			}
		}
		alice.open(t, "/console/runs")
		ran := eval[bool](t, alice, `new Promise(done => {
		  const s = document.createElement('script'); s.textContent = 'window.__tuftInline = true';
		  document.body.appendChild(s); setTimeout(() => done(window.__tuftInline === true), 200); })`)
		if ran {
			t.Errorf("an inline <script> ran: the CSP does not forbid inline script")
		}
		if v := eval[[]string](t, alice, `window.__tuftCSP`); len(v) == 0 {
			t.Errorf("the page reported no CSP violation for the inline script")
		}
	})

	t.Run("phone_screenshot", func(t *testing.T) {
		alice.onFail(t)
		alice.do(t, "phone viewport", chromedp.EmulateViewport(phoneW, phoneH, chromedp.EmulateMobile, chromedp.EmulateScale(1)))
		defer alice.do(t, "laptop viewport", chromedp.EmulateViewport(laptopW, laptopH))
		alice.open(t, "/console/runs")
		alice.wait(t, "runs listed", fmt.Sprintf(`document.querySelector('tr[data-run-id=%q]')`, rec.runA), 10*time.Second)
		if w := eval[int](t, alice, `document.documentElement.scrollWidth`); w > phoneW+1 {
			t.Errorf("the runs page is %d px wide on a %d px phone: it scrolls sideways", w, phoneW)
		}
		alice.shot(t, "runs-phone")
	})
}
