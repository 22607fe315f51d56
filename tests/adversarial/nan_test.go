package adversarial

import (
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine/safetensors"
	"github.com/tuft-go/tuft/internal/testenv"
)

// rlDatum is a datum for the RL losses with the given old logprobs and advantages.
func rlDatum(logprob, adv float64) map[string]any {
	d := datum(3, 8)
	lp, ad := make([]float64, 8), make([]float64, 8)
	for i := range lp {
		lp[i], ad[i] = logprob, adv
	}
	in := d["loss_fn_inputs"].(map[string]any)
	in["logprobs"] = map[string]any{"data": lp, "dtype": "float32"}
	in["advantages"] = map[string]any{"data": ad, "dtype": "float32"}
	return d
}

// finiteFile reports whether every tensor of a safetensors file is finite.
func finiteFile(t *testing.T, path string) bool {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range f.Tensors {
		v, err := x.Float32()
		if err != nil {
			t.Fatal(err)
		}
		for _, y := range v {
			if math.IsNaN(float64(y)) || math.IsInf(float64(y), 0) {
				return false
			}
		}
	}
	return true
}

// A tenant's extreme inputs cannot poison its run into NaN: each finding of issue 12
// (logprobs -1e30 in importance_sampling, beta 1e308 in dro, learning_rate 1e39, eps
// 1e-50) is a 400 naming the field and its range; what still overflows when computed
// (an importance ratio of e^10000, weights driven past float32) fails as the user's
// error and applies nothing; the autosave stays finite, and every result stays
// retrievable as JSON.
func TestNaNPoisoningIsRefused(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	s := testenv.Start(t, cfg)
	a := newTenant(t, s.URL(), testenv.KeyA)
	model := a.model(a.session(), 0)
	fbBody := func(seq int, loss string, conf map[string]any, d map[string]any) map[string]any {
		in := map[string]any{"data": []any{d}, "loss_fn": loss}
		if conf != nil {
			in["loss_fn_config"] = conf
		}
		return map[string]any{"model_id": model, "seq_id": seq, "forward_backward_input": in}
	}
	for _, c := range []struct {
		route string
		body  map[string]any
		want  string
	}{
		// Each refusal settles its seq_id (the SDK never sends one again), so each takes its own.
		{"/api/v1/forward_backward", fbBody(1, "importance_sampling", nil, rlDatum(-1e30, 1)), "logprobs"},
		{"/api/v1/forward_backward", fbBody(2, "dro", map[string]any{"beta": 1e308}, rlDatum(-1, 1)), "beta"},
		{"/api/v1/optim_step", map[string]any{"model_id": model, "seq_id": 3, "adam_params": map[string]any{"learning_rate": 1e39}}, "learning_rate"},
		{"/api/v1/optim_step", map[string]any{"model_id": model, "seq_id": 4, "adam_params": map[string]any{"learning_rate": 1e-3, "eps": 1e-50}}, "eps"},
	} {
		r := a.c.Do("POST", c.route, c.body, nil)
		if r.Status != http.StatusBadRequest || !contains(string(r.Body), c.want, "must be in") {
			t.Fatalf("%s %s: %d %s", c.route, c.want, r.Status, r.Body)
		}
	}
	// In range, but overflowing when computed.
	msg, cat := a.failure(a.submit("/api/v1/forward_backward", fbBody(5, "importance_sampling", nil, rlDatum(-10000, 1))))
	if cat != "user" || !strings.Contains(msg, "not finite") {
		t.Fatalf("an overflowing importance ratio: %q (%s)", msg, cat)
	}
	seq, refused := 6, ""
	for i := 0; i < 40 && refused == ""; i++ {
		refused, _ = a.failure(a.submit("/api/v1/optim_step", map[string]any{"model_id": model, "seq_id": seq,
			"adam_params": map[string]any{"learning_rate": 10, "weight_decay": 10}}))
		seq++
	}
	if !strings.Contains(refused, "non-finite") {
		t.Fatalf("weights driven past float32: %q", refused)
	}
	auto := filepath.Join(cfg.CheckpointDir, model, "_autosave")
	for _, f := range []string{"adapter_model.safetensors", "optimizer.safetensors"} {
		if !finiteFile(t, filepath.Join(auto, f)) {
			t.Fatalf("the autosave's %s holds non-finite values", f)
		}
	}
	// Every result stays retrievable as JSON, and sampling works.
	r := a.c.Wait(a.submit("/api/v1/forward_backward", map[string]any{"model_id": model, "seq_id": seq,
		"forward_input": map[string]any{"data": []any{datum(1, 8)}, "loss_fn": "cross_entropy"}}), "")
	if r.Status != 200 {
		t.Fatalf("a forward after the refusals: %d %s", r.Status, r.Body)
	}
}
