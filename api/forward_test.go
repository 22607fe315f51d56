package api_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
	"github.com/tuft-go/tuft/store/storetest"
)

// Two API replicas on one Redis: a request about a session the other replica owns passes
// the layers of the replica it reached, is replayed on the owner by forwardLayer with the
// body the body layer held, and the owner's reply comes back; a request that was
// forwarded already is not bounced again.
func TestForwardLayerReplaysOnTheOwningReplica(t *testing.T) {
	redisURL := storetest.StartRedis(t)
	ns := fmt.Sprintf("fwd%d", time.Now().UnixNano())
	var clients []*testenv.Client
	for _, id := range []string{"api-a", "api-b"} {
		cfg := testenv.Config(t, t.TempDir(), "memory")
		cfg.Persistence.Mode, cfg.Persistence.RedisURL, cfg.Persistence.Namespace = "redis", redisURL, ns
		cfg.Server.ReplicaID = id
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		s := testenv.Start(t, cfg)
		clients = append(clients, testenv.NewClient(t, s.URL(), testenv.KeyA))
	}
	a, b := clients[0], clients[1]
	var se struct {
		SessionID string `json:"session_id"`
	}
	a.Post("/api/v1/create_session", map[string]any{"tags": []string{}, "sdk_version": "0.25.0"}, &se)
	var f struct {
		RequestID string `json:"request_id"`
		ModelID   string `json:"model_id"`
	}
	// Sent to api-b, run by api-a (which owns the session).
	b.Post("/api/v1/create_model", map[string]any{"session_id": se.SessionID, "model_seq_id": 0, "base_model": testenv.Model,
		"lora_config": map[string]any{"rank": 4}}, &f)
	b.Result(f.RequestID, nil)
	b.Post("/api/v1/forward_backward", map[string]any{"model_id": f.ModelID, "seq_id": 1, "forward_backward_input": map[string]any{
		"data": []any{map[string]any{"model_input": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{1, 2}}}},
			"loss_fn_inputs": map[string]any{"target_tokens": map[string]any{"data": []int{2, 3}, "dtype": "int64"}}}}, "loss_fn": "cross_entropy"}}, &f)
	b.Result(f.RequestID, nil)

	// A request forwarded already (by api-a, say) that reaches a replica which does not own
	// the run is answered 503, not sent on.
	r := b.Do("POST", "/api/v1/optim_step", map[string]any{"model_id": f.ModelID, "seq_id": 2,
		"adam_params": map[string]any{"learning_rate": 1e-3}}, map[string]string{"X-Tuft-Forwarded-By": "api-a"})
	if r.Status != 503 || !strings.Contains(string(r.Body), "ownership is changing") {
		t.Fatalf("a forwarded request about another replica's run: %d %s, want 503 naming the ownership change", r.Status, r.Body)
	}
	// It never reached the owner: seq_id 2 sent to api-b now runs there.
	b.Post("/api/v1/optim_step", map[string]any{"model_id": f.ModelID, "seq_id": 2, "adam_params": map[string]any{"learning_rate": 1e-3}}, &f)
	b.Result(f.RequestID, nil)
}

// The console's data across replicas: a metric stream opened on the replica that does not
// own the run is relayed from the owner as the events come (each flushed), and the usage a
// replica reports sums the buckets every replica wrote.
func TestConsoleDataAcrossReplicas(t *testing.T) {
	redisURL := storetest.StartRedis(t)
	ns := fmt.Sprintf("cons%d", time.Now().UnixNano())
	var clients []*testenv.Client
	var urls []string
	for _, id := range []string{"api-a", "api-b"} {
		cfg := testenv.Config(t, t.TempDir(), "memory")
		cfg.Persistence.Mode, cfg.Persistence.RedisURL, cfg.Persistence.Namespace = "redis", redisURL, ns
		cfg.Server.ReplicaID = id
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		s := testenv.Start(t, cfg)
		clients = append(clients, testenv.NewClient(t, s.URL(), testenv.KeyA))
		urls = append(urls, s.URL())
	}
	a, b := clients[0], clients[1]
	h := &harness{t: t, a: a}
	model := h.model(a, h.session(a), 0, 4) // owned by api-a
	trainSteps(t, a, model, 1, 1)

	st, resp := openStream(t, urls[1], testenv.KeyA, model, "?after=1", nil) // through api-b
	if resp.StatusCode != 200 {
		t.Fatalf("relayed stream: %d", resp.StatusCode)
	}
	if ev := st.nextEvent(t); ev.id != "2" {
		t.Fatalf("relayed stream's first event: %+v", ev)
	}
	trainSteps(t, b, model, 3, 1)
	if ev := st.nextEvent(t); ev.id != "3" || ev.event != "point" {
		t.Fatalf("relayed live event: %+v", ev)
	}
	// api-b reads api-a's usage buckets from the store once api-a has flushed them.
	check.Eventually(t, 10*time.Second, "api-b to report the tokens api-a counted", func() bool {
		var u usageReply
		b.Do("GET", "/api/v1/usage?days=1", nil, nil).JSON(t, &u)
		return u.Days[0].TokensTrained == 2*16
	})
}
