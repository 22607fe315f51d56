package adversarial

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/engine/safetensors"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/store/logstore"
)

// Publish/unpublish semantics (docs/security.md):
//   - a published checkpoint can be loaded (load_weights copies its weights) and sampled
//     (create_sampling_session reads it) by every tenant; it never carries the owner's
//     unapplied gradients, and its optimizer state stays the owner's: another tenant
//     loading it with the optimizer is a 400;
//   - unpublishing (or deleting) stops every sampler another tenant opened from it, at
//     once and after a restart (also one that missed the write that closed it); the
//     owner's own samplers are not affected; copies already loaded into other runs stay.

func TestPublishedCheckpointCarriesNoGradients(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	s := testenv.Start(t, cfg)
	a, b := newTenant(t, s.URL(), testenv.KeyA), newTenant(t, s.URL(), testenv.KeyB)
	owner := a.model(a.session(), 0)
	a.c.Result(a.fb(owner, 1), nil) // the owner's batch: gradients pending, not applied
	var saved struct{ Path string }
	a.c.Result(a.submit("/api/v1/save_weights", map[string]any{"model_id": owner, "path": "pub", "seq_id": 2}), &saved)
	if r := a.c.Do("POST", "/api/v1/training_runs/"+owner+"/checkpoints/weights/pub/publish", nil, nil); r.Status != http.StatusNoContent {
		t.Fatalf("publish: %d %s", r.Status, r.Body)
	}
	f, err := safetensors.ReadFile(filepath.Join(cfg.CheckpointDir, owner, "weights", "pub", "optimizer.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range f.Tensors {
		if strings.Contains(x.Name, "grad") {
			t.Fatalf("the published checkpoint holds %s", x.Name)
		}
	}
	// Another tenant loads its weights only (with the optimizer is a 400: the optimizer
	// state is the owner's, TestReaderOfAPublishedCheckpointGetsNoOptimizerState), and
	// its next step sees no gradient of the owner's batch.
	other := b.model(b.session(), 0)
	if r := b.c.Do("POST", "/api/v1/load_weights", map[string]any{"model_id": other, "path": saved.Path, "optimizer": true, "seq_id": 1}, nil); r.Status != http.StatusBadRequest {
		t.Fatalf("another tenant loaded the owner's optimizer state: %d %s", r.Status, r.Body)
	}
	b.c.Result(b.submit("/api/v1/load_weights", map[string]any{"model_id": other, "path": saved.Path, "optimizer": false, "seq_id": 2}), nil)
	var res struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	b.c.Result(b.submit("/api/v1/optim_step", map[string]any{"model_id": other, "seq_id": 3, "adam_params": map[string]any{"learning_rate": 0}}), &res)
	if g := res.Metrics["grad_norm:max"]; g != 0 {
		t.Fatalf("another tenant read the gradient norm of the owner's batch: %v", g)
	}
	a.c.Result(a.optim(owner, 3, 1e-3), &res)
	if res.Metrics["grad_norm:max"] <= 0 {
		t.Fatalf("the owner's own pending gradients were lost: %v", res.Metrics)
	}
}

func sample(tn *tenant, sampler string, seq int) *testenv.Response {
	return tn.c.Do("POST", "/api/v1/asample", map[string]any{"sampling_session_id": sampler, "seq_id": seq, "num_samples": 1,
		"prompt": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": tokens(1, 4)}}}, "sampling_params": map[string]any{"max_tokens": 2}}, nil)
}

func open(tn *tenant, sess, path string, seq int) (string, int) {
	r := tn.c.Do("POST", "/api/v1/create_sampling_session", map[string]any{"session_id": sess, "sampling_session_seq_id": seq, "model_path": path}, nil)
	var ss struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	if r.Status == 200 {
		_ = json.Unmarshal(r.Body, &ss)
	}
	return ss.SamplingSessionID, r.Status
}

func TestUnpublishStopsOtherTenantsSamplers(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "embedded")
	s := testenv.Start(t, cfg)
	a, b := newTenant(t, s.URL(), testenv.KeyA), newTenant(t, s.URL(), testenv.KeyB)
	sessA, sessB := a.session(), b.session()
	owner := a.model(sessA, 0)
	paths := map[string]string{}
	for i, name := range []string{"s1", "s2"} {
		var saved struct{ Path string }
		a.c.Result(a.submit("/api/v1/save_weights_for_sampler", map[string]any{"model_id": owner, "path": name, "seq_id": 1 + i}), &saved)
		paths[name] = saved.Path
	}
	ck := func(name, action string) string {
		return "/api/v1/training_runs/" + owner + "/checkpoints/sampler_weights/" + name + action
	}
	if _, st := open(b, sessB, paths["s1"], 0); st != http.StatusNotFound {
		t.Fatalf("another tenant opened an unpublished checkpoint: %d", st)
	}
	for _, n := range []string{"s1", "s2"} {
		a.c.Do("POST", ck(n, "/publish"), nil, nil)
	}
	smB1, st := open(b, sessB, paths["s1"], 1)
	if st != 200 {
		t.Fatalf("open a published checkpoint: %d", st)
	}
	smB2, _ := open(b, sessB, paths["s2"], 2)
	smA, _ := open(a, sessA, paths["s1"], 1)
	if r := sample(b, smB1, 0); r.Status != 200 {
		t.Fatalf("sample a published checkpoint: %d %s", r.Status, r.Body)
	}
	a.c.Do("DELETE", ck("s1", "/publish"), nil, nil)
	if r := sample(b, smB1, 1); r.Status != http.StatusNotFound || !strings.Contains(string(r.Body), "no longer published") {
		t.Fatalf("sample after unpublish: %d %s", r.Status, r.Body)
	}
	if _, st := open(b, sessB, paths["s1"], 3); st != http.StatusNotFound {
		t.Fatalf("open after unpublish: %d", st)
	}
	if r := sample(a, smA, 0); r.Status != 200 {
		t.Fatalf("the owner's sampler after unpublish: %d %s", r.Status, r.Body)
	}
	if r := sample(b, smB2, 0); r.Status != 200 {
		t.Fatalf("a sampler of a still-published checkpoint: %d %s", r.Status, r.Body)
	}

	// s2 is unpublished in the store only, as if the server died before closing B's
	// sampler: the restart closes it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	st2, err := logstore.Open(cfg.Persistence.Path, cfg.Persistence.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	key := "ckpt/" + owner + "/sampler/s2"
	raw, err := st2.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	_ = json.Unmarshal(raw, &rec)
	rec["public"] = false
	raw, _ = json.Marshal(rec)
	if err := st2.Set(ctx, key, raw, 0); err != nil {
		t.Fatal(err)
	}
	st2.Close()

	s = testenv.Start(t, cfg)
	a, b = newTenant(t, s.URL(), testenv.KeyA), newTenant(t, s.URL(), testenv.KeyB)
	a.c.Post("/api/v1/session_heartbeat", map[string]any{"session_id": sessA}, nil)
	b.c.Post("/api/v1/session_heartbeat", map[string]any{"session_id": sessB}, nil)
	for _, sm := range []string{smB1, smB2} {
		if r := sample(b, sm, 5); r.Status != http.StatusNotFound {
			t.Fatalf("B's sampler %s after the restart: %d %s", sm, r.Status, r.Body)
		}
	}
	if r := sample(a, smA, 5); r.Status != 200 {
		t.Fatalf("the owner's sampler after the restart: %d %s", r.Status, r.Body)
	}
	// Deleting a published checkpoint stops other tenants' samplers too.
	a.c.Do("POST", ck("s1", "/publish"), nil, nil)
	smB3, st := open(b, sessB, paths["s1"], 4)
	if st != 200 {
		t.Fatalf("open after republishing: %d", st)
	}
	a.c.Do("DELETE", ck("s1", ""), nil, nil)
	if r := sample(b, smB3, 0); r.Status != http.StatusNotFound {
		t.Fatalf("sample after delete: %d %s", r.Status, r.Body)
	}
}
