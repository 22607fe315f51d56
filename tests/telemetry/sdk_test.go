package telemetry_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/telemetry"
)

// The operations SDK 0.38 added carry the contract's spans, keys and metrics: a run
// created by load_weights is traceable by its training run id from HTTP to the executor,
// the session's finish by its session id, and a refused operation counts as a failed
// future of its operation type.
func TestCreateViaLoadFinishAndRefusalsAreObservable(t *testing.T) {
	s, rec, reader := observed(t, testenv.Config(t, t.TempDir(), "memory"))
	c := testenv.NewClient(t, s.URL(), testenv.KeyA)

	se := c.NewSession()
	var f struct {
		RequestID string `json:"request_id"`
		ModelID   string `json:"model_id"`
	}
	c.Post("/api/v1/create_model", map[string]any{"session_id": se, "model_seq_id": 0, "base_model": testenv.Model,
		"lora_config": map[string]any{"rank": 4}}, &f)
	c.Result(f.RequestID, nil)
	c.Post("/api/v1/save_weights", map[string]any{"model_id": f.ModelID, "path": "p", "seq_id": 1}, &f)
	var saved struct{ Path string }
	c.Result(f.RequestID, &saved)
	c.Post("/api/v1/load_weights", map[string]any{"session_id": se, "model_seq_id": 1, "path": saved.Path, "optimizer": true}, &f)
	c.Result(f.RequestID, nil)
	loaded := f.ModelID
	if r := c.Do("POST", "/api/v1/optim_step", map[string]any{"model_id": loaded, "seq_id": 1,
		"optimizer_params": map[string]any{"type": "dimuon", "learning_rate": 1e-3}}, nil); r.Status != 400 {
		t.Fatalf("dimuon step: %d %s", r.Status, r.Body)
	}
	c.Post("/api/v1/sessions/"+se+"/finish", map[string]any{"reason": map[string]any{"type": "success"}}, nil)

	names := map[string]bool{}
	for _, sp := range rec.Ended() {
		at := attrs(sp)
		switch {
		case at[telemetry.AttrTrainingRunID] == loaded:
			names[sp.Name()] = true
			if at[telemetry.AttrSessionID] != "" && at[telemetry.AttrSessionID] != se {
				t.Errorf("span %s of the loaded run carries session %s", sp.Name(), at[telemetry.AttrSessionID])
			}
			if sp.Name() == telemetry.SpanFutureExecute && at[telemetry.AttrOperationType] != telemetry.OpLoadWeights {
				t.Errorf("the load's future has operation type %q", at[telemetry.AttrOperationType])
			}
		case sp.Name() == "POST /api/v1/sessions/{session_id}/finish":
			if at[telemetry.AttrSessionID] != se {
				t.Errorf("finish span without the session id: %v", at)
			}
			names[sp.Name()] = true
		}
	}
	for _, want := range []string{"POST /api/v1/load_weights", telemetry.SpanFutureExecute, telemetry.SpanTCLoadCheckpoint,
		telemetry.SpanHFLoadState, "POST /api/v1/optim_step", "POST /api/v1/sessions/{session_id}/finish"} {
		if !names[want] {
			t.Errorf("no %s span found by the loaded run's id (or the session's, for finish); have %v", want, names)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	refusedCounted := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != telemetry.MetricFuturesCompleted || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				st, _ := dp.Attributes.Value(attribute.Key(telemetry.MAttrStatus))
				op, _ := dp.Attributes.Value(attribute.Key(telemetry.MAttrOperationType))
				if st.AsString() == "failed" && op.AsString() == telemetry.OpOptimStep && dp.Value >= 1 {
					refusedCounted = true
				}
			}
		}
	}
	if !refusedCounted {
		t.Error("the refused optim_step is not a failed optim_step in tuft.futures.completed")
	}
}
