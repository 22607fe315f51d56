package api_test

import (
	"bytes"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
)

// A ttl_seconds a time.Duration cannot hold is a 400 naming the field, never an expiry
// in the past that makes the reaper delete the checkpoint.
func TestTTLSecondsOutOfRangeIs400(t *testing.T) {
	h := newHarness(t, "memory")
	model := h.model(h.a, h.session(h.a), 0, 4)
	seq := 0 // each refusal settles its seq_id, as the SDK expects
	next := func() int { seq++; return seq }
	for _, ttl := range []int64{9223372037, 1 << 62, -5, 0} {
		r := h.a.Do("POST", "/api/v1/save_weights", map[string]any{"model_id": model, "path": "big", "seq_id": next(), "ttl_seconds": ttl}, nil)
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "ttl_seconds") {
			t.Fatalf("save_weights ttl_seconds %d: %d %s", ttl, r.Status, r.Body)
		}
		r = h.a.Do("POST", "/api/v1/save_weights_for_sampler", map[string]any{"model_id": model, "path": "big", "seq_id": next(), "ttl_seconds": ttl}, nil)
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "ttl_seconds") {
			t.Fatalf("save_weights_for_sampler ttl_seconds %d: %d %s", ttl, r.Status, r.Body)
		}
	}
	var f future
	h.a.Post("/api/v1/save_weights", map[string]any{"model_id": model, "path": "keep", "seq_id": next()}, &f)
	h.a.Result(f.RequestID, nil)
	for _, ttl := range []int64{9223372037, 1 << 62} {
		r := h.a.Do("PUT", "/api/v1/training_runs/"+model+"/checkpoints/weights/keep/ttl", map[string]any{"ttl_seconds": ttl}, nil)
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "ttl_seconds") {
			t.Fatalf("PUT ttl_seconds %d: %d %s", ttl, r.Status, r.Body)
		}
	}
	// The largest accepted TTL expires in the future.
	r := h.a.Do("PUT", "/api/v1/training_runs/"+model+"/checkpoints/weights/keep/ttl", map[string]any{"ttl_seconds": 100 * 365 * 86400}, nil)
	if r.Status != http.StatusNoContent {
		t.Fatalf("PUT the largest ttl: %d %s", r.Status, r.Body)
	}
	var ck struct {
		Checkpoints []struct {
			ExpiresAt *time.Time `json:"expires_at"`
		} `json:"checkpoints"`
	}
	h.a.Do("GET", "/api/v1/training_runs/"+model+"/checkpoints", nil, nil).JSON(t, &ck)
	if len(ck.Checkpoints) != 1 || ck.Checkpoints[0].ExpiresAt == nil || !ck.Checkpoints[0].ExpiresAt.After(time.Now().AddDate(99, 0, 0)) {
		t.Fatalf("checkpoints after the largest ttl: %+v", ck)
	}
}

// isDatum is a datum for the RL losses with the given old logprobs and advantages.
func isDatum(n int, logprob, adv float64) map[string]any {
	seq := tokens(3, n+1)
	lp, ad := make([]float64, n), make([]float64, n)
	for i := range lp {
		lp[i], ad[i] = logprob, adv
	}
	return map[string]any{
		"model_input": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": seq[:n]}}},
		"loss_fn_inputs": map[string]any{"target_tokens": map[string]any{"data": seq[1:], "dtype": "int64"},
			"logprobs": map[string]any{"data": lp, "dtype": "float32"}, "advantages": map[string]any{"data": ad, "dtype": "float32"}},
	}
}

func fb(model string, seq int, loss string, cfg map[string]any, data ...map[string]any) map[string]any {
	in := map[string]any{"data": data, "loss_fn": loss}
	if cfg != nil {
		in["loss_fn_config"] = cfg
	}
	return map[string]any{"model_id": model, "seq_id": seq, "forward_backward_input": in}
}

func adam(model string, seq int, p map[string]any) map[string]any {
	return map[string]any{"model_id": model, "seq_id": seq, "adam_params": p}
}

// probe runs a forward pass and returns its loss: the same loss twice means the weights
// did not move in between.
func lossProbe(t *testing.T, h *harness, model string, seq int) float64 {
	t.Helper()
	var f future
	h.a.Post("/api/v1/forward", map[string]any{"model_id": model, "seq_id": seq, "forward_input": map[string]any{"data": []any{datum(1, 8)}, "loss_fn": "cross_entropy"}}, &f)
	return lossOf(t, h.a.Result(f.RequestID, nil))
}

// Finite but extreme inputs are refused at the edge with a 400 that names the field and
// its allowed range; nothing is queued, so the run stays as it was.
func TestExtremeInputsAre400NamingTheRange(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	model := h.model(h.a, h.session(h.a), 0, 4)
	before := lossProbe(t, h, model, 1)
	cases := []struct {
		name, route string
		body        map[string]any
		want        []string
	}{
		{"logprobs -1e30", "/api/v1/forward_backward", fb(model, 2, "importance_sampling", nil, isDatum(8, -1e30, 1)), []string{"logprobs", "[-10000, 0.01]"}},
		{"logprobs positive", "/api/v1/forward_backward", fb(model, 3, "importance_sampling", nil, isDatum(8, 5, 1)), []string{"logprobs", "[-10000, 0.01]"}},
		{"advantages 1e30", "/api/v1/forward_backward", fb(model, 4, "ppo", nil, isDatum(8, -1, 1e30)), []string{"advantages", "[-1e+06, 1e+06]"}},
		{"dro beta 1e308", "/api/v1/forward_backward", fb(model, 5, "dro", map[string]any{"beta": 1e308}, isDatum(8, -1, 1)), []string{"beta", "[0, 100]"}},
		{"ppo clip 1e300", "/api/v1/forward_backward", fb(model, 6, "ppo", map[string]any{"clip_high_threshold": 1e300}, isDatum(8, -1, 1)), []string{"clip_high_threshold", "[0, 100]"}},
		{"learning_rate 1e39", "/api/v1/optim_step", adam(model, 7, map[string]any{"learning_rate": 1e39}), []string{"learning_rate", "[0, 10]"}},
		{"eps 1e-50", "/api/v1/optim_step", adam(model, 8, map[string]any{"learning_rate": 1e-3, "eps": 1e-50}), []string{"eps", "[1e-20, 1]"}},
		{"weight_decay 1e10", "/api/v1/optim_step", adam(model, 9, map[string]any{"learning_rate": 1e-3, "weight_decay": 1e10}), []string{"weight_decay", "[0, 10]"}},
		{"grad_clip_norm 1e300", "/api/v1/optim_step", adam(model, 10, map[string]any{"learning_rate": 1e-3, "grad_clip_norm": 1e300}), []string{"grad_clip_norm", "[0, 1e+09]"}},
		{"beta2 1", "/api/v1/optim_step", adam(model, 11, map[string]any{"learning_rate": 1e-3, "beta2": 1}), []string{"beta2", "[0, 1)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.a.Do("POST", c.route, c.body, nil)
			if r.Status != http.StatusBadRequest {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			for _, w := range c.want {
				if !strings.Contains(string(r.Body), w) {
					t.Fatalf("%s does not name %q", r.Body, w)
				}
			}
		})
	}
	// Each refusal settled its seq_id (the SDK never sends one again), so the probe
	// takes the next.
	if after := lossProbe(t, h, model, 12); after != before {
		t.Fatalf("refused requests changed the run: loss %v → %v", before, after)
	}
}

// Inputs within range can still overflow in the loss (an importance ratio of e^10000):
// the operation fails as the user's, no gradient is accumulated, and the run trains on.
func TestNonFiniteLossAccumulatesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	model := h.model(h.a, h.session(h.a), 0, 4)
	var f future
	h.a.Post("/api/v1/forward_backward", fb(model, 1, "importance_sampling", nil, isDatum(8, -10000, 1)), &f)
	r := h.a.Wait(f.RequestID, "")
	var fail struct {
		Error, Category string
	}
	r.JSON(t, &fail)
	if r.Status != 200 || fail.Category != "user" || !strings.Contains(fail.Error, "not finite") {
		t.Fatalf("overflowing loss: %d %s", r.Status, r.Body)
	}
	// optim_step: nothing accumulated, so the gradient norm is 0 and the weights finite.
	var o future
	h.a.Post("/api/v1/optim_step", adam(model, 2, map[string]any{"learning_rate": 1e-2}), &o)
	var res struct {
		Metrics map[string]*float64 `json:"metrics"`
	}
	h.a.Result(o.RequestID, &res)
	if g := res.Metrics["grad_norm:max"]; g == nil || *g != 0 {
		t.Fatalf("grad_norm after a refused forward_backward: %s", h.a.Wait(o.RequestID, "").Body)
	}
	if l := lossProbe(t, h, model, 3); math.IsNaN(l) || math.IsInf(l, 0) {
		t.Fatalf("loss %v", l)
	}
}

// An optim_step whose update would make a weight non-finite is refused and not applied:
// the saved weights before and after the refused step are the same bytes.
func TestOptimStepNeverMakesWeightsNonFinite(t *testing.T) {
	t.Parallel()
	h, cfg := newHarnessCfg(t, nil)
	model := h.model(h.a, h.session(h.a), 0, 4)
	// With no gradient, each step only multiplies the weights by 1 - lr·weight_decay =
	// -99: they overflow float32 after a few steps.
	p := map[string]any{"learning_rate": 10, "weight_decay": 10}
	refused := ""
	seq := 1
	for i := 0; i < 40 && refused == ""; i++ {
		save(t, h, model, seq, "before")
		var o future
		h.a.Post("/api/v1/optim_step", adam(model, seq+1, p), &o)
		seq += 2
		if r := h.a.Wait(o.RequestID, ""); strings.Contains(string(r.Body), `"error"`) {
			refused = string(r.Body)
		}
	}
	if !strings.Contains(refused, "non-finite") || !strings.Contains(refused, `"user"`) {
		t.Fatalf("no step was refused: %q", refused)
	}
	save(t, h, model, seq, "after")
	dir := filepath.Join(cfg.CheckpointDir, strings.ReplaceAll(model, "/", "_"), "weights")
	before, err1 := os.ReadFile(filepath.Join(dir, "before", "adapter_model.safetensors"))
	after, err2 := os.ReadFile(filepath.Join(dir, "after", "adapter_model.safetensors"))
	if err1 != nil || err2 != nil || !bytes.Equal(before, after) {
		t.Fatalf("the refused step changed the weights (%v, %v)", err1, err2)
	}
	// The run still trains.
	var f future
	h.a.Post("/api/v1/forward", map[string]any{"model_id": model, "seq_id": seq + 1, "forward_input": map[string]any{"data": []any{datum(1, 8)}, "loss_fn": "cross_entropy"}}, &f)
	if r := h.a.Wait(f.RequestID, ""); r.Status != 200 {
		t.Fatalf("forward after a refused step: %d %s", r.Status, r.Body)
	}
}

func save(t *testing.T, h *harness, model string, seq int, name string) {
	t.Helper()
	var f future
	h.a.Post("/api/v1/save_weights", map[string]any{"model_id": model, "path": name, "seq_id": seq, "overwrite": true}, &f)
	h.a.Result(f.RequestID, nil)
}

func newHarnessCfg(t *testing.T, edit func(*config.Config)) (*harness, config.Config) {
	t.Helper()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	if edit != nil {
		edit(&cfg)
	}
	s := testenv.Start(t, cfg)
	return &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}, cfg
}
