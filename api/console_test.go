package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
)

type metricPoint struct {
	Seq     int64              `json:"seq"`
	Step    int64              `json:"step"`
	Op      string             `json:"op"`
	Time    string             `json:"time"`
	Metrics map[string]float64 `json:"metrics"`
}

type metricsReply struct {
	RunID     string        `json:"run_id"`
	Points    []metricPoint `json:"points"`
	NextAfter int64         `json:"next_after"`
	Dropped   int64         `json:"dropped"`
	Ended     bool          `json:"ended"`
}

// trainSteps runs n forward_backward + optim_step pairs from seq_id seq and returns the
// losses and the next seq_id.
func trainSteps(t *testing.T, c *testenv.Client, model string, seq, n int) ([]float64, int) {
	t.Helper()
	var losses []float64
	for i := 0; i < n; i++ {
		var f, o future
		c.Post("/api/v1/forward_backward", fwdbwdJSON(model, seq, datum(1, 16)), &f)
		c.Post("/api/v1/optim_step", optim(model, seq+1, 5e-3), &o)
		seq += 2
		losses = append(losses, lossOf(t, c.Result(f.RequestID, nil)))
		c.Result(o.RequestID, nil)
	}
	return losses, seq
}

func getMetrics(t *testing.T, c *testenv.Client, model, query string) metricsReply {
	t.Helper()
	r := c.Do("GET", "/api/v1/training_runs/"+model+"/metrics"+query, nil, nil)
	if r.Status != 200 {
		t.Fatalf("metrics%s: %d %s", query, r.Status, r.Body)
	}
	var m metricsReply
	r.JSON(t, &m)
	return m
}

// D1 and D3 (docs/compatibility.md, "Console data"): every forward_backward and
// optim_step leaves a point, optim_step's with its hyper-parameters; the run's JSON
// counts the steps and shows the last loss; another tenant sees none of it.
func TestRunMetricsHistory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sess := h.session(h.a)
	model := h.model(h.a, sess, 0, 8)
	var run map[string]any
	h.a.Do("GET", "/api/v1/training_runs/"+model, nil, nil).JSON(t, &run)
	if run["steps"] != float64(0) || run["last_loss"] != nil || run["state"] != "ready" || run["session_id"] != sess || run["created_at"] == nil {
		t.Fatalf("fresh run: %v", run)
	}
	losses, _ := trainSteps(t, h.a, model, 1, 3)

	m := getMetrics(t, h.a, model, "")
	if m.RunID != model || len(m.Points) != 6 || m.NextAfter != 6 || m.Dropped != 0 || m.Ended {
		t.Fatalf("history: %+v", m)
	}
	for i, p := range m.Points {
		wantOp := "forward_backward"
		if i%2 == 1 {
			wantOp = "optim_step"
		}
		if p.Seq != int64(i+1) || p.Op != wantOp || p.Step != int64(i/2) {
			t.Fatalf("point %d: %+v", i, p)
		}
		if _, err := time.Parse(time.RFC3339Nano, p.Time); err != nil {
			t.Fatalf("point %d time %q: %v", i, p.Time, err)
		}
		if wantOp == "forward_backward" && p.Metrics["loss:sum"] != losses[i/2] {
			t.Fatalf("point %d loss %v, the result said %v", i, p.Metrics, losses[i/2])
		}
		if wantOp == "optim_step" && (p.Metrics["learning_rate"] != 5e-3 || p.Metrics["beta2"] != 0.95) {
			t.Fatalf("optim point %d: %v", i, p.Metrics)
		}
	}
	page := getMetrics(t, h.a, model, "?after=2&limit=3")
	if len(page.Points) != 3 || page.Points[0].Seq != 3 || page.NextAfter != 5 {
		t.Fatalf("page: %+v", page)
	}
	if end := getMetrics(t, h.a, model, "?after=6"); len(end.Points) != 0 || end.NextAfter != 6 {
		t.Fatalf("past the end: %+v", end)
	}

	h.a.Do("GET", "/api/v1/training_runs/"+model, nil, nil).JSON(t, &run)
	if run["steps"] != float64(3) || run["last_loss"] != losses[2] {
		t.Fatalf("run after 3 steps: steps %v last_loss %v, want 3 and %v", run["steps"], run["last_loss"], losses[2])
	}
	var list struct {
		TrainingRuns []map[string]any `json:"training_runs"`
	}
	h.a.Do("GET", "/api/v1/training_runs", nil, nil).JSON(t, &list)
	if len(list.TrainingRuns) != 1 || list.TrainingRuns[0]["steps"] != float64(3) || list.TrainingRuns[0]["last_loss"] != losses[2] {
		t.Fatalf("list: %v", list.TrainingRuns)
	}

	// Tenant isolation: bob's view of alice's run is a missing run's, on both routes.
	for _, path := range []string{"/metrics", "/metrics/stream"} {
		rb := h.b.Do("GET", "/api/v1/training_runs/"+model+path, nil, nil)
		rm := h.b.Do("GET", "/api/v1/training_runs/nope:train:0"+path, nil, nil)
		if rb.Status != 404 || rm.Status != 404 || strings.Contains(string(rb.Body), "alice") {
			t.Fatalf("bob on alice's %s: %d %s; on a missing run: %d", path, rb.Status, rb.Body, rm.Status)
		}
	}

	// Bad input is a 400 naming the parameter, and changes nothing.
	for q, want := range map[string]string{"?after=-1": "after", "?after=x": "after", "?limit=0": "limit", "?limit=99999999": "limit"} {
		r := h.a.Do("GET", "/api/v1/training_runs/"+model+"/metrics"+q, nil, nil)
		if r.Status != 400 || !strings.Contains(string(r.Body), want) {
			t.Fatalf("%s: %d %s", q, r.Status, r.Body)
		}
	}
	r := h.a.Do("GET", "/api/v1/training_runs/"+model+"/metrics/stream", nil, map[string]string{"Last-Event-ID": "abc"})
	if r.Status != 400 || !strings.Contains(string(r.Body), "Last-Event-ID") {
		t.Fatalf("bad Last-Event-ID: %d %s", r.Status, r.Body)
	}
	if m2 := getMetrics(t, h.a, model, ""); len(m2.Points) != 6 {
		t.Fatalf("history changed: %+v", m2)
	}
}

// limits.max_metric_points_per_run keeps the newest points and counts the dropped ones.
func TestRunMetricsBounded(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Limits.MaxMetricPointsPerRun = 3
	s := testenv.Start(t, cfg)
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	model := h.model(h.a, h.session(h.a), 0, 4)
	trainSteps(t, h.a, model, 1, 4) // 8 points
	m := getMetrics(t, h.a, model, "")
	if len(m.Points) != 3 || m.Points[0].Seq != 6 || m.Points[2].Seq != 8 || m.Dropped != 5 {
		t.Fatalf("bounded history: %+v", m)
	}
}

// The history survives a restart on the embedded store, with its bound changed between
// the two starts, and goes on numbering where it was.
func TestRunMetricsSurviveRestart(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "embedded")
	start := func(maxPoints int) (*server.Server, *testenv.Client) {
		c := cfg
		c.Limits.MaxMetricPointsPerRun = maxPoints
		s, err := server.Start(context.Background(), c, server.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s, testenv.NewClient(t, s.URL(), testenv.KeyA)
	}
	stop := func(s *server.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s, c := start(5)
	h := &harness{t: t, a: c}
	model := h.model(c, h.session(c), 0, 4)
	losses, seq := trainSteps(t, c, model, 1, 3) // 6 points, 5 kept
	before := getMetrics(t, c, model, "")
	stop(s)

	s, c = start(5)
	after := getMetrics(t, c, model, "")
	if fmt.Sprint(after.Points) != fmt.Sprint(before.Points) || after.Dropped != 1 {
		t.Fatalf("after restart %+v, before %+v", after, before)
	}
	var run map[string]any
	c.Do("GET", "/api/v1/training_runs/"+model, nil, nil).JSON(t, &run)
	if run["steps"] != float64(3) || run["last_loss"] != losses[2] {
		t.Fatalf("run after restart: %v", run)
	}
	trainSteps(t, c, model, seq, 1)
	stop(s)

	s, c = start(3) // a smaller bound: the newest 3 are kept, numbering goes on
	m := getMetrics(t, c, model, "")
	if len(m.Points) != 3 || m.Points[0].Seq != 6 || m.Points[2].Seq != 8 || m.Dropped != 5 || m.Points[2].Step != 3 {
		t.Fatalf("after a restart with a smaller bound: %+v", m)
	}
	trainSteps(t, c, model, seq+2, 1)
	last := getMetrics(t, c, model, "")
	if len(last.Points) != 3 || last.Points[2].Seq != 10 || last.Points[2].Step != 4 {
		t.Fatalf("after one more step: %+v", last)
	}
	var f future
	c.Post("/api/v1/unload_model", map[string]any{"model_id": model, "type": "unload_model"}, &f)
	c.Result(f.RequestID, nil)
	stop(s)

	// An ended run's history is read from the store (not held in memory) after a start.
	s, c = start(3)
	defer stop(s)
	cold := getMetrics(t, c, model, "")
	var rr map[string]any
	if c.Do("GET", "/api/v1/training_runs/"+model, nil, nil).JSON(t, &rr); rr["state"] != "unloaded" {
		t.Fatalf("the unloaded run after a restart: %v (an older run record flushed after the unload's?)", rr)
	}
	if fmt.Sprint(cold.Points) != fmt.Sprint(last.Points) || cold.Dropped != 7 || !cold.Ended {
		t.Fatalf("the unloaded run's history after a restart: %+v, before %+v", cold, last)
	}
	if page := getMetrics(t, c, model, "?after=8&limit=1"); len(page.Points) != 1 || page.Points[0].Seq != 9 || page.NextAfter != 9 {
		t.Fatalf("a page of the stored history: %+v", page)
	}
	st, _ := openStream(t, s.URL(), testenv.KeyA, model, "?after=9", nil)
	if ev := st.nextEvent(t); ev.id != "10" {
		t.Fatalf("stored history's stream: %+v", ev)
	}
	if ev := st.nextEvent(t); ev.event != "end" {
		t.Fatalf("stored history's stream end: %+v", ev)
	}
}

// sseEvent is one server-sent event, or a comment.
type sseEvent struct {
	id, event, data, comment string
}

type sseReader struct {
	resp *http.Response
	br   *bufio.Reader
}

func openStream(t *testing.T, base, key, model, query string, header map[string]string) (*sseReader, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/api/v1/training_runs/"+model+"/metrics/stream"+query, nil)
	req.Header.Set("X-API-Key", key)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &sseReader{resp: resp, br: bufio.NewReader(resp.Body)}, resp
}

// next reads the next event or comment, failing the test after d.
func (s *sseReader) next(t *testing.T, d time.Duration) sseEvent {
	t.Helper()
	type res struct {
		ev  sseEvent
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var ev sseEvent
		for {
			line, err := s.br.ReadString('\n')
			if err != nil {
				ch <- res{ev, err}
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case line == "":
				ch <- res{ev, nil}
				return
			case strings.HasPrefix(line, ": "):
				ev.comment = line[2:]
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("stream: %v (after %+v)", r.err, r.ev)
		}
		return r.ev
	case <-time.After(d):
		t.Fatalf("no event within %v", d)
	}
	return sseEvent{}
}

// nextPoint skips comments and returns the next event.
func (s *sseReader) nextEvent(t *testing.T) sseEvent {
	t.Helper()
	for {
		ev := s.next(t, 30*time.Second)
		if ev.comment == "" {
			return ev
		}
	}
}

// D2: the stream sends the stored points, then new ones as they are recorded, resumes
// after Last-Event-ID, ends when the run is unloaded, and holds no request slot: a
// tenant with two open streams and two request slots still gets its requests served,
// and a stream past limits.max_metric_streams_per_tenant is a 429 naming the key.
func TestRunMetricsStream(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Limits.MaxConcurrentRequestsPerTenant = 2
	cfg.Limits.MaxMetricStreamsPerTenant = 2
	s := testenv.Start(t, cfg)
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	model := h.model(h.a, h.session(h.a), 0, 4)
	_, seq := trainSteps(t, h.a, model, 1, 1) // points 1, 2

	st, resp := openStream(t, s.URL(), testenv.KeyA, model, "?after=1", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ev := st.nextEvent(t)
	var p metricPoint
	if err := json.Unmarshal([]byte(ev.data), &p); err != nil || ev.id != "2" || ev.event != "point" || p.Seq != 2 || p.Op != "optim_step" {
		t.Fatalf("first event %+v (%v)", ev, err)
	}
	// A second stream, resuming after Last-Event-ID 0 (it wins over ?after=).
	st2, _ := openStream(t, s.URL(), testenv.KeyA, model, "?after=2", map[string]string{"Last-Event-ID": "0"})
	if ev := st2.nextEvent(t); ev.id != "1" {
		t.Fatalf("resumed stream's first event %+v", ev)
	}
	st2.nextEvent(t)
	// Both streams open; the tenant's two request slots are free for training.
	trainSteps(t, h.a, model, seq, 1)
	for i, want := range []string{"3", "4"} {
		if ev := st.nextEvent(t); ev.id != want || ev.event != "point" {
			t.Fatalf("live event %d: %+v", i, ev)
		}
	}
	// A third stream is over limits.max_metric_streams_per_tenant; bob's are his own.
	if r := h.a.Do("GET", "/api/v1/training_runs/"+model+"/metrics/stream", nil, nil); r.Status != 429 ||
		!strings.Contains(string(r.Body), "limits.max_metric_streams_per_tenant") || r.Header.Get("Retry-After") == "" {
		t.Fatalf("third stream: %d %s", r.Status, r.Body)
	}
	var f future
	h.a.Post("/api/v1/unload_model", map[string]any{"model_id": model, "type": "unload_model"}, &f)
	h.a.Result(f.RequestID, nil)
	if ev := st.nextEvent(t); ev.event != "end" {
		t.Fatalf("after unload: %+v", ev)
	}
	if m := getMetrics(t, h.a, model, ""); !m.Ended || len(m.Points) != 4 {
		t.Fatalf("history of the unloaded run: %+v", m)
	}
	// The ended run's stream sends what it has, then the end.
	st3, _ := openStream(t, s.URL(), testenv.KeyA, model, "?after=3", nil)
	if ev := st3.nextEvent(t); ev.id != "4" {
		t.Fatalf("ended run's stream: %+v", ev)
	}
	if ev := st3.nextEvent(t); ev.event != "end" {
		t.Fatalf("ended run's stream end: %+v", ev)
	}
}

// A quiet stream sends a comment every 15 seconds (the console's contract).
func TestRunMetricsStreamHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 15 s heartbeat")
	}
	h := newHarness(t, "memory")
	model := h.model(h.a, h.session(h.a), 0, 4)
	st, _ := openStream(t, h.url, testenv.KeyA, model, "", nil)
	if ev := st.next(t, 5*time.Second); ev.comment == "" { // the opening comment
		t.Fatalf("opening: %+v", ev)
	}
	start := time.Now()
	if ev := st.next(t, 20*time.Second); ev.comment != "heartbeat" || time.Since(start) < 14*time.Second {
		t.Fatalf("heartbeat %+v after %v", ev, time.Since(start))
	}
}
