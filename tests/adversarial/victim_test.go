package adversarial

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// The victim-latency checks of issue 22 (latencyReport): a victim tenant's small sample,
// measured alone and then under an attack in the same run, must stay within twice its
// time alone plus connAttackSlack.

// connAttackSlack is the absolute slack over 2× the idle latency for the connection and
// output attacks: a shared CI machine (and the race detector, when the suite runs under
// it) adds scheduling noise of this order to a 20–50 ms sample, whatever the attack.
const connAttackSlack = 150 * time.Millisecond

// victim samples a few tokens on its own sampling session with a given HTTP client (its
// own connections, so an attack on connection slots reaches it too).
type victim struct {
	t       *testing.T
	base    string
	key     string
	http    *http.Client
	sampler string
	seq     int
}

// call posts body to route and decodes the JSON reply into out; it fails the test on a
// transport error or a non-200 answer, naming what the victim could not do.
func (v *victim) call(route string, body, out any) {
	v.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", v.base+route, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", v.key)
	resp, err := v.http.Do(req)
	if err != nil {
		v.t.Fatalf("victim %s: %v", route, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		v.t.Fatalf("victim %s: %d %s", route, resp.StatusCode, rb)
	}
	if out != nil {
		if err := json.Unmarshal(rb, out); err != nil {
			v.t.Fatalf("victim %s: %v", route, err)
		}
	}
}

// sample draws 4 tokens and returns how long the submission and the result took.
func (v *victim) sample() time.Duration {
	v.t.Helper()
	t0 := time.Now()
	var f future
	v.seq++
	v.call("/api/v1/asample", map[string]any{"sampling_session_id": v.sampler, "seq_id": v.seq, "num_samples": 1,
		"prompt":          map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": tokens(7, 6)}}},
		"sampling_params": map[string]any{"max_tokens": 4, "seed": 3}}, &f)
	for {
		req, _ := http.NewRequest("POST", v.base+"/api/v1/retrieve_future", bytes.NewReader([]byte(`{"request_id":"`+f.RequestID+`"}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", v.key)
		resp, err := v.http.Do(req)
		if err != nil {
			v.t.Fatalf("victim retrieve_future: %v", err)
		}
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			if bytes.Contains(rb, []byte(`"error"`)) {
				v.t.Fatalf("victim sample failed: %s", rb)
			}
			return time.Since(t0)
		case http.StatusRequestTimeout:
			continue
		default:
			v.t.Fatalf("victim retrieve_future: %d %s", resp.StatusCode, rb)
		}
	}
}

func (v *victim) measure(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = v.sample()
	}
	return out
}
