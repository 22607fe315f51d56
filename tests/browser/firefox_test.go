package browser

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ffSteps is how many steps the run Firefox watches trains: the first before the run
// page opens (history to draw), the others while it is open (live updates).
const ffSteps = 3

// TestConsoleFirefox is the console's smoke test in Firefox (Debian's firefox-esr),
// driven over WebDriver BiDi (bidi_test.go), against the same server, tenants and SDK
// training as TestConsole: sign in through the form; the runs list; a run's chart drawn
// from its history and grown by a live update; checkpoints; a streamed playground reply;
// usage; a session's trace. On every page the console's DOM hooks are filled, no
// JavaScript error or CSP violation was logged, and the run named
// `<img src=x onerror=alert(1)>` made no <img> element; at a phone's width (390×844) the
// pages do not scroll sideways.
func TestConsoleFirefox(t *testing.T) {
	bin := firefoxPath(t)
	py := sdkPython(t)
	srv := startServer(t)
	tr := startTrainer(t, py, srv, ffSteps)
	ff := startFirefox(t, bin, srv.base)
	shots, fails := shotDirs(t)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		path := filepath.Join(fails, "TestConsoleFirefox.png")
		if png, err := ff.screenshot(); err == nil && writeFile(path, png) == nil {
			var text string
			ff.evalErr(`document.body ? location.href + '\n' + document.body.innerText.slice(0, 2000) : ''`, &text)
			t.Logf("failure screenshot of Firefox's tab at %s; page:\n%s", path, text)
		}
	})

	t.Cleanup(func() {
		levels := map[string]int{}
		for _, e := range ff.logsSince(0) {
			levels[e.Type+"/"+e.Level]++
		}
		t.Logf("Firefox log entries over the test, by type/level: %v", levels)
	})

	x := tr.next(t, "xss", 90*time.Second)
	xssRun := x["run_id"].(string)
	r := tr.next(t, "run", 60*time.Second)
	runA, sessionA := r["run_id"].(string), r["session_id"].(string)
	tr.step(t)
	tr.next(t, "step", 60*time.Second)

	// clean asserts that since the log mark nothing went wrong on the page: no JavaScript
	// error or console error logged (log.entryAdded), no CSP violation (the preloaded
	// trap's securitypolicyviolation listener), no injected string executed.
	clean := func(t *testing.T, page string, mark int) {
		t.Helper()
		for _, e := range ff.logsSince(mark) {
			if e.Type == "javascript" || e.Level == "error" {
				t.Errorf("%s: Firefox logged a %s %s: %s", page, e.Type, e.Level, e.Text)
			}
		}
		if v := ffEval[[]string](t, ff, `window.__tuftCSP`); len(v) > 0 {
			t.Errorf("%s: CSP violations: %v", page, v)
		}
		if v := ffEval[[]string](t, ff, `window.__tuftAlerts`); len(v) > 0 {
			t.Errorf("%s: script ran: %v", page, v)
		}
		if n := ffEval[int](t, ff, `document.querySelectorAll('img[src="x"]').length`); n > 0 {
			t.Errorf("%s: %d <img src=x> element(s) made from a user-supplied string", page, n)
		}
		if v := ffEval[[]string](t, ff, `window.__tuftImgErrors`); len(v) > 0 {
			t.Errorf("%s: image error handlers reached: %v", page, v)
		}
	}
	// visit opens a page, waits until ready holds and checks it is clean.
	visit := func(t *testing.T, path, ready string) int {
		t.Helper()
		mark := ff.logCount()
		ff.open(t, path)
		ff.wait(t, path+": "+ready, ready, 15*time.Second)
		return mark
	}

	t.Run("sign_in", func(t *testing.T) {
		mark := visit(t, "/console/login", `document.querySelector('form#login input[name=api_key]')`)
		ffEval[bool](t, ff, `window.__tuftOldPage = true`)
		ff.typeText(t, `form#login input[name=api_key]`, srv.keyA)
		ff.click(t, `form#login button[type=submit]`)
		ff.wait(t, "on /console/runs with nav#nav after sign-in",
			`window.__tuftOldPage !== true && location.pathname === '/console/runs' && document.querySelector('nav#nav')`, 15*time.Second)
		for _, p := range []string{"/console/runs", "/console/checkpoints", "/console/playground", "/console/usage"} {
			if !ffEval[bool](t, ff, fmt.Sprintf(`[...document.querySelectorAll('nav#nav a')].some(a => new URL(a.href).pathname === %q)`, p)) {
				t.Errorf("nav#nav has no link to %s", p)
			}
		}
		if !ffEval[bool](t, ff, `!!document.querySelector('form#signout')`) {
			t.Errorf("no form#signout")
		}
		clean(t, "sign-in", mark)
	})
	if t.Failed() {
		t.FailNow() // every page after needs the session
	}

	t.Run("runs", func(t *testing.T) {
		row := fmt.Sprintf(`document.querySelector('table#runs tr[data-run-id=%q]')`, runA)
		xrow := fmt.Sprintf(`document.querySelector('table#runs tr[data-run-id=%q]')`, xssRun)
		mark := visit(t, "/console/runs", row+` && `+xrow)
		cell := func(row, c string) string {
			return ffEval[string](t, ff, row+`.querySelector('`+c+`').textContent.trim()`)
		}
		if got := cell(row, ".run-name"); got != "curve-run" {
			t.Errorf(".run-name = %q, want curve-run", got)
		}
		if got := cell(row, ".run-rank"); got != "8" {
			t.Errorf(".run-rank = %q, want 8", got)
		}
		for _, c := range []string{".run-model", ".run-state", ".run-steps", ".run-created", ".run-session"} {
			if got := cell(row, c); got == "" {
				t.Errorf("%s is empty", c)
			}
		}
		if got := cell(xrow, ".run-name"); got != xssName {
			t.Errorf("the HTML-named run's .run-name = %q, want the name as text %q", got, xssName)
		}
		if !ffEval[bool](t, ff, `!!document.querySelector('input#run-filter')`) {
			t.Errorf("no input#run-filter")
		}
		// The list's live refresh (every 3 s) must keep the name inert too.
		ffEval[bool](t, ff, `new Promise(ok => setTimeout(() => ok(true), 3500))`)
		clean(t, "runs", mark)
	})

	t.Run("run_chart_live", func(t *testing.T) {
		const points = `Math.max(-1, ...[...document.querySelectorAll('svg#chart path.series')].map(p => +p.getAttribute('data-points') || 0))`
		mark := visit(t, "/console/runs/"+url.PathEscape(runA), points+` >= 1`)
		for _, sel := range []string{"select#metric", "input#smoothing", "input#log-scale", "table#checkpoints", "table#samplers"} {
			ff.wait(t, sel, fmt.Sprintf(`document.querySelector(%q)`, sel), 5*time.Second)
		}
		ffEval[bool](t, ff, `window.__tuftNoReload = true`)
		prev := ffEval[int](t, ff, points)
		for i := 2; i <= ffSteps; i++ {
			tr.step(t)
			tr.next(t, "step", 60*time.Second)
			ff.wait(t, fmt.Sprintf("step %d drawn live: data-points > %d without reload", i, prev),
				fmt.Sprintf(`window.__tuftNoReload === true && %s > %d`, points, prev), 15*time.Second)
			prev = ffEval[int](t, ff, points)
		}
		clean(t, "run", mark)
	})

	s := tr.next(t, "saved", 60*time.Second)
	statePath, samplerPath := s["state"].(string), s["sampler"].(string)

	t.Run("checkpoints", func(t *testing.T) {
		row := fmt.Sprintf(`document.querySelector('tr[data-checkpoint=%q]')`, statePath)
		mark := visit(t, "/console/checkpoints", row+fmt.Sprintf(` && document.querySelector('tr[data-checkpoint=%q]')`, samplerPath))
		for _, c := range []string{".ckpt-size", ".ckpt-type"} {
			if got := ffEval[string](t, ff, row+`.querySelector('`+c+`').textContent.trim()`); got == "" {
				t.Errorf("%s is empty", c)
			}
		}
		for _, c := range []string{".ckpt-ttl", ".ckpt-published", "button[data-action=delete]", "form.ttl input[name=ttl_seconds]", "a[data-action=download]"} {
			if !ffEval[bool](t, ff, row+`.querySelector('`+c+`') !== null`) {
				t.Errorf("the checkpoint's row has no %s", c)
			}
		}
		if !ffEval[bool](t, ff, row+`.querySelector('button[data-action=publish], button[data-action=unpublish]') !== null`) {
			t.Errorf("the checkpoint's row has no publish or unpublish button")
		}
		clean(t, "checkpoints", mark)
	})

	t.Run("playground_streams", func(t *testing.T) {
		mark := visit(t, "/console/playground",
			fmt.Sprintf(`[...document.querySelectorAll('select#model option')].some(o => o.value === %q)`, samplerPath))
		for _, sel := range []string{"input#temperature", "input#top-p", "input#max-tokens", "pre#rendered-template", "#reply"} {
			if !ffEval[bool](t, ff, fmt.Sprintf(`!!document.querySelector(%q)`, sel)) {
				t.Errorf("no %s", sel)
			}
		}
		ffEval[bool](t, ff, fmt.Sprintf(`(() => { const set = (s, v, ev) => { const e = document.querySelector(s); e.value = v;
		  e.dispatchEvent(new Event(ev, {bubbles: true})); };
		  set('select#model', %q, 'change'); set('input#max-tokens', '24', 'input'); set('input#temperature', '1', 'input');
		  return true; })()`, samplerPath))
		ff.typeText(t, "textarea#prompt", "Count on: 1 2 3 "+xssName)
		// Record each change of #reply's text: a streamed reply grows in steps.
		ffEval[bool](t, ff, `(() => { const r = document.querySelector('#reply'); window.__tuftReply = [];
		  new MutationObserver(() => { const n = r.textContent.length; const s = window.__tuftReply;
		    if (n > 0 && s[s.length - 1] !== n) s.push(n); }).observe(r, {childList: true, subtree: true, characterData: true});
		  return true; })()`)
		ff.click(t, "button#send")
		ff.wait(t, "#reply has text", `document.querySelector('#reply').textContent.trim().length > 0`, 60*time.Second)
		ff.wait(t, "button#send enabled again", `!document.querySelector('button#send').disabled`, 60*time.Second)
		t.Logf("#reply grew in %d steps (text lengths %v)", len(ffEval[[]int](t, ff, `window.__tuftReply`)), ffEval[[]int](t, ff, `window.__tuftReply`))
		if got := ffEval[string](t, ff, `document.querySelector('pre#rendered-template').textContent`); !strings.Contains(got, xssName) {
			t.Errorf("pre#rendered-template does not show the prompt as text: %q", got)
		}
		clean(t, "playground", mark)
	})

	t.Run("usage", func(t *testing.T) {
		mark := visit(t, "/console/usage", `document.querySelectorAll('table#usage-days tbody tr').length >= 1 && document.querySelectorAll('table#quotas meter').length >= 1`)
		if !ffEval[bool](t, ff, `document.querySelector('table#quotas').textContent.includes('limits.max_runs_per_tenant')`) {
			t.Errorf("table#quotas does not name limits.max_runs_per_tenant")
		}
		clean(t, "usage", mark)
	})

	t.Run("session_trace", func(t *testing.T) {
		mark := visit(t, "/console/sessions/"+url.PathEscape(sessionA), `document.querySelectorAll('svg#timeline rect.span').length >= 1 && document.querySelector('a#trace-download')`)
		clean(t, "session", mark)
	})

	t.Run("phone_width", func(t *testing.T) {
		ff.viewport(t, phoneW, phoneH)
		defer ff.viewport(t, laptopW, laptopH)
		if w := ffEval[int](t, ff, `window.innerWidth`); w != phoneW {
			t.Fatalf("window.innerWidth = %d after browsingContext.setViewport, want %d", w, phoneW)
		}
		for _, p := range []struct{ path, ready string }{
			{"/console/runs", fmt.Sprintf(`document.querySelector('tr[data-run-id=%q]')`, runA)},
			{"/console/playground", `document.querySelector('textarea#prompt')`},
			{"/console/usage", `document.querySelector('table#quotas meter')`},
			{"/console/runs/" + url.PathEscape(runA), `document.querySelector('svg#chart path.series')`},
		} {
			mark := visit(t, p.path, p.ready)
			if w := ffEval[int](t, ff, `document.documentElement.scrollWidth`); w > phoneW+1 {
				t.Errorf("%s is %d px wide on a %d px phone: it scrolls sideways", p.path, w, phoneW)
			}
			clean(t, p.path+" (phone)", mark)
		}
		ffEval[bool](t, ff, `(document.querySelector('svg#chart').scrollIntoView({block: 'center'}), true)`)
		ff.shot(t, shots, "run-phone-firefox")
	})

	// The checks above can fail: an inline script injected into a console page is
	// refused by its CSP and the refusal is seen (by the page's securitypolicyviolation
	// event and as a log.entryAdded error); an uncaught error thrown on the page arrives as
	// a log.entryAdded JavaScript error.
	t.Run("checks_can_fail", func(t *testing.T) {
		mark := visit(t, "/console/runs", `document.querySelector('table#runs')`)
		ran := ffEval[bool](t, ff, `new Promise(done => { const s = document.createElement('script');
		  s.textContent = 'window.__tuftInline = true'; document.body.appendChild(s);
		  setTimeout(() => done(window.__tuftInline === true), 300); })`)
		if ran {
			t.Errorf("an inline <script> ran: the CSP does not forbid inline script")
		}
		if v := ffEval[[]string](t, ff, `window.__tuftCSP`); len(v) == 0 {
			t.Errorf("Firefox reported no CSP violation for the inline script")
		}
		ffEval[bool](t, ff, `(setTimeout(() => { throw new Error('tuft-probe-error'); }, 0), true)`)
		deadline := time.Now().Add(10 * time.Second)
		for {
			thrown, csp := false, false
			for _, e := range ff.logsSince(mark) {
				thrown = thrown || e.Type == "javascript" && strings.Contains(e.Text, "tuft-probe-error")
				csp = csp || e.Level == "error" && strings.Contains(e.Text, "Content-Security-Policy")
			}
			if thrown && csp {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("log.entryAdded: the thrown error arrived %v, the CSP violation arrived %v (want both); entries since the page opened: %+v",
					thrown, csp, ff.logsSince(mark))
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("log entries since the page opened: %+v", ff.logsSince(mark))
	})
}
