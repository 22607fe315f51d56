package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
)

// Every sampling route sizes a request's output before queuing it: over
// limits.max_sample_output_cells or limits.max_sample_output_bytes it is a 400 naming the
// limit in the route's error shape, and a request within both is served (finding 8 of
// issue 22). The Anthropic route is reached here with lowered limits: with one choice
// and no logprobs its output stays under the defaults.
func TestOutputBudgetOnEverySamplingRoute(t *testing.T) {
	t.Parallel()
	base := limitsServer(t, func(c *config.Config) {
		c.Limits.MaxSampleOutputCells = 1000
		c.Limits.MaxSampleOutputBytes = 20000
	})
	a := testenv.NewClient(t, base, testenv.KeyA)
	sess := a.NewSession()
	var ss struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	a.Post("/api/v1/create_sampling_session", map[string]any{"session_id": sess, "sampling_session_seq_id": 1, "base_model": testenv.Model}, &ss)
	msgs := []any{map[string]any{"role": "user", "content": "Hi"}}
	asample := func(n, mt, k int) map[string]any {
		return map[string]any{"sampling_session_id": ss.SamplingSessionID, "seq_id": n*1000 + mt + k, "num_samples": n,
			"prompt":          map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{5, 6, 7}}}},
			"sampling_params": map[string]any{"max_tokens": mt, "seed": 1}, "topk_sample_logprobs": k}
	}
	for _, c := range []struct {
		route string
		body  map[string]any
		limit string // "" when it fits
	}{
		{"/api/v1/asample", asample(10, 101, 0), "limits.max_sample_output_cells"},
		{"/api/v1/asample", asample(4, 100, 2), "limits.max_sample_output_cells"},
		{"/api/v1/asample", asample(9, 100, 0), "limits.max_sample_output_bytes"},
		{"/api/v1/asample", asample(2, 8, 0), ""},
		{"/oai/api/v1/completions", map[string]any{"model": testenv.Model, "prompt": "Hi", "n": 2, "max_tokens": 501}, "limits.max_sample_output_cells"},
		{"/oai/api/v1/completions", map[string]any{"model": testenv.Model, "prompt": "Hi", "max_tokens": 100, "logprobs": 2}, "limits.max_sample_output_bytes"},
		{"/oai/api/v1/completions", map[string]any{"model": testenv.Model, "prompt": "Hi", "max_tokens": 4}, ""},
		{"/oai/api/v1/chat/completions", map[string]any{"model": testenv.Model, "messages": msgs, "n": 3, "max_tokens": 400}, "limits.max_sample_output_cells"},
		{"/oai/api/v1/chat/completions", map[string]any{"model": testenv.Model, "messages": msgs, "max_tokens": 50, "logprobs": true, "top_logprobs": 5}, "limits.max_sample_output_bytes"},
		{"/anthropic/api/v1/messages", map[string]any{"model": testenv.Model, "messages": msgs, "max_tokens": 1001}, "limits.max_sample_output_cells"},
		{"/anthropic/api/v1/messages", map[string]any{"model": testenv.Model, "messages": msgs, "max_tokens": 4}, ""},
	} {
		r := a.Do("POST", c.route, c.body, nil)
		switch {
		case c.limit == "" && r.Status != http.StatusOK:
			t.Errorf("%s within the budget: %d %s", c.route, r.Status, r.Body)
		case c.limit != "" && (r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), c.limit)):
			t.Errorf("%s over %s: %d %s", c.route, c.limit, r.Status, r.Body)
		}
	}
}
