package console_test

import (
	"strings"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
)

// The DOM hooks the browser suite drives (/work/console-contract.md) are on their pages:
// a renamed id or class fails here before it fails there.
func TestContractHooks(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	run, _ := trainRun(t, a, "hooks")
	var info struct {
		SessionID string `json:"session_id"`
	}
	a.Do("GET", "/api/v1/training_runs/"+run, nil, nil).JSON(t, &info)
	login := newBrowser(t, s.URL()).get("/console/login")
	for _, want := range []string{`<form id="login"`, `name="api_key"`, `<button type="submit">`} {
		if !strings.Contains(login.body, want) {
			t.Errorf("/console/login lacks %s", want)
		}
	}
	b := newBrowser(t, s.URL())
	b.signIn(testenv.KeyA)
	nav := []string{`<nav id="nav">`, `href="/console/runs"`, `href="/console/checkpoints"`, `href="/console/playground"`, `href="/console/usage"`,
		`<form id="signout" method="post"`}
	pages := map[string][]string{
		"/console/runs": {`id="run-filter"`, `<table id="runs">`, `data-run-id=`, `class="run-name"`, `class="run-model"`, `class="run-rank"`,
			`class="run-state"`, `class="run-steps"`, `class="run-loss"`, `class="run-created"`, `class="run-session"`},
		"/console/runs/" + run: {`<select id="metric">`, `id="smoothing" type="range" min="0" max="0.99"`, `id="log-scale" type="checkbox"`,
			`<svg id="chart"`, `class="series`, `data-points="0"`, `<table id="checkpoints">`, `<table id="samplers">`},
		"/console/checkpoints": {`data-checkpoint="tinker://`, `class="ckpt-size"`, `class="ckpt-type"`, `class="ckpt-ttl"`, `class="ckpt-published"`,
			`data-action="publish"`, `data-action="delete"`, `<form class="ttl"`, `name="ttl_seconds"`, `<a data-action="download"`},
		"/console/playground": {`<select id="model">`, `<textarea id="prompt"`, `id="temperature"`, `id="top-p"`, `id="max-tokens"`,
			`<button type="button" id="send">`, `id="reply"`, `<pre id="rendered-template">`},
		"/console/usage":                      {`<table id="usage-days">`, `<table id="quotas">`, `<meter`},
		"/console/sessions/" + info.SessionID: {`<svg id="timeline"`, `<a id="trace-download"`},
	}
	for p, hooks := range pages {
		r := b.get(p)
		if r.StatusCode != 200 {
			t.Errorf("%s: %d", p, r.StatusCode)
			continue
		}
		for _, want := range append(hooks, nav...) {
			if !strings.Contains(r.body, want) {
				t.Errorf("%s lacks %s", p, want)
			}
		}
	}
	// The hooks the scripts add: a timeline span and the chart's point count.
	for file, want := range map[string]string{"session.js": `class: "span"`, "run.js": `"data-points"`} {
		if r := b.get("/console/static/" + file); !strings.Contains(r.body, want) {
			t.Errorf("%s lacks %s", file, want)
		}
	}
}
