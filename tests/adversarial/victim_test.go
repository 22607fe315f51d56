package adversarial

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"testing"
	"time"
)

// The victim-latency checks of issue 22: a victim tenant's small sample, measured alone
// and then under an attack in the same run, must stay within twice its time alone (plus
// latencySlack). The TestVictimLatency* tests print a line starting "victim latency
// under <attack>:" for tests/adversarial/run.sh.

// latencySlack is the absolute slack over 2× the idle latency: the race detector and a
// shared CI machine add scheduling noise of this order to a 20–50 ms sample, whatever the
// attack.
const latencySlack = 150 * time.Millisecond

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

func pct(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s)-1)+0.5))]
}

// checkVictimLatency prints the victim's latencies idle and under attack and fails the
// test when the attacked p50 or p99 exceeds twice the idle one plus latencySlack.
func checkVictimLatency(t *testing.T, attack string, idle, attacked []time.Duration) {
	t.Helper()
	line := fmt.Sprintf("victim latency under %s: idle p50 %s p99 %s; attacked p50 %s p99 %s (bound: 2× idle + %s, race detector slack)",
		attack, pct(idle, 0.5), pct(idle, 0.99), pct(attacked, 0.5), pct(attacked, 0.99), latencySlack)
	fmt.Fprintln(os.Stderr, line)
	t.Log(line)
	for _, q := range []float64{0.5, 0.99} {
		if bound := 2*pct(idle, q) + latencySlack; pct(attacked, q) > bound {
			t.Errorf("victim p%.0f under %s: %s, over the bound %s", q*100, attack, pct(attacked, q), bound)
		}
	}
}
