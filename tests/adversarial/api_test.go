package adversarial

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
)

// tenant drives the Tinker routes for one API key.
type tenant struct {
	t *testing.T
	c *testenv.Client
}

func newTenant(t *testing.T, base, key string) *tenant {
	return &tenant{t: t, c: testenv.NewClient(t, base, key)}
}

type future struct {
	RequestID string `json:"request_id"`
	ModelID   string `json:"model_id"`
}

func (tn *tenant) session() string {
	return tn.c.NewSession()
}

func (tn *tenant) model(sess string, seq int) string {
	var f future
	tn.c.Post("/api/v1/create_model", map[string]any{"session_id": sess, "model_seq_id": seq, "base_model": testenv.Model,
		"lora_config": map[string]any{"rank": 4, "seed": 1, "train_attn": true, "train_mlp": true, "train_unembed": true}}, &f)
	tn.c.Result(f.RequestID, nil)
	return f.ModelID
}

func (tn *tenant) sampler(sess string, seq int, body map[string]any) string {
	var ss struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	body["session_id"], body["sampling_session_seq_id"] = sess, seq
	tn.c.Post("/api/v1/create_sampling_session", body, &ss)
	return ss.SamplingSessionID
}

func tokens(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (start+i)%300 + 10
	}
	return out
}

func datum(start, n int) map[string]any {
	seq := tokens(start, n+1)
	return map[string]any{
		"model_input":    map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": seq[:n]}}},
		"loss_fn_inputs": map[string]any{"target_tokens": map[string]any{"data": seq[1:], "dtype": "int64"}},
	}
}

// submit posts an operation and returns its future (the test fails on a non-2xx).
func (tn *tenant) submit(route string, body map[string]any) string {
	tn.t.Helper()
	var f future
	tn.c.Post(route, body, &f)
	return f.RequestID
}

func (tn *tenant) fb(model string, seq int) string {
	return tn.submit("/api/v1/forward_backward", map[string]any{"model_id": model, "seq_id": seq,
		"forward_backward_input": map[string]any{"data": []any{datum(1, 8)}, "loss_fn": "cross_entropy"}})
}

func (tn *tenant) optim(model string, seq int, lr float64) string {
	return tn.submit("/api/v1/optim_step", map[string]any{"model_id": model, "seq_id": seq, "adam_params": map[string]any{"learning_rate": lr}})
}

// loss runs a forward pass and returns its loss.
func (tn *tenant) loss(model string, seq int) float64 {
	tn.t.Helper()
	id := tn.submit("/api/v1/forward_backward", map[string]any{"model_id": model, "seq_id": seq,
		"forward_input": map[string]any{"data": []any{datum(1, 8)}, "loss_fn": "cross_entropy"}})
	var out struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	tn.c.Result(id, &out)
	return out.Metrics["loss:sum"]
}

// failure waits for a future and returns its error message and category ("" if it
// succeeded).
func (tn *tenant) failure(id string) (string, string) {
	r := tn.c.Wait(id, "")
	var f struct {
		Error    string `json:"error"`
		Category string `json:"category"`
	}
	_ = json.Unmarshal(r.Body, &f)
	return f.Error, f.Category
}

func contains(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
