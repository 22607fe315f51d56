package console_test

import (
	"bufio"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
)

const wantCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"

// xss is a run name that would run script if the page put it in as HTML.
const xss = `<img src=x onerror=alert(1)>`

// trainRun makes a run of c's tenant named name, with a few steps and a sampler checkpoint
// (its tinker path returned).
func trainRun(t *testing.T, c *testenv.Client, name string) (runID, path string) {
	t.Helper()
	se := c.NewSession()
	var f struct {
		RequestID string `json:"request_id"`
		ModelID   string `json:"model_id"`
	}
	c.Post("/api/v1/create_model", map[string]any{"session_id": se, "model_seq_id": 0, "base_model": testenv.Model,
		"lora_config": map[string]any{"rank": 4, "seed": 1}, "user_metadata": map[string]any{"name": name}}, &f)
	c.Result(f.RequestID, nil)
	toks := make([]int, 12)
	for i := range toks {
		toks[i] = 10 + i
	}
	datum := map[string]any{"model_input": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": toks[:11]}}},
		"loss_fn_inputs": map[string]any{"target_tokens": map[string]any{"data": toks[1:], "dtype": "int64"}}}
	var x struct {
		RequestID string `json:"request_id"`
	}
	c.Post("/api/v1/forward_backward", map[string]any{"model_id": f.ModelID, "seq_id": 1, "forward_backward_input": map[string]any{"data": []any{datum}, "loss_fn": "cross_entropy"}}, &x)
	c.Result(x.RequestID, nil)
	c.Post("/api/v1/optim_step", map[string]any{"model_id": f.ModelID, "seq_id": 2, "adam_params": map[string]any{"learning_rate": 0.01}}, &x)
	c.Result(x.RequestID, nil)
	c.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": f.ModelID, "seq_id": 3, "path": "s1"}, &x)
	var saved struct{ Path string }
	c.Result(x.RequestID, &saved)
	return f.ModelID, saved.Path
}

func TestSecurityHeadersOnEveryResponse(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	run, _ := trainRun(t, a, "r")
	sess := a.NewSession()
	anon := newBrowser(t, s.URL())
	b := newBrowser(t, s.URL())
	b.signIn(testenv.KeyA)
	pages := []string{"/console/runs", "/console/runs/" + run, "/console/runs/no-such-run", "/console/checkpoints", "/console/playground",
		"/console/usage", "/console/sessions/" + sess, "/console/admin", "/console/nope"}
	check := func(who string, r resp, page bool) {
		t.Helper()
		h := r.Header
		if h.Get("Content-Security-Policy") != wantCSP || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" ||
			h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s %s: headers %v", who, r.Request.URL.Path, h)
		}
		if page && h.Get("Cache-Control") != "no-store" {
			t.Errorf("%s %s: Cache-Control %q", who, r.Request.URL.Path, h.Get("Cache-Control"))
		}
	}
	for _, p := range pages {
		check("signed in", b.get(p), true)
		check("anonymous", anon.get(p), true)
	}
	check("anonymous", anon.get("/console/login"), true)
	check("anonymous", anon.get("/console"), true)
	check("signed in", b.get("/console/api/api/v1/training_runs"), true)
	check("signed in", b.get("/console/api/api/v1/create_session"), true)
	for _, f := range []string{"console.js", "console.css", "runs.js", "run.js", "checkpoints.js", "playground.js", "session.js"} {
		r := b.get("/console/static/" + f)
		if r.StatusCode != 200 || r.ContentLength == 0 && r.body == "" {
			t.Errorf("static %s: %d", f, r.StatusCode)
		}
		check("static", r, false)
	}
	// The API's own routes are untouched by the console.
	if r := anon.get("/api/v1/healthz"); r.StatusCode != 200 || r.Header.Get("Content-Security-Policy") != "" {
		t.Errorf("healthz: %d %v", r.StatusCode, r.Header)
	}
}

func TestUserStringsRenderedEscaped(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	run, _ := trainRun(t, a, xss)
	b := newBrowser(t, s.URL())
	b.signIn(testenv.KeyA)
	for _, p := range []string{"/console/runs", "/console/runs/" + run} {
		r := b.get(p)
		if r.StatusCode != 200 {
			t.Fatalf("%s: %d %s", p, r.StatusCode, r.body)
		}
		if strings.Contains(r.body, "<img") || !strings.Contains(r.body, "&lt;img src=x onerror=alert(1)&gt;") {
			t.Errorf("%s: the run name is not escaped:\n%s", p, r.body)
		}
		if err := inlineScript(r.body); err != "" {
			t.Errorf("%s: %s", p, err)
		}
	}
	// The runs table has the contract's hooks, with the run's values.
	r := b.get("/console/runs")
	for _, want := range []string{`data-run-id="` + run + `"`, `class="run-name"`, `class="run-model">` + testenv.Model, `class="run-rank">4<`,
		`class="run-state"`, `class="run-steps"`, `class="run-loss"`, `class="run-created"`, `class="run-session"`, `id="run-filter"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("runs page lacks %s", want)
		}
	}
}

func TestRunPageCheckpointsAndSamplers(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	run, path := trainRun(t, a, "named")
	// A sampler client of the run's checkpoint, in the run's session, and one of the base
	// model that is not the run's.
	var run0 struct {
		SessionID string `json:"session_id"`
	}
	a.Do("GET", "/api/v1/training_runs/"+run, nil, nil).JSON(t, &run0)
	var smp struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	a.Post("/api/v1/create_sampling_session", map[string]any{"session_id": run0.SessionID, "sampling_session_seq_id": 1, "model_path": path}, &smp)
	var other struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	a.Post("/api/v1/create_sampling_session", map[string]any{"session_id": run0.SessionID, "sampling_session_seq_id": 2, "base_model": testenv.Model}, &other)
	if smp.SamplingSessionID == "" || other.SamplingSessionID == "" {
		t.Fatalf("sampling sessions %+v %+v", smp, other)
	}
	b := newBrowser(t, s.URL())
	b.signIn(testenv.KeyA)
	r := b.get("/console/runs/" + run)
	for _, want := range []string{`id="metric"`, `id="smoothing"`, `id="log-scale"`, `id="chart"`, `class="series`, `table id="checkpoints"`,
		`table id="samplers"`, `data-checkpoint="` + path + `"`, `data-sampler-id="` + smp.SamplingSessionID + `"`,
		`href="/console/sessions/` + run0.SessionID + `"`, `href="/console/playground?model=` + strings.ToLower(url.QueryEscape(path)) + `"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("run page lacks %s:\n%s", want, r.body)
		}
	}
	if strings.Contains(r.body, other.SamplingSessionID) {
		t.Errorf("the run page lists a base-model sampler of its session")
	}
	r = b.get("/console/checkpoints")
	for _, want := range []string{`data-checkpoint="` + path + `"`, `class="ckpt-size"`, `class="ckpt-type">sampler`, `class="ckpt-ttl">never`,
		`class="ckpt-published">no`, `data-action="publish"`, `data-action="delete"`, `class="ttl"`, `name="ttl_seconds"`, `data-action="download"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("checkpoints page lacks %s", want)
		}
	}
}

// The checkpoint forms publish, set a TTL, unpublish and delete through the API.
func TestCheckpointActions(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	run, path := trainRun(t, a, "r")
	id := strings.TrimPrefix(path, "tinker://"+run+"/")
	b := newBrowser(t, s.URL())
	b.signIn(testenv.KeyA)
	act := func(action, ttl string) resp {
		t.Helper()
		return b.postForm("/console/checkpoints/action", url.Values{"csrf": {b.csrf}, "run": {run}, "id": {id}, "action": {action}, "ttl_seconds": {ttl}}, nil)
	}
	state := func() (public bool, expires bool) {
		var out struct {
			Checkpoints []struct {
				Public    bool    `json:"public"`
				ExpiresAt *string `json:"expires_at"`
			} `json:"checkpoints"`
		}
		a.Do("GET", "/api/v1/training_runs/"+run+"/checkpoints", nil, nil).JSON(t, &out)
		if len(out.Checkpoints) != 1 {
			t.Fatalf("checkpoints %+v", out)
		}
		return out.Checkpoints[0].Public, out.Checkpoints[0].ExpiresAt != nil
	}
	if r := act("publish", ""); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("publish: %d %s", r.StatusCode, r.body)
	}
	if p, _ := state(); !p {
		t.Fatal("not published")
	}
	if r := b.get("/console/checkpoints"); !strings.Contains(r.body, `class="ckpt-published">yes`) || !strings.Contains(r.body, `data-action="unpublish"`) {
		t.Fatalf("page after publish:\n%s", r.body)
	}
	if r := act("ttl", "3600"); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("ttl: %d %s", r.StatusCode, r.body)
	}
	if _, e := state(); !e {
		t.Fatal("no expiry after ttl")
	}
	if r := act("ttl", "soon"); r.StatusCode != 400 || !strings.Contains(r.body, "ttl_seconds") {
		t.Fatalf("bad ttl: %d %s", r.StatusCode, r.body)
	}
	if r := act("ttl", "-5"); r.StatusCode != 400 || !strings.Contains(r.body, "ttl_seconds") {
		t.Fatalf("negative ttl: %d %s", r.StatusCode, r.body)
	}
	if r := act("ttl", ""); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("clear ttl: %d %s", r.StatusCode, r.body)
	}
	if _, e := state(); e {
		t.Fatal("expiry not cleared")
	}
	if r := act("unpublish", ""); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("unpublish: %d", r.StatusCode)
	}
	if r := act("frobnicate", ""); r.StatusCode != 400 || !strings.Contains(r.body, "frobnicate") {
		t.Fatalf("unknown action: %d", r.StatusCode)
	}
	// The download link goes through the forwarder to the API's signed archive link.
	r := b.get("/console/api/api/v1/training_runs/" + run + "/checkpoints/" + id + "/archive")
	if loc := r.Header.Get("Location"); r.StatusCode != http.StatusFound || !strings.Contains(loc, "/api/v1/archive/") {
		t.Fatalf("download: %d %q", r.StatusCode, loc)
	}
	// Bob's cookie cannot act on alice's checkpoint: the API answers as if it did not exist.
	bob := newBrowser(t, s.URL())
	bob.signIn(testenv.KeyB)
	if r := bob.postForm("/console/checkpoints/action", url.Values{"csrf": {bob.csrf}, "run": {run}, "id": {id}, "action": {"delete"}}, nil); r.StatusCode != 404 {
		t.Fatalf("bob deletes alice's checkpoint: %d %s", r.StatusCode, r.body)
	}
	if r := act("delete", ""); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("delete: %d %s", r.StatusCode, r.body)
	}
	if r := a.Do("GET", "/api/v1/training_runs/"+run+"/checkpoints", nil, nil); !strings.Contains(string(r.Body), `"checkpoints":[]`) {
		t.Fatalf("after delete: %s", r.Body)
	}
}

func TestForwarderAllowlistAndTenants(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	bc := testenv.NewClient(t, s.URL(), testenv.KeyB)
	runA, _ := trainRun(t, a, "alice-run")
	runB, _ := trainRun(t, bc, "bob-run")
	alice := newBrowser(t, s.URL())
	alice.signIn(testenv.KeyA)
	tok := map[string]string{"X-CSRF-Token": alice.csrf, "Content-Type": "application/json"}
	for _, tc := range []struct{ method, path string }{
		{"POST", "/console/api/api/v1/create_session"},
		{"POST", "/console/api/api/v1/forward_backward"},
		{"GET", "/console/api/api/v1/healthz"},
		{"DELETE", "/console/api/api/v1/auth/apikey/me"},
		{"GET", "/console/api/api/v1/training_runs/../../../api/v1/healthz"},
		{"GET", "/console/api/api/v1//training_runs"},
		{"GET", "/console/api/"},
		{"POST", "/console/api/oai/api/v1/completions"},
	} {
		if r := alice.do(tc.method, tc.path, strings.NewReader("{}"), tok); r.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s: %d %s, want 403", tc.method, tc.path, r.StatusCode, r.body)
		}
	}
	if r := alice.get("/console/api/api/v1/training_runs/" + runA); r.StatusCode != 200 || !strings.Contains(r.body, "alice-run") {
		t.Fatalf("alice's run: %d %s", r.StatusCode, r.body)
	}
	// Bob's run is as missing as a run that never was, whatever headers the browser adds.
	for _, h := range []map[string]string{nil, {"X-API-Key": testenv.KeyB}, {"Authorization": "Bearer " + testenv.KeyB}} {
		if r := alice.do("GET", "/console/api/api/v1/training_runs/"+runB, nil, h); r.StatusCode != 404 {
			t.Errorf("alice reads bob's run (headers %v): %d %s", h, r.StatusCode, r.body)
		}
		if r := alice.do("GET", "/console/api/api/v1/training_runs", nil, h); r.StatusCode != 200 || strings.Contains(r.body, runB) || !strings.Contains(r.body, runA) {
			t.Errorf("alice's list (headers %v): %d %s", h, r.StatusCode, r.body)
		}
	}
	if r := alice.get("/console/runs/" + runB); r.StatusCode != 404 {
		t.Errorf("alice's page of bob's run: %d", r.StatusCode)
	}
	if r := alice.get("/console/runs"); strings.Contains(r.body, runB) || strings.Contains(r.body, "bob-run") {
		t.Errorf("alice's runs page shows bob's run")
	}
	if r := alice.get("/console/checkpoints"); strings.Contains(r.body, runB) {
		t.Errorf("alice's checkpoints page shows bob's checkpoint")
	}
	// Without a session nothing is forwarded, whatever key the request carries.
	anon := newBrowser(t, s.URL())
	if r := anon.do("GET", "/console/api/api/v1/training_runs", nil, map[string]string{"X-API-Key": testenv.KeyA}); r.StatusCode != 401 {
		t.Errorf("forwarder without a session: %d", r.StatusCode)
	}
}

func TestPlaygroundChatStreamsThroughTheConsole(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	bc := testenv.NewClient(t, s.URL(), testenv.KeyB)
	_, pathA := trainRun(t, a, "a")
	_, pathB := trainRun(t, bc, "b")
	alice := newBrowser(t, s.URL())
	alice.signIn(testenv.KeyA)
	r := alice.get("/console/playground")
	for _, want := range []string{`<select id="model">`, `value="` + testenv.Model + `"`, `value="` + pathA + `"`, `id="prompt"`, `id="temperature"`,
		`id="top-p"`, `id="max-tokens"`, `id="send"`, `id="reply"`, `pre id="rendered-template"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("playground lacks %s", want)
		}
	}
	if strings.Contains(r.body, pathB) {
		t.Errorf("alice's playground lists bob's checkpoint")
	}
	if strings.Contains(r.body, ">"+testenv.Model+" (on") || !strings.Contains(r.body, pathA+" (on "+testenv.Model+")") {
		t.Errorf("the model list does not tell base models from checkpoints:\n%s", r.body)
	}
	msgs := `[{"role":"user","content":"hi <there>"}]`
	tok := map[string]string{"X-CSRF-Token": alice.csrf, "Content-Type": "application/json"}
	rr := alice.do("POST", "/console/api/oai/api/v1/chat/render", strings.NewReader(`{"model":"`+testenv.Model+`","messages":`+msgs+`}`), tok)
	if rr.StatusCode != 200 || !strings.Contains(rr.body, `"prompt_tokens"`) || !strings.Contains(rr.body, `hi \u003cthere\u003e`) {
		t.Fatalf("render: %d %s", rr.StatusCode, rr.body)
	}
	req, _ := http.NewRequest("POST", s.URL()+"/console/api/oai/api/v1/chat/completions",
		strings.NewReader(`{"model":"`+pathA+`","messages":`+msgs+`,"stream":true,"max_tokens":4,"temperature":0.7,"top_p":0.9}`))
	req.Header.Set("X-CSRF-Token", alice.csrf)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", s.URL())
	resp, err := alice.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
	}
	sc := bufio.NewScanner(resp.Body)
	chunks, done := 0, false
	for sc.Scan() {
		line := sc.Text()
		if line == "data: [DONE]" {
			done = true
			break
		}
		if strings.HasPrefix(line, "data: {") {
			chunks++
		}
	}
	if chunks == 0 || !done {
		t.Fatalf("stream gave %d chunks, done %v", chunks, done)
	}
	// Bob's checkpoint is not alice's to chat with.
	if r := alice.do("POST", "/console/api/oai/api/v1/chat/completions", strings.NewReader(`{"model":"`+pathB+`","messages":`+msgs+`}`), tok); r.StatusCode != 404 {
		t.Errorf("alice chats with bob's checkpoint: %d %s", r.StatusCode, r.body)
	}
}

// The usage page shows the tenant's tokens per day and every quota with a meter.
func TestUsagePage(t *testing.T) {
	s := startServer(t, nil)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	trainRun(t, a, "u")
	b := newBrowser(t, s.URL())
	b.signIn(testenv.KeyA)
	r := b.get("/console/usage")
	if r.StatusCode != 200 {
		t.Fatalf("usage: %d %s", r.StatusCode, r.body)
	}
	for _, want := range []string{`table id="usage-days"`, `table id="quotas"`, `data-quota="limits.max_runs_per_tenant"`, `1 runs`,
		`data-quota="limits.max_disk_bytes_per_tenant"`, `100.0 GiB`, `<meter min="0" max="256" value="1" high="204"`, `0.4%`, `data-day="` + time.Now().UTC().Format("2006-01-02") + `"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("usage page lacks %s", want)
		}
	}
	if i := strings.Index(r.body, `data-day="`); i < 0 || !strings.HasPrefix(r.body[i:], `data-day="`+time.Now().UTC().Format("2006-01-02")) {
		t.Errorf("the latest day is not first")
	}
	if strings.Count(r.body, "<meter") < 5 {
		t.Errorf("usage page has %d meters", strings.Count(r.body, "<meter"))
	}
}
