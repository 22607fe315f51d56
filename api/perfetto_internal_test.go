package api

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tuft-go/tuft/service"
)

// perfettoVenv is the cached venv with Perfetto's Python package (scripts/setup.sh).
func perfettoVenv() string {
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "tuft", "venv-perfetto-0.59.1", "bin", "python")
}

// overlappingSpans are a session's spans as concurrency makes them: nested ones, two
// requests overlapping without nesting, a child outliving its parent (an asynchronous
// execution), equal start times, an error, and attributes of every kind.
func overlappingSpans() []service.SpanRecord {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sp := func(id, parent, name string, b, e int, attrs map[string]any) service.SpanRecord {
		if attrs == nil {
			attrs = map[string]any{}
		}
		return service.SpanRecord{TraceID: "0123456789abcdef0123456789abcdef", SpanID: id, ParentSpanID: parent, Name: name,
			Start: at(b), End: at(e), Status: "ok", Attributes: attrs}
	}
	spans := []service.SpanRecord{
		sp("a000000000000001", "", "POST /api/v1/forward_backward", 0, 10, map[string]any{"tuft.training_run_id": "s:train:0", "http.response.status_code": int64(200)}),
		sp("a000000000000002", "a000000000000001", "future_store.execute_operation", 5, 40, map[string]any{"tuft.queue_wait_ms": 1.25}),
		sp("a000000000000003", "a000000000000002", "training_controller.run_forward_backward", 6, 39, map[string]any{"tuft.backward": true}),
		sp("a000000000000004", "", "POST /api/v1/optim_step", 8, 20, nil),  // overlaps the first, not nested
		sp("a000000000000005", "a000000000000004", "store.SET", 8, 9, nil), // starts with its parent
		sp("a000000000000006", "", "POST /api/v1/asample", 41, 41, nil),    // zero length
		sp("a000000000000007", "", "sampling_controller.run_sample", 45, 50, map[string]any{"tuft.has_lora": false, "tags": []string{"x"}}),
	}
	spans[6].Status, spans[6].Error = "error", "boom"
	return spans
}

// The trace reads with Perfetto's own protobuf schema (the perfetto package's
// perfetto_trace_pb2): one slice per span with its name, times and annotations, each
// track's slices properly nested however the spans overlap.
func TestPerfettoTraceReadsWithPerfettosSchema(t *testing.T) {
	py := perfettoVenv()
	if _, err := os.Stat(py); err != nil {
		t.Skipf("no venv with the perfetto package at %s (scripts/setup.sh makes it): %v", py, err)
	}
	spans := overlappingSpans()
	file := filepath.Join(t.TempDir(), "s.pftrace")
	if err := os.WriteFile(file, perfettoTrace("sess-1", spans), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, "testdata/perfetto_read.py", file).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("perfetto_read.py: %v: %s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var got struct {
		Tracks map[string]struct {
			Name   string `json:"name"`
			Parent uint64 `json:"parent"`
		} `json:"tracks"`
		Slices []struct {
			Name        string         `json:"name"`
			Track       uint64         `json:"track"`
			Begin       uint64         `json:"begin"`
			End         uint64         `json:"end"`
			Annotations map[string]any `json:"annotations"`
		} `json:"slices"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Tracks["1"].Name != "session sess-1" || got.Tracks["1"].Parent != 0 || len(got.Tracks) < 3 {
		t.Fatalf("tracks: %+v (the overlapping requests need two lanes at least)", got.Tracks)
	}
	if len(got.Slices) != len(spans) {
		t.Fatalf("%d slices for %d spans", len(got.Slices), len(spans))
	}
	bySpan := map[string]int{}
	for i, sl := range got.Slices {
		bySpan[sl.Annotations["span_id"].(string)] = i
		if tr := got.Tracks[itoa(sl.Track)]; tr.Parent != 1 {
			t.Fatalf("slice %s on track %d, not a lane of the session: %+v", sl.Name, sl.Track, tr)
		}
	}
	for _, sp := range spans {
		i, ok := bySpan[sp.SpanID]
		if !ok {
			t.Fatalf("span %s is no slice", sp.Name)
		}
		sl := got.Slices[i]
		if sl.Name != sp.Name || sl.Begin != uint64(sp.Start.UnixNano()) || sl.End != uint64(sp.End.UnixNano()) {
			t.Fatalf("slice %+v for span %+v", sl, sp)
		}
		if sl.Annotations["status"] != sp.Status || sl.Annotations["trace_id"] != sp.TraceID || (sp.ParentSpanID != "" && sl.Annotations["parent_span_id"] != sp.ParentSpanID) {
			t.Fatalf("slice %s annotations %v", sl.Name, sl.Annotations)
		}
		for k, v := range sp.Attributes {
			want := v
			switch x := v.(type) {
			case int64:
				want = float64(x) // JSON numbers
			case []string:
				want = "[x]" // a list is written as its text
			}
			if sl.Annotations[k] != want {
				t.Fatalf("slice %s annotation %s = %#v, want %#v", sl.Name, k, sl.Annotations[k], want)
			}
		}
	}
	if got.Slices[bySpan["a000000000000007"]].Annotations["error"] != "boom" {
		t.Fatalf("the error is not on its slice: %v", got.Slices[bySpan["a000000000000007"]].Annotations)
	}
}

func itoa(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// assignLanes puts a child under its parent, overlapping trees on different lanes, and reuses a free lane.
func TestAssignLanesKeepsEachLaneNested(t *testing.T) {
	t.Parallel()
	spans := overlappingSpans()
	lanes := assignLanes(spans)
	if lanes[1] != lanes[2] || lanes[4] != lanes[3] {
		t.Fatalf("a child is not under its parent: %v", lanes)
	}
	if lanes[0] == lanes[1] {
		t.Fatalf("an execution that outlives its request is nested under it: %v", lanes)
	}
	if lanes[3] == lanes[0] || lanes[3] == lanes[1] {
		t.Fatalf("overlapping requests share a lane: %v", lanes)
	}
	if lanes[5] != lanes[0] || lanes[6] != lanes[0] {
		t.Fatalf("a lane is not reused once free: %v", lanes)
	}
}
