package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
	"github.com/tuft-go/tuft/server"
	"github.com/tuft-go/tuft/telemetry"
	"github.com/tuft-go/tuft/telemetry/setup"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

type spanJSON struct {
	Seq          int64          `json:"seq"`
	TraceID      string         `json:"trace_id"`
	SpanID       string         `json:"span_id"`
	ParentSpanID string         `json:"parent_span_id"`
	Name         string         `json:"name"`
	Start        time.Time      `json:"start"`
	End          time.Time      `json:"end"`
	DurationMs   float64        `json:"duration_ms"`
	Status       string         `json:"status"`
	Attributes   map[string]any `json:"attributes"`
}

type spansJSON struct {
	SessionID string     `json:"session_id"`
	Spans     []spanJSON `json:"spans"`
	Dropped   int64      `json:"dropped"`
}

func spanConfig(t *testing.T, mode string) config.Config {
	cfg := testenv.Config(t, t.TempDir(), mode)
	cfg.Sessions.RecordSpans = true
	return cfg
}

func getSpans(t *testing.T, c *testenv.Client, sess string) spansJSON {
	t.Helper()
	r := c.Do("GET", "/api/v1/sessions/"+sess+"/spans", nil, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("spans of %s: %d %s", sess, r.Status, r.Body)
	}
	var out spansJSON
	r.JSON(t, &out)
	return out
}

// startWithReader starts a server whose metrics a manual reader collects (and, with
// sessions.record_spans, whose session spans are recorded, as tuft launch does).
func startWithReader(t *testing.T, cfg config.Config) (*server.Server, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	opts := []setup.Option{setup.WithMetricReader(reader), setup.WithLogWriter(io.Discard)}
	if cfg.Sessions.RecordSpans {
		opts = append(opts, setup.WithSessionSpans(&telemetry.SpanSink{}))
	}
	tel, err := setup.New(context.Background(), cfg.Telemetry, "server", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	s := testenv.StartWith(t, cfg, server.Options{Logger: tel.Logger(), TracerProvider: tel.TracerProvider(), MeterProvider: tel.MeterProvider(),
		Instruments: tel.Instruments(), SessionSpans: tel.SessionSpans()})
	return s, reader
}

// counterByAttr sums an int64 counter's points by the value of one attribute.
func counterByAttr(t *testing.T, reader *sdkmetric.ManualReader, name, attr string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key(attr))
				out[v.AsString()] += dp.Value
			}
		}
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func countNamed(spans []spanJSON, name string) int {
	n := 0
	for _, s := range spans {
		if s.Name == name {
			n++
		}
	}
	return n
}

// trained reports whether a record holds the last span trainOnce's requests end: the
// execution of its optim_step (the client may read the result just before it ends).
func trained(spans []spanJSON) bool {
	for _, s := range spans {
		if s.Name == "future_store.execute_operation" && s.Attributes["tuft.operation_type"] == "optim_step" {
			return true
		}
	}
	return false
}

// settledSpans waits until sess's record is non-empty and has not grown for 300 ms.
func settledSpans(t *testing.T, c *testenv.Client, sess string) spansJSON {
	t.Helper()
	var got spansJSON
	last := int64(-1)
	check.Eventually(t, 20*time.Second, "the session's span record to settle", func() bool {
		got = getSpans(t, c, sess)
		if len(got.Spans) == 0 {
			return false
		}
		seq := got.Spans[len(got.Spans)-1].Seq
		settled := seq == last
		last = seq
		time.Sleep(300 * time.Millisecond)
		return settled
	})
	return got
}

// trainOnce runs one forward_backward and one optim_step on a new run of sess.
func trainOnce(c *testenv.Client, sess string) string {
	model := c.NewTrainingRun(sess, map[string]any{"rank": 4, "seed": 1})
	var f future
	c.Post("/api/v1/forward_backward", fwdbwdJSON(model, 1, datum(3, 8)), &f)
	c.Result(f.RequestID, nil)
	c.Post("/api/v1/optim_step", optim(model, 2, 1e-3), &f)
	c.Result(f.RequestID, nil)
	return model
}

// A session's span record holds the server's own spans of its requests (HTTP, futures,
// controller, backend, executor), each with the T1 fields; another tenant sees a 404 and
// its requests naming the session do not enter the record.
func TestSessionSpansRecordTheSessionsRequests(t *testing.T) {
	cfg := spanConfig(t, "memory")
	s := testenv.Start(t, cfg)
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	sess := h.a.NewSession()
	model := trainOnce(h.a, sess)

	var got spansJSON
	want := []string{"POST /api/v1/create_model", "POST /api/v1/forward_backward", "future_store.execute_operation",
		"training_controller.run_forward_backward", "training_backend.forward_backward", "hf_model.forward_backward",
		"training_controller.run_optim_step"}
	check.Eventually(t, 10*time.Second, "the session's spans", func() bool {
		got = getSpans(t, h.a, sess)
		for _, n := range want {
			if countNamed(got.Spans, n) == 0 {
				return false
			}
		}
		return true
	})
	if got.SessionID != sess || got.Dropped != 0 {
		t.Fatalf("record header: %+v", got)
	}
	for i, sp := range got.Spans {
		if len(sp.TraceID) != 32 || len(sp.SpanID) != 16 || sp.Name == "" || sp.Status != "ok" || sp.End.Before(sp.Start) ||
			sp.DurationMs < 0 || (i > 0 && sp.Seq <= got.Spans[i-1].Seq) {
			t.Fatalf("span %d malformed: %+v", i, sp)
		}
		if _, ok := sp.Attributes["tuft.tenant"]; ok {
			t.Fatalf("span %s repeats the tenant: %v", sp.Name, sp.Attributes)
		}
		if sp.Attributes["tuft.session_id"] != nil && sp.Attributes["tuft.session_id"] != sess {
			t.Fatalf("span %s of another session: %v", sp.Name, sp.Attributes)
		}
		if sp.Name == "training_controller.run_forward_backward" && sp.Attributes["tuft.training_run_id"] != model {
			t.Fatalf("controller span attributes: %v", sp.Attributes)
		}
	}

	// Tenant isolation: B reads a 404 exactly as for a missing session, and B's requests
	// that name A's session (refused) are not part of A's record.
	for _, path := range []string{"/spans", "/trace_export"} {
		r := h.b.Do("GET", "/api/v1/sessions/"+sess+path, nil, nil)
		missing := h.b.Do("GET", "/api/v1/sessions/no-such-session"+path, nil, nil)
		if r.Status != http.StatusNotFound || missing.Status != http.StatusNotFound {
			t.Fatalf("B reading A's %s: %d %s (missing: %d)", path, r.Status, r.Body, missing.Status)
		}
	}
	bSess := h.b.NewSession()
	r := h.b.Do("POST", "/api/v1/create_sampling_session", map[string]any{"session_id": sess, "sampling_session_seq_id": 0, "base_model": testenv.Model}, nil)
	if r.Status/100 == 2 {
		t.Fatalf("B made a sampler in A's session: %s", r.Body)
	}
	trainOnce(h.b, bSess) // B's own session gets B's spans (and a marker that B's spans were recorded)
	check.Eventually(t, 10*time.Second, "B's own spans", func() bool {
		return trained(getSpans(t, h.b, bSess).Spans)
	})
	if n := countNamed(getSpans(t, h.a, sess).Spans, "POST /api/v1/create_sampling_session"); n != 0 {
		t.Fatalf("B's refused request entered A's record (%d spans)", n)
	}
	for _, sp := range getSpans(t, h.b, bSess).Spans {
		if id, _ := sp.Attributes["tuft.session_id"].(string); id == sess {
			t.Fatalf("A's span in B's record: %+v", sp)
		}
	}
}

// limits.max_spans_per_session keeps the newest spans and counts the others;
// limits.max_traced_sessions_per_tenant drops the least recently traced session's record.
func TestSessionSpansAreBounded(t *testing.T) {
	cfg := spanConfig(t, "memory")
	cfg.Limits.MaxSpansPerSession = 12
	cfg.Limits.MaxTracedSessionsPerTenant = 1
	s, reader := startWithReader(t, cfg)
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	first := h.a.NewSession()
	trainOnce(h.a, first)
	// The newest spans may be retrieve_future polls rather than the optim_step's, so
	// wait for the record to settle instead of for a particular span.
	// The bound is also the tenant's share of the recorder's queue, so under load a burst
	// may be dropped as queue_full before it reaches the record: train again until the
	// record itself has dropped spans.
	got := settledSpans(t, h.a, first)
	for i := 0; got.Dropped == 0 && i < 5; i++ {
		trainOnce(h.a, first)
		got = settledSpans(t, h.a, first)
	}
	if got.Dropped == 0 {
		t.Fatalf("no span dropped past the bound: %d kept", len(got.Spans))
	}
	if len(got.Spans) > 12 || got.Spans[len(got.Spans)-1].Seq-got.Spans[0].Seq >= 12 {
		t.Fatalf("%d spans kept (seq %d..%d), bound 12", len(got.Spans), got.Spans[0].Seq, got.Spans[len(got.Spans)-1].Seq)
	}
	if got.Spans[0].Seq != got.Dropped {
		t.Fatalf("oldest kept seq %d after %d dropped", got.Spans[0].Seq, got.Dropped)
	}
	// B's sessions do not count against A's bound.
	bSess := h.b.NewSession()
	trainOnce(h.b, bSess)
	settledSpans(t, h.b, bSess)
	if len(getSpans(t, h.a, first).Spans) == 0 {
		t.Fatal("B's traced session evicted A's")
	}
	second := h.a.NewSession()
	trainOnce(h.a, second)
	check.Eventually(t, 10*time.Second, "the second session's spans to evict the first's", func() bool {
		return len(getSpans(t, h.a, second).Spans) > 0 && len(getSpans(t, h.a, first).Spans) == 0
	})
	if len(getSpans(t, h.b, bSess).Spans) == 0 {
		t.Fatal("A's new session evicted B's record")
	}
	// tuft.session_spans.dropped counts both kinds of drop.
	drops := counterByAttr(t, reader, "tuft.session_spans.dropped", "reason")
	if drops["session_bound"] < got.Dropped || drops["session_evicted"] == 0 {
		t.Fatalf("tuft.session_spans.dropped: %v (record dropped %d)", drops, got.Dropped)
	}
}

// A session's spans are in the store: they survive a restart on the embedded store.
func TestSessionSpansSurviveARestart(t *testing.T) {
	cfg := spanConfig(t, "embedded")
	start := func() (*server.Server, *testenv.Client) {
		s := testenv.Start(t, cfg)
		return s, testenv.NewClient(t, s.URL(), testenv.KeyA)
	}
	s, a := start()
	sess := a.NewSession()
	trainOnce(a, sess)
	var before spansJSON
	check.Eventually(t, 10*time.Second, "spans", func() bool {
		before = getSpans(t, a, sess)
		return trained(before.Spans)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_, a = start()
	after := getSpans(t, a, sess)
	if len(after.Spans) < len(before.Spans) {
		t.Fatalf("%d spans before the restart, %d after", len(before.Spans), len(after.Spans))
	}
	for i, sp := range before.Spans {
		if after.Spans[i].SpanID != sp.SpanID || after.Spans[i].Name != sp.Name || !after.Spans[i].Start.Equal(sp.Start) {
			t.Fatalf("span %d changed across the restart: %+v vs %+v", i, sp, after.Spans[i])
		}
	}
}

// trace_export answers ready with an absolute signed link; the link serves the spans as a
// Perfetto trace to a plain GET (no key), is refused when forged, and is the session's only.
func TestTraceExportServesAPerfettoTrace(t *testing.T) {
	cfg := spanConfig(t, "memory")
	s := testenv.Start(t, cfg)
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	sess := h.a.NewSession()
	trainOnce(h.a, sess)
	var rec spansJSON
	check.Eventually(t, 10*time.Second, "spans", func() bool {
		rec = getSpans(t, h.a, sess)
		return trained(rec.Spans)
	})
	var exp struct {
		Status string  `json:"status"`
		URL    *string `json:"url"`
		Error  *string `json:"error"`
	}
	r := h.a.Do("GET", "/api/v1/sessions/"+sess+"/trace_export", nil, nil)
	r.JSON(t, &exp)
	if r.Status != http.StatusOK || exp.Status != "ready" || exp.URL == nil || !strings.HasPrefix(*exp.URL, h.url+"/") || exp.Error != nil {
		t.Fatalf("trace_export: %d %s", r.Status, r.Body)
	}
	resp, err := http.Get(*exp.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Disposition"), sess+".pftrace") {
		t.Fatalf("download: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Disposition"), body)
	}
	tr := readPerfetto(t, body)
	// Every span of the record at download time is one slice (the download's own spans
	// and later ones may add more).
	names := map[string]int{}
	for _, sl := range tr.slices {
		names[sl.name]++
	}
	for _, sp := range rec.Spans {
		if names[sp.Name] == 0 {
			t.Fatalf("span %s is not a slice of the trace; slices: %v", sp.Name, names)
		}
	}
	if tr.root != "session "+sess || len(tr.lanes) == 0 {
		t.Fatalf("tracks: root %q lanes %v", tr.root, tr.lanes)
	}
	for _, sl := range tr.slices {
		if sl.annotations["span_id"] == "" || sl.annotations["trace_id"] == "" || sl.annotations["status"] != "ok" {
			t.Fatalf("slice %s annotations: %v", sl.name, sl.annotations)
		}
	}
	// Perfetto's own schema reads the same slices (where scripts/setup.sh made its venv;
	// TestPerfettoTraceReadsWithPerfettosSchema covers the encoding in detail).
	home, _ := os.UserHomeDir()
	if py := filepath.Join(home, ".cache", "tuft", "venv-perfetto-0.59.1", "bin", "python"); fileExists(py) {
		f := filepath.Join(t.TempDir(), "t.pftrace")
		if err := os.WriteFile(f, body, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(py, "testdata/perfetto_read.py", f).CombinedOutput()
		var read struct{ Slices []any }
		if err != nil || json.Unmarshal(out, &read) != nil || len(read.Slices) != len(tr.slices) {
			t.Fatalf("perfetto_read.py: %v: %d slices vs %d: %.500s", err, len(read.Slices), len(tr.slices), out)
		}
	}
	// A forged or altered token is refused; so is a trace token used as an archive token.
	tok := (*exp.URL)[strings.LastIndex(*exp.URL, "/")+1:]
	for _, path := range []string{"/api/v1/session_trace/" + tok[:len(tok)-2] + "xx", "/api/v1/session_trace/nonsense", "/api/v1/archive/" + tok} {
		resp, err := http.Get(h.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("GET %s: %d, want 403", path, resp.StatusCode)
		}
	}
}

// perfettoFile is what the test's own reader finds in a trace: the track names and the
// slices, whose begin/end pairs must nest properly on each track.
type perfettoFile struct {
	root   string
	lanes  map[uint64]string
	slices []slice
}

type slice struct {
	name        string
	track       uint64
	begin, end  uint64
	annotations map[string]string
}

// readPerfetto decodes a Trace with protowire's field reader, independently of the
// writer: Trace.packet = 1; TracePacket.timestamp = 8, trusted_packet_sequence_id = 10,
// track_event = 11, track_descriptor = 60; TrackDescriptor uuid 1, name 2, parent_uuid 5;
// TrackEvent debug_annotations 4, type 9, track_uuid 11, name 23; DebugAnnotation name
// 10, string_value 6, int_value 4, double_value 5, bool_value 2.
func readPerfetto(t *testing.T, b []byte) perfettoFile {
	t.Helper()
	out := perfettoFile{lanes: map[uint64]string{}}
	fields := func(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64)) {
		for len(b) > 0 {
			num, typ, k := protowire.ConsumeTag(b)
			if k < 0 {
				t.Fatalf("bad tag: %v", protowire.ParseError(k))
			}
			b = b[k:]
			switch typ {
			case protowire.VarintType:
				v, k := protowire.ConsumeVarint(b)
				if k < 0 {
					t.Fatal("bad varint")
				}
				f(num, typ, nil, v)
				b = b[k:]
			case protowire.BytesType:
				v, k := protowire.ConsumeBytes(b)
				if k < 0 {
					t.Fatal("bad bytes")
				}
				f(num, typ, v, 0)
				b = b[k:]
			case protowire.Fixed64Type:
				v, k := protowire.ConsumeFixed64(b)
				if k < 0 {
					t.Fatal("bad fixed64")
				}
				f(num, typ, nil, v)
				b = b[k:]
			default:
				t.Fatalf("unexpected wire type %d", typ)
			}
		}
	}
	type open struct{ idx int }
	stacks := map[uint64][]open{}
	var last uint64
	parents := map[uint64]uint64{}
	fields(b, func(num protowire.Number, _ protowire.Type, pkt []byte, _ uint64) {
		if num != 1 {
			t.Fatalf("Trace field %d", num)
		}
		var ts, seq uint64
		var ev, td []byte
		fields(pkt, func(num protowire.Number, _ protowire.Type, v []byte, n uint64) {
			switch num {
			case 8:
				ts = n
			case 10:
				seq = n
			case 11:
				ev = v
			case 60:
				td = v
			}
		})
		if seq == 0 {
			t.Fatal("packet without trusted_packet_sequence_id")
		}
		if td != nil {
			var uuid, parent uint64
			var name string
			fields(td, func(num protowire.Number, _ protowire.Type, v []byte, n uint64) {
				switch num {
				case 1:
					uuid = n
				case 2:
					name = string(v)
				case 5:
					parent = n
				}
			})
			if parent == 0 {
				out.root = name
			} else {
				out.lanes[uuid], parents[uuid] = name, parent
			}
			return
		}
		if ev == nil {
			t.Fatal("packet with neither track_event nor track_descriptor")
		}
		if ts < last {
			t.Fatalf("timestamps go back: %d after %d", ts, last)
		}
		last = ts
		var typ, track uint64
		var name string
		ann := map[string]string{}
		fields(ev, func(num protowire.Number, _ protowire.Type, v []byte, n uint64) {
			switch num {
			case 9:
				typ = n
			case 11:
				track = n
			case 23:
				name = string(v)
			case 4:
				var an, av string
				fields(v, func(num protowire.Number, wt protowire.Type, v []byte, n uint64) {
					switch num {
					case 10:
						an = string(v)
					case 6:
						av = string(v)
					default:
						av = fmt.Sprint(n)
					}
				})
				ann[an] = av
			}
		})
		if _, ok := out.lanes[track]; !ok {
			t.Fatalf("event on undeclared track %d", track)
		}
		switch typ {
		case 1:
			if name == "" {
				t.Fatal("slice begin without a name")
			}
			out.slices = append(out.slices, slice{name: name, track: track, begin: ts, annotations: ann})
			stacks[track] = append(stacks[track], open{len(out.slices) - 1})
		case 2:
			st := stacks[track]
			if len(st) == 0 {
				t.Fatalf("slice end without a begin on track %d", track)
			}
			out.slices[st[len(st)-1].idx].end = ts
			stacks[track] = st[:len(st)-1]
		default:
			t.Fatalf("event type %d", typ)
		}
	})
	for tr, st := range stacks {
		if len(st) != 0 {
			t.Fatalf("%d slices left open on track %d", len(st), tr)
		}
	}
	return out
}

// Without sessions.record_spans nothing is recorded, and trace_export answers "failed"
// naming the key rather than a link to an empty trace.
func TestTraceExportWithoutRecordSpansFailsNamingTheKey(t *testing.T) {
	t.Parallel()
	h, _ := newHarnessCfg(t, func(c *config.Config) { c.Sessions.RecordSpans = false })
	sess := h.a.NewSession()
	trainOnce(h.a, sess)
	if got := getSpans(t, h.a, sess); len(got.Spans) != 0 || got.Dropped != 0 {
		t.Fatalf("spans recorded with sessions.record_spans off: %+v", got)
	}
	var exp struct {
		Status string  `json:"status"`
		URL    *string `json:"url"`
		Error  *string `json:"error"`
	}
	r := h.a.Do("GET", "/api/v1/sessions/"+sess+"/trace_export", nil, nil)
	r.JSON(t, &exp)
	if r.Status != http.StatusOK || exp.Status != "failed" || exp.URL != nil || exp.Error == nil || !strings.Contains(*exp.Error, "sessions.record_spans") {
		t.Fatalf("trace_export: %d %s", r.Status, r.Body)
	}
}
