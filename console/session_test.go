package console_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
)

// A session's page lists its runs; its spans reach the timeline script through the
// forwarder; the trace download leads to the Perfetto file; another tenant's session is
// a 404 page.
func TestSessionPageSpansAndTraceDownload(t *testing.T) {
	s := startServer(t, func(c *config.Config) { c.Sessions.RecordSpans = true })
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	run, _ := trainRun(t, a, "traced")
	var info struct {
		SessionID string `json:"session_id"`
	}
	a.Do("GET", "/api/v1/training_runs/"+run, nil, nil).JSON(t, &info)
	b := newBrowser(t, s.URL())
	b.signIn(testenv.KeyA)
	page := b.get("/console/sessions/" + info.SessionID)
	for _, want := range []string{`svg id="timeline"`, `a id="trace-download" href="/console/sessions/` + info.SessionID + `/trace"`,
		`href="/console/runs/` + run + `"`, "session.js"} {
		if page.StatusCode != 200 || !strings.Contains(page.body, want) {
			t.Fatalf("session page lacks %s: %d\n%s", want, page.StatusCode, page.body)
		}
	}
	var spans struct {
		Spans []struct {
			Name string `json:"name"`
		} `json:"spans"`
	}
	check.Eventually(t, 10*time.Second, "the session's spans through the console", func() bool {
		r := b.get("/console/api/api/v1/sessions/" + info.SessionID + "/spans")
		return r.StatusCode == 200 && json.Unmarshal([]byte(r.body), &spans) == nil && len(spans.Spans) > 0
	})
	r := b.get("/console/sessions/" + info.SessionID + "/trace")
	loc := r.Header.Get("Location")
	if r.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "/api/v1/session_trace/") {
		t.Fatalf("trace download: %d %q %s", r.StatusCode, loc, r.body)
	}
	resp, err := http.Get(loc)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(body) == 0 || !strings.Contains(resp.Header.Get("Content-Disposition"), ".pftrace") {
		t.Fatalf("trace file: %d %v (%d bytes)", resp.StatusCode, resp.Header, len(body))
	}

	bob := newBrowser(t, s.URL())
	bob.signIn(testenv.KeyB)
	for _, p := range []string{"/console/sessions/" + info.SessionID, "/console/sessions/" + info.SessionID + "/trace",
		"/console/api/api/v1/sessions/" + info.SessionID + "/spans", "/console/api/api/v1/sessions/" + info.SessionID + "/trace_export"} {
		if r := bob.get(p); r.StatusCode != http.StatusNotFound {
			t.Errorf("bob reads alice's session at %s: %d", p, r.StatusCode)
		}
	}
}
