package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/engine/safetensors"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/store/logstore"
)

// Publish/unpublish semantics (docs/security.md):
//   - a published checkpoint can be loaded (load_weights copies it) and sampled
//     (create_sampling_session reads it) by every tenant; it never carries the owner's
//     unapplied gradients;
//   - unpublishing (or deleting) stops every sampler another tenant opened from it, at
//     once and after a restart; copies already loaded into other runs stay theirs.

func TestPublishedCheckpointCarriesNoGradients(t *testing.T) {
	h, cfg := newHarnessCfg(t, nil)
	owner := h.model(h.a, h.session(h.a), 0, 4)
	var f future
	h.a.Post("/api/v1/forward_backward", fwdbwdJSON(owner, 1, datum(1, 16), datum(40, 16)), &f)
	h.a.Result(f.RequestID, nil) // gradients of the owner's batch, not applied
	h.a.Post("/api/v1/save_weights", map[string]any{"model_id": owner, "path": "pub", "seq_id": 2}, &f)
	var saved struct{ Path string }
	h.a.Result(f.RequestID, &saved)
	if r := h.a.Do("POST", "/api/v1/training_runs/"+owner+"/checkpoints/weights/pub/publish", nil, nil); r.Status != http.StatusNoContent {
		t.Fatalf("publish: %d %s", r.Status, r.Body)
	}
	// Nothing named like a gradient is in the files.
	st, err := safetensors.ReadFile(filepath.Join(cfg.CheckpointDir, owner, "weights", "pub", "optimizer.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range st.Tensors {
		if strings.Contains(x.Name, "grad") {
			t.Fatalf("the checkpoint holds %s", x.Name)
		}
	}
	// Another tenant loads it with the optimizer state: its next step sees no gradient.
	other := h.model(h.b, h.session(h.b), 0, 4)
	h.b.Post("/api/v1/load_weights", map[string]any{"model_id": other, "path": saved.Path, "optimizer": true, "seq_id": 1}, &f)
	h.b.Result(f.RequestID, nil)
	h.b.Post("/api/v1/optim_step", adam(other, 2, map[string]any{"learning_rate": 0}), &f)
	var res struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	h.b.Result(f.RequestID, &res)
	if g := res.Metrics["grad_norm:max"]; g != 0 {
		t.Fatalf("another tenant read the gradient norm of the owner's batch: %v", g)
	}
	// The owner's own run still holds (and applies) its gradients.
	h.a.Post("/api/v1/optim_step", adam(owner, 3, map[string]any{"learning_rate": 1e-3}), &f)
	h.a.Result(f.RequestID, &res)
	if res.Metrics["grad_norm:max"] <= 0 {
		t.Fatalf("the owner's pending gradients were lost: %v", res.Metrics)
	}
}

// sampleOn asks for one sample on a sampling session and returns the HTTP status of the
// submission.
func sampleOn(t *testing.T, c *testenv.Client, sampler string, seq int) *testenv.Response {
	t.Helper()
	return c.Do("POST", "/api/v1/asample", map[string]any{"sampling_session_id": sampler, "seq_id": seq, "num_samples": 1,
		"prompt": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": tokens(1, 4)}}}, "sampling_params": map[string]any{"max_tokens": 2}}, nil)
}

func openSampler(t *testing.T, c *testenv.Client, sess, path string, seq int) (string, *testenv.Response) {
	t.Helper()
	r := c.Do("POST", "/api/v1/create_sampling_session", map[string]any{"session_id": sess, "sampling_session_seq_id": seq, "model_path": path}, nil)
	var ss struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	if r.Status == 200 {
		r.JSON(t, &ss)
	}
	return ss.SamplingSessionID, r
}

func TestUnpublishStopsOtherTenantsSamplers(t *testing.T) {
	dir := t.TempDir()
	cfg := testenv.Config(t, dir, "embedded")
	s := testenv.Start(t, cfg)
	h := &harness{t: t, a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	sessA, sessB := h.session(h.a), h.session(h.b)
	owner := h.model(h.a, sessA, 0, 4)
	var f future
	var saved struct{ Path string }
	for i, name := range []string{"s1", "s2"} {
		h.a.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": owner, "path": name, "seq_id": 1 + i}, &f)
		h.a.Result(f.RequestID, &saved)
	}
	path1 := strings.Replace(saved.Path, "s2", "s1", 1)
	path2 := saved.Path

	// Not published: invisible to B.
	if _, r := openSampler(t, h.b, sessB, path1, 0); r.Status != http.StatusNotFound {
		t.Fatalf("unpublished checkpoint: %d %s", r.Status, r.Body)
	}
	for _, n := range []string{"s1", "s2"} {
		h.a.Do("POST", "/api/v1/training_runs/"+owner+"/checkpoints/sampler_weights/"+n+"/publish", nil, nil)
	}
	smB1, r := openSampler(t, h.b, sessB, path1, 1)
	if r.Status != 200 {
		t.Fatalf("published checkpoint: %d %s", r.Status, r.Body)
	}
	smB2, _ := openSampler(t, h.b, sessB, path2, 2)
	smA, _ := openSampler(t, h.a, sessA, path1, 1) // the owner's own sampler
	if r := sampleOn(t, h.b, smB1, 0); r.Status != 200 {
		t.Fatalf("sample on a published checkpoint: %d %s", r.Status, r.Body)
	}
	// Unpublishing stops B's sampler at once; the owner's keeps working.
	h.a.Do("DELETE", "/api/v1/training_runs/"+owner+"/checkpoints/sampler_weights/s1/publish", nil, nil)
	if r := sampleOn(t, h.b, smB1, 1); r.Status != http.StatusNotFound || !strings.Contains(string(r.Body), "no longer") {
		t.Fatalf("sample after unpublish: %d %s", r.Status, r.Body)
	}
	if _, r := openSampler(t, h.b, sessB, path1, 3); r.Status != http.StatusNotFound {
		t.Fatalf("open after unpublish: %d %s", r.Status, r.Body)
	}
	if r := sampleOn(t, h.a, smA, 0); r.Status != 200 {
		t.Fatalf("the owner's sampler after unpublish: %d %s", r.Status, r.Body)
	}
	if r := sampleOn(t, h.b, smB2, 0); r.Status != 200 {
		t.Fatalf("a sampler of a still-published checkpoint: %d %s", r.Status, r.Body)
	}

	// An unpublish whose sampler-closing write never reached the store (a crash right
	// after it): the restart still stops the sampler. s2 is unpublished in the store only.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := logstore.Open(cfg.Persistence.Path, cfg.Persistence.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	key := "ckpt/" + owner + "/sampler/s2"
	b, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	_ = json.Unmarshal(b, &rec)
	rec["public"] = false
	b, _ = json.Marshal(rec)
	if err := st.Set(ctx, key, b, 0); err != nil {
		t.Fatal(err)
	}
	st.Close()

	s2 := testenv.Start(t, cfg)
	h = &harness{t: t, a: testenv.NewClient(t, s2.URL(), testenv.KeyA), b: testenv.NewClient(t, s2.URL(), testenv.KeyB)}
	h.a.Post("/api/v1/session_heartbeat", map[string]any{"session_id": sessA}, nil)
	h.b.Post("/api/v1/session_heartbeat", map[string]any{"session_id": sessB}, nil)
	for _, sm := range []string{smB1, smB2} {
		if r := sampleOn(t, h.b, sm, 5); r.Status != http.StatusNotFound {
			t.Fatalf("B's sampler %s after the restart: %d %s", sm, r.Status, r.Body)
		}
	}
	if r := sampleOn(t, h.a, smA, 5); r.Status != 200 {
		t.Fatalf("the owner's sampler after the restart: %d %s", r.Status, r.Body)
	}
	// Deleting a published checkpoint stops other tenants' samplers too.
	h.a.Do("POST", "/api/v1/training_runs/"+owner+"/checkpoints/sampler_weights/s1/publish", nil, nil)
	smB3, r := openSampler(t, h.b, sessB, path1, 4)
	if r.Status != 200 {
		t.Fatalf("republished: %d %s", r.Status, r.Body)
	}
	h.a.Do("DELETE", "/api/v1/training_runs/"+owner+"/checkpoints/sampler_weights/s1", nil, nil)
	if r := sampleOn(t, h.b, smB3, 0); r.Status != http.StatusNotFound {
		t.Fatalf("sample after delete: %d %s", r.Status, r.Body)
	}
	_ = os.Remove
}
