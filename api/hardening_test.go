package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// A ttl_seconds a time.Duration cannot hold is a 400 naming the field, never an expiry
// in the past that makes the reaper delete the checkpoint.
func TestTTLSecondsOutOfRangeIs400(t *testing.T) {
	h := newHarness(t, "memory")
	model := h.model(h.a, h.session(h.a), 0, 4)
	for i, ttl := range []int64{9223372037, 1 << 62, -5, 0} {
		r := h.a.Do("POST", "/api/v1/save_weights", map[string]any{"model_id": model, "path": "big", "seq_id": 1 + i, "ttl_seconds": ttl}, nil)
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "ttl_seconds") {
			t.Fatalf("save_weights ttl_seconds %d: %d %s", ttl, r.Status, r.Body)
		}
		r = h.a.Do("POST", "/api/v1/save_weights_for_sampler", map[string]any{"model_id": model, "path": "big", "seq_id": 1 + i, "ttl_seconds": ttl}, nil)
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "ttl_seconds") {
			t.Fatalf("save_weights_for_sampler ttl_seconds %d: %d %s", ttl, r.Status, r.Body)
		}
	}
	var f future
	h.a.Post("/api/v1/save_weights", map[string]any{"model_id": model, "path": "keep", "seq_id": 1}, &f)
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
