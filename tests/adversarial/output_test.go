package adversarial

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
)

// hugeOutputs are sampling requests each of whose parameters is within its own limit
// but whose output is not (with the default limits): an OpenAI chat completion of 128
// choices × 256 tokens × 20 alternatives (finding 8 of issue 22: 50 MB answered, 880 MB
// of memory), a completion of 128 choices × 2000 tokens × 5 alternatives, and
// a Tinker sample of 128 × 512 tokens × 20 alternatives.
func hugeOutputs(sampler string) []struct {
	route, limit string
	body         map[string]any
} {
	return []struct {
		route, limit string
		body         map[string]any
	}{
		{"/oai/api/v1/chat/completions", "limits.max_sample_output_bytes", map[string]any{"model": testenv.Model,
			"messages": []any{map[string]any{"role": "user", "content": "Hi"}}, "n": 128, "max_tokens": 256, "logprobs": true, "top_logprobs": 20}},
		{"/oai/api/v1/completions", "limits.max_sample_output_cells", map[string]any{"model": testenv.Model,
			"prompt": "Hi", "n": 128, "max_tokens": 2000, "logprobs": 5}},
		{"/api/v1/asample", "limits.max_sample_output_cells", map[string]any{"sampling_session_id": sampler, "seq_id": 1, "num_samples": 128,
			"prompt":               map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": tokens(1, 8)}}},
			"sampling_params":      map[string]any{"max_tokens": 512, "seed": 1},
			"topk_sample_logprobs": 20}},
	}
}

// postRaw sends body with key through client; status 0 means no answer (a timeout).
func postRaw(client *http.Client, base, key, route string, body any) (int, string) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", base+route, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(rb)
}

// Finding 8 of issue 22: no request could ask for more output than the server should
// build. Each sampling route sizes a request's output before queuing it and answers 400
// naming limits.max_sample_output_cells or limits.max_sample_output_bytes at once; a
// victim's small samples stay within twice their idle latency while six such requests
// are sent with each of them.
func TestVictimLatencyHugeOutputs(t *testing.T) {
	s := testenv.Start(t, testenv.Config(t, t.TempDir(), "memory"))
	attacker := newTenant(t, s.URL(), testenv.KeyA)
	asess := attacker.session()
	asm := attacker.sampler(asess, 1, map[string]any{"base_model": testenv.Model})
	quick := &http.Client{Timeout: 15 * time.Second}
	for _, c := range hugeOutputs(asm) {
		t0 := time.Now()
		status, body := postRaw(quick, s.URL(), testenv.KeyA, c.route, c.body)
		if status != http.StatusBadRequest || !strings.Contains(body, c.limit) {
			t.Fatalf("%s with an output over the budget: %d %.300s (after %s); want 400 naming %s", c.route, status, body, time.Since(t0), c.limit)
		}
	}

	b := newTenant(t, s.URL(), testenv.KeyB)
	v := &victim{t: t, base: s.URL(), key: testenv.KeyB, http: &http.Client{Timeout: 60 * time.Second}}
	v.sampler = b.sampler(b.session(), 1, map[string]any{"base_model": testenv.Model})
	v.measure(2) // warm up
	idle := v.measure(12)

	// The attack: six such requests at once (the six in parallel, two per route),
	// sent with each victim sample, overlapping it.
	var attacked []time.Duration
	sent := 0
	for i := 0; i < 12; i++ {
		var wg sync.WaitGroup
		for j := 0; j < 6; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := hugeOutputs(asm)[j%3]
				if status, body := postRaw(quick, s.URL(), testenv.KeyA, c.route, c.body); status != http.StatusBadRequest {
					t.Errorf("attack %s: %d %.200s", c.route, status, body)
				}
			}()
		}
		attacked = append(attacked, v.sample())
		wg.Wait()
		sent += 6
	}
	t.Logf("%d over-budget requests refused during the measurement", sent)
	latencyReport(t, "huge outputs", idle, attacked, connAttackSlack)
}
