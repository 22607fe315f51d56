package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/config"
)

func sampleBody(sampler string, prompt []int, params map[string]any) map[string]any {
	return map[string]any{"sampling_session_id": sampler, "seq_id": 0, "num_samples": 1,
		"prompt": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": prompt}}}, "sampling_params": params}
}

// Sampling parameters are checked at the edge: a 400 naming the field and its range,
// before anything is queued (not a future that fails later).
func TestSamplingParametersAreCheckedAtTheEdge(t *testing.T) {
	t.Parallel()
	h, _ := newHarnessCfg(t, func(c *config.Config) { c.Limits.MaxStopStrings = 4; c.Limits.MaxStopStringBytes = 64 })
	sess := h.session(h.a)
	var ss struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	h.a.Post("/api/v1/create_sampling_session", map[string]any{"session_id": sess, "sampling_session_seq_id": 0, "base_model": "tuft/tiny"}, &ss)
	sm := ss.SamplingSessionID
	cases := []struct {
		name   string
		prompt []int
		params map[string]any
		want   []string
	}{
		{"negative temperature", []int{1, 2}, map[string]any{"max_tokens": 2, "temperature": -1}, []string{"temperature", "≥ 0"}},
		{"top_p above 1", []int{1, 2}, map[string]any{"max_tokens": 2, "top_p": 1.5}, []string{"top_p", "(0, 1]"}},
		{"top_p zero", []int{1, 2}, map[string]any{"max_tokens": 2, "top_p": 0}, []string{"top_p", "(0, 1]"}},
		{"top_k", []int{1, 2}, map[string]any{"max_tokens": 2, "top_k": -5}, []string{"top_k"}},
		{"prompt token outside the vocabulary", []int{1, 99999}, map[string]any{"max_tokens": 2}, []string{"prompt", "99999", "vocabulary"}},
		{"negative prompt token", []int{-3}, map[string]any{"max_tokens": 2}, []string{"prompt", "-3"}},
		{"stop token outside the vocabulary", []int{1}, map[string]any{"max_tokens": 2, "stop": []int{70000}}, []string{"stop", "70000"}},
		{"max_tokens over the limit", []int{1}, map[string]any{"max_tokens": 1 << 20}, []string{"max_tokens"}},
		{"too many stop strings", []int{1}, map[string]any{"max_tokens": 2, "stop": []string{"a", "b", "c", "d", "e"}}, []string{"limits.max_stop_strings", "4"}},
		{"stop strings too long", []int{1}, map[string]any{"max_tokens": 2, "stop": []string{strings.Repeat("x", 65)}}, []string{"limits.max_stop_string_bytes", "64"}},
		{"empty stop string", []int{1}, map[string]any{"max_tokens": 2, "stop": []string{""}}, []string{"stop", "empty"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.a.Do("POST", "/api/v1/asample", sampleBody(sm, c.prompt, c.params), nil)
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
	// Within the limits, it samples.
	var f future
	h.a.Post("/api/v1/asample", sampleBody(sm, []int{1, 2}, map[string]any{"max_tokens": 2, "stop": []string{"a", "b", "c", "d"}}), &f)
	h.a.Result(f.RequestID, nil)
}
