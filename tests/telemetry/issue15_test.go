package telemetry_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/telemetry"
)

// The features of issue 15 carry their spans, keys and metrics: the optimizer family on
// the training spans, the sampler kind on inflight saves, the export's span and
// checkpoint metrics (type external), and the spans of cancel_future,
// join_sampling_session and copy_weights; retrieve_futures' HTTP span carries the
// sampling session.
func TestIssue15FeaturesAreObservable(t *testing.T) {
	s, rec, reader := observed(t, testenv.Config(t, t.TempDir(), "memory"))
	c := testenv.NewClient(t, s.URL(), testenv.KeyA)

	se := c.NewSession()
	var f struct {
		RequestID string `json:"request_id"`
		ModelID   string `json:"model_id"`
	}
	c.Post("/api/v1/create_model", map[string]any{"session_id": se, "model_seq_id": 0, "base_model": testenv.Model,
		"lora_config": map[string]any{"rank": 4}, "optimizer_config": map[string]any{"type": "dimuon", "version": 1}}, &f)
	c.Result(f.RequestID, nil)
	model := f.ModelID
	seq := 0
	op := func(path string, body map[string]any, out any) {
		t.Helper()
		seq++
		body["model_id"], body["seq_id"] = model, seq
		c.Post(path, body, &f)
		c.Result(f.RequestID, out)
	}
	op("/api/v1/forward_backward", map[string]any{"forward_backward_input": map[string]any{"loss_fn": "cross_entropy",
		"data": []any{map[string]any{"model_input": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{1, 2, 3}}}},
			"loss_fn_inputs": map[string]any{"target_tokens": map[string]any{"data": []int{2, 3, 4}, "dtype": "int64", "shape": []int{3}}}}}}}, nil)
	op("/api/v1/optim_step", map[string]any{"optimizer_params": map[string]any{"type": "dimuon", "learning_rate": 0.01}}, nil)
	var inflight struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	op("/api/v1/save_weights_for_sampler", map[string]any{"sampling_session_seq_id": 0, "kind": "inflight"}, &inflight)
	var exported struct{ Path string }
	op("/api/v1/save_weights_external", map[string]any{"path": "x", "age_encryption_recipients": []string{"age1070jn9yhxjwdra2qutp6eh6dvgqr47qk3fl77exmms9v0humwywq7ld4l8"}}, &exported)
	var saved struct{ Path string }
	op("/api/v1/save_weights", map[string]any{"path": "s"}, &saved)
	var cp struct {
		TinkerPath string `json:"tinker_path"`
	}
	c.Post("/api/v1/copy_weights", map[string]any{"source_path": saved.Path, "destination_project_id": "alice"}, &cp)
	var join struct {
		ClientCounter int64 `json:"client_counter"`
	}
	c.Post("/api/v1/join_sampling_session", map[string]any{"sampling_session_id": inflight.SamplingSessionID}, &join)
	var sf struct {
		RequestID string `json:"request_id"`
	}
	c.Post("/api/v1/asample", map[string]any{"sampling_session_id": inflight.SamplingSessionID, "seq_id": 1, "num_samples": 1,
		"prompt":          map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{1, 2}}}},
		"sampling_params": map[string]any{"max_tokens": 2}}, &sf)
	c.Post("/api/v1/cancel_future", map[string]any{"request_id": sf.RequestID}, nil)
	c.Post("/api/v1/retrieve_futures", map[string]any{"target": map[string]any{"sampling_session_id": inflight.SamplingSessionID},
		"prev_cursor": 0, "timeout": 0}, nil)

	type want struct {
		name  string
		attrs map[string]string
	}
	wants := []want{
		{telemetry.SpanTCCreateModel, map[string]string{telemetry.AttrOptimizerFamily: "dimuon", telemetry.AttrTrainingRunID: model}},
		{telemetry.SpanTCRunOptimStep, map[string]string{telemetry.AttrOptimizerFamily: "dimuon", telemetry.AttrTrainingRunID: model}},
		{telemetry.SpanTBOptimStep, map[string]string{telemetry.AttrOptimizerFamily: "dimuon"}},
		{telemetry.SpanHFOptimStep, map[string]string{telemetry.AttrOptimizerFamily: "dimuon"}},
		{telemetry.SpanTCSaveCheckpoint, map[string]string{telemetry.AttrSamplerKind: "inflight", telemetry.AttrCheckpointType: "sampler"}},
		{telemetry.SpanTCSaveCheckpoint, map[string]string{telemetry.AttrCheckpointType: "external", telemetry.AttrEncrypted: "true",
			telemetry.AttrCheckpointPath: exported.Path, telemetry.AttrOperationType: telemetry.OpSaveWeightsExternal, telemetry.AttrTrainingRunID: model}},
		{telemetry.SpanTCCopyCheckpoint, map[string]string{telemetry.AttrCheckpointPath: cp.TinkerPath, telemetry.AttrOperationType: telemetry.OpCopyWeights}},
		{telemetry.SpanSCJoinSamplingSession, map[string]string{telemetry.AttrClientCounter: "1", telemetry.AttrSamplingSessionID: inflight.SamplingSessionID}},
		{telemetry.SpanSCCancelSample, map[string]string{telemetry.AttrRequestID: sf.RequestID}},
		{"POST /api/v1/retrieve_futures", map[string]string{telemetry.AttrSamplingSessionID: inflight.SamplingSessionID}},
	}
	spans := rec.Ended()
	for _, w := range wants {
		found := false
		for _, sp := range spans {
			if sp.Name() != w.name {
				continue
			}
			at := attrs(sp)
			ok := true
			for k, v := range w.attrs {
				if at[k] != v {
					ok = false
				}
			}
			found = found || ok
		}
		if !found {
			t.Errorf("no %s span with %v", w.name, w.attrs)
		}
	}
	for _, sp := range spans {
		if sp.Name() == telemetry.SpanSCCancelSample && attrs(sp)[telemetry.AttrCancelOutcome] == "" {
			t.Errorf("cancel span without %s", telemetry.AttrCancelOutcome)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	external := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == telemetry.MetricTrainingCheckpointsSaved {
				for _, dp := range sum.DataPoints {
					if v, _ := dp.Attributes.Value(attribute.Key(telemetry.MAttrCheckpointType)); v.AsString() == "external" && dp.Value == 1 {
						external = true
					}
				}
			}
		}
	}
	if !external {
		t.Errorf("%s has no checkpoint_type=external point", telemetry.MetricTrainingCheckpointsSaved)
	}
}
