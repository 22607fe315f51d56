package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
)

// The runs page shows the run's steps and last loss; the run's metric history and its
// live event stream reach the page's script through the forwarder.
func TestRunMetricsThroughTheConsole(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	run, _ := trainRun(t, a, "m")
	b := newBrowser(t, s.URL())
	b.signIn(testenv.KeyA)
	page := b.get("/console/runs")
	if !strings.Contains(page.body, `class="run-steps">1<`) || strings.Contains(page.body, `class="run-loss"></td>`) ||
		!strings.Contains(page.body, `class="run-state">ready<`) || strings.Contains(page.body, `class="run-created"></td>`) {
		t.Fatalf("runs page lacks steps, loss, state or created:\n%s", page.body)
	}

	r := b.get("/console/api/api/v1/training_runs/" + run + "/metrics?after=0")
	var hist struct {
		Points []struct {
			Seq     int64              `json:"seq"`
			Op      string             `json:"op"`
			Metrics map[string]float64 `json:"metrics"`
		} `json:"points"`
		NextAfter int64 `json:"next_after"`
	}
	if err := json.Unmarshal([]byte(r.body), &hist); err != nil || r.StatusCode != 200 || len(hist.Points) != 2 {
		t.Fatalf("metrics: %d %s (%v)", r.StatusCode, r.body, err)
	}
	if _, ok := hist.Points[0].Metrics["loss:sum"]; !ok || hist.Points[1].Op != "optim_step" {
		t.Fatalf("metric points %+v", hist.Points)
	}

	// Live: the stream through the console delivers a point recorded after it opened.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL()+"/console/api/api/v1/training_runs/"+run+"/metrics/stream?after=2", nil)
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
	}
	var x struct {
		RequestID string `json:"request_id"`
	}
	a.Post("/api/v1/optim_step", map[string]any{"model_id": run, "seq_id": 4, "adam_params": map[string]any{"learning_rate": 0.01}}, &x)
	a.Result(x.RequestID, nil)
	sc := bufio.NewScanner(resp.Body)
	var event, data string
	for sc.Scan() && data == "" {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok && event == "point" {
			data = v
		}
	}
	if !strings.Contains(data, `"op":"optim_step"`) || !strings.Contains(data, `"seq":3`) {
		t.Fatalf("live point %q (event %q, scan error %v)", data, event, sc.Err())
	}
}
