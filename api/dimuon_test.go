package api_test

import (
	"strings"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
)

// Dimuon through the API: create_model's optimizer_config (and create-via-load's)
// selects it and get_info / weights_info echo it; optim_step takes its optimizer_params
// and runs Dimuon (the other family's parameters are a 400 naming both); its momentum
// travels with training checkpoints, so a resumed run continues exactly.
func TestDimuonThroughTheAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sess := h.session(h.a)
	dimuon := map[string]any{"type": "dimuon", "version": 1}
	create := func(seq int) string {
		var f future
		h.a.Post("/api/v1/create_model", map[string]any{"session_id": sess, "model_seq_id": seq, "base_model": testenv.Model,
			"lora_config": map[string]any{"rank": 4, "seed": 7}, "optimizer_config": dimuon}, &f)
		h.a.Result(f.RequestID, nil)
		return f.ModelID
	}
	model := create(1)
	var info infoJSON
	h.a.Post("/api/v1/get_info", map[string]any{"model_id": model}, &info)
	if info.OptimizerConfig["type"] != "dimuon" || info.OptimizerConfig["version"] != 1.0 {
		t.Fatalf("get_info optimizer_config: %+v", info.OptimizerConfig)
	}
	seqs := map[string]int{} // per run; each operation, refused or not, uses one
	do := func(model string, path string, body map[string]any) *testenv.Response {
		seqs[model]++
		body["model_id"], body["seq_id"] = model, seqs[model]
		return h.a.Do("POST", path, body, nil)
	}
	result := func(r *testenv.Response, out any) {
		t.Helper()
		var f future
		r.JSON(t, &f)
		h.a.Result(f.RequestID, out)
	}
	dimuonStep := map[string]any{"type": "dimuon", "learning_rate": 0.02, "grad_clip_norm": 1, "beta1": 0.9}
	train := func(model string) float64 {
		t.Helper()
		r := do(model, "/api/v1/forward_backward", map[string]any{"forward_backward_input": map[string]any{"data": []any{datum(3, 12)}, "loss_fn": "cross_entropy"}})
		var f future
		r.JSON(t, &f)
		loss := lossOf(t, h.a.Wait(f.RequestID, ""))
		var out struct {
			Metrics map[string]float64 `json:"metrics"`
		}
		result(do(model, "/api/v1/optim_step", map[string]any{"optimizer_params": dimuonStep}), &out)
		if out.Metrics["learning_rate:max"] != 0.02 {
			t.Fatalf("dimuon step metrics: %v", out.Metrics)
		}
		return loss
	}
	var losses []float64
	for i := 0; i < 4; i++ {
		losses = append(losses, train(model))
	}
	if !(losses[3] < losses[0]) {
		t.Fatalf("dimuon did not train: %v", losses)
	}
	// The other family's parameters name both families; the refusal settles its seq_id.
	for _, params := range []map[string]any{
		{"adam_params": map[string]any{"learning_rate": 1e-3}},
		{"optimizer_params": map[string]any{"type": "adamw", "learning_rate": 1e-3}},
	} {
		if r := do(model, "/api/v1/optim_step", params); r.Status != 400 || !strings.Contains(string(r.Body), "adamw") ||
			!strings.Contains(string(r.Body), "dimuon") {
			t.Fatalf("adam on a dimuon run: %d %s", r.Status, r.Body)
		}
	}
	for _, bad := range []struct {
		p    map[string]any
		want string
	}{
		{map[string]any{"type": "dimuon", "learning_rate": -1}, "learning_rate"},
		{map[string]any{"type": "dimuon", "learning_rate": 0.1, "beta1": 1}, "beta1"},
		{map[string]any{"type": "dimuon", "learning_rate": 0.1, "weight_decay": 0.1}, "optimizer_params.weight_decay"},
	} {
		if r := do(model, "/api/v1/optim_step", map[string]any{"optimizer_params": bad.p}); r.Status != 400 || !strings.Contains(string(r.Body), bad.want) {
			t.Fatalf("optimizer_params %v: %d %s, want 400 naming %s", bad.p, r.Status, r.Body, bad.want)
		}
	}
	var saved struct{ Path string }
	result(do(model, "/api/v1/save_weights", map[string]any{"path": "dm"}), &saved)
	var wi struct {
		OptimizerConfig map[string]any `json:"optimizer_config"`
	}
	h.a.Post("/api/v1/weights_info", map[string]any{"tinker_path": saved.Path}, &wi)
	if wi.OptimizerConfig["type"] != "dimuon" || wi.OptimizerConfig["version"] != 1.0 {
		t.Fatalf("weights_info optimizer_config: %+v", wi.OptimizerConfig)
	}

	// Resume with the optimizer (create-via-load): the momentum comes back, so the
	// resumed run and the original take the same next steps.
	load := func(mseq int, optimizer bool, cfg any) *testenv.Response {
		body := map[string]any{"session_id": sess, "model_seq_id": mseq, "path": saved.Path, "optimizer": optimizer, "type": "load_weights"}
		if cfg != nil {
			body["optimizer_config"] = cfg
		}
		return h.a.Do("POST", "/api/v1/load_weights", body, nil)
	}
	r := load(2, true, nil)
	var lf future
	r.JSON(t, &lf)
	h.a.Result(lf.RequestID, nil)
	resumed := lf.ModelID
	h.a.Post("/api/v1/get_info", map[string]any{"model_id": resumed}, &info)
	if info.OptimizerConfig["type"] != "dimuon" {
		t.Fatalf("resumed run's optimizer: %+v", info.OptimizerConfig)
	}
	for i := 0; i < 2; i++ {
		a, b := train(model), train(resumed)
		if a != b {
			t.Fatalf("step %d after resume: original loss %v, resumed %v", i, a, b)
		}
	}
	// Resuming Dimuon state as AdamW is refused naming both; weights only may switch.
	if r := load(3, true, map[string]any{"type": "adamw"}); r.Status != 400 || !strings.Contains(string(r.Body), "adamw") || !strings.Contains(string(r.Body), "dimuon") {
		t.Fatalf("dimuon state as adamw: %d %s", r.Status, r.Body)
	}
	r = load(4, false, map[string]any{"type": "adamw"})
	r.JSON(t, &lf)
	h.a.Result(lf.RequestID, nil)
	h.a.Post("/api/v1/get_info", map[string]any{"model_id": lf.ModelID}, &info)
	if info.OptimizerConfig["type"] != "adamw" {
		t.Fatalf("weights-only load as adamw: %+v", info.OptimizerConfig)
	}
	// The legacy load_weights (into an existing run) refuses another family's state.
	adam := h.model(h.a, sess, 5, 4)
	if r := h.a.Do("POST", "/api/v1/load_weights", map[string]any{"model_id": adam, "seq_id": 1, "path": saved.Path, "optimizer": true}, nil); r.Status != 400 ||
		!strings.Contains(string(r.Body), "dimuon") || !strings.Contains(string(r.Body), "adamw") {
		t.Fatalf("dimuon state into an adamw run: %d %s", r.Status, r.Body)
	}
}
