package telemetry_test

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
	"github.com/tuft-go/tuft/telemetry"
)

// The console's data routes (issue 27) are observable: each has its HTTP server span,
// the tokens trained and sampled are counted in tuft.usage.tokens by kind, and an open
// metric stream shows in tuft.training.metric_streams.active.
func TestConsoleDataIsObservable(t *testing.T) {
	const opKey = "tml-operator-telemetry-0123456789"
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Auth.OperatorKeySHA256 = testenv.HashKey(opKey)
	s, rec, reader := observed(t, cfg)
	c := testenv.NewClient(t, s.URL(), testenv.KeyA)
	model := c.NewTrainingRun(c.NewSession(), map[string]any{"rank": 4})
	var f struct {
		RequestID string `json:"request_id"`
	}
	c.Post("/api/v1/forward_backward", map[string]any{"model_id": model, "seq_id": 1, "forward_backward_input": map[string]any{"loss_fn": "cross_entropy",
		"data": []any{map[string]any{"model_input": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{1, 2, 3}}}},
			"loss_fn_inputs": map[string]any{"target_tokens": map[string]any{"data": []int{2, 3, 4}, "dtype": "int64", "shape": []int{3}}}}}}}, &f)
	c.Result(f.RequestID, nil)

	req, _ := http.NewRequest("GET", s.URL()+"/api/v1/training_runs/"+model+"/metrics/stream", nil)
	req.Header.Set("X-API-Key", testenv.KeyA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for { // up to the first point
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "event: point") {
			break
		}
	}
	streams := func() int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == telemetry.MetricMetricStreamsActive {
					var n int64
					for _, dp := range sum.DataPoints {
						n += dp.Value
					}
					return n
				}
			}
		}
		return -1
	}
	if n := streams(); n != 1 {
		t.Fatalf("%s = %d with one stream open", telemetry.MetricMetricStreamsActive, n)
	}
	resp.Body.Close()

	hour := time.Now().UTC().Truncate(time.Hour)
	q := url.Values{"starting_on": {hour.Format(time.RFC3339)}, "ending_before": {hour.Add(time.Hour).Format(time.RFC3339)}}
	for _, p := range []string{"/api/v1/training_runs/" + model + "/metrics", "/api/v1/usage?days=1", "/api/v1/billing/usage/events?" + q.Encode()} {
		if r := c.Do("GET", p, nil, nil); r.Status != 200 {
			t.Fatalf("%s: %d %s", p, r.Status, r.Body)
		}
	}
	if r := testenv.NewClient(t, s.URL(), opKey).Do("GET", "/api/v1/admin/overview", nil, nil); r.Status != 200 {
		t.Fatalf("overview: %d %s", r.Status, r.Body)
	}

	spansAndStreams := func() []string {
		var missing []string
		names := map[string]bool{}
		for _, sp := range rec.Ended() {
			names[sp.Name()] = true
		}
		for _, want := range []string{"GET /api/v1/training_runs/{run_id}/metrics", "GET /api/v1/training_runs/{run_id}/metrics/stream",
			"GET /api/v1/usage", "GET /api/v1/billing/usage/events", "GET /api/v1/admin/overview"} {
			if !names[want] {
				missing = append(missing, want)
			}
		}
		if n := streams(); n != 0 {
			missing = append(missing, "the stream's end in "+telemetry.MetricMetricStreamsActive)
		}
		return missing
	}
	// The stream's span ends once its handler sees the client gone.
	var missing []string
	check.Eventually(t, 10*time.Second, "the console routes' spans and the stream's end", func() bool {
		missing = spansAndStreams()
		return len(missing) == 0
	})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	trained := int64(0)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == telemetry.MetricUsageTokens {
				for _, dp := range sum.DataPoints {
					k, _ := dp.Attributes.Value(attribute.Key(telemetry.MAttrKind))
					b, _ := dp.Attributes.Value(attribute.Key(telemetry.MAttrBaseModel))
					if k.AsString() == "training" && b.AsString() == testenv.Model {
						trained += dp.Value
					}
				}
			}
		}
	}
	if trained != 3 {
		t.Fatalf("%s{kind=training} = %d, want 3", telemetry.MetricUsageTokens, trained)
	}
}
