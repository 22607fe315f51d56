package adversarial

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
)

// Two tenants hammer asample at a small per-tenant limit (the crash of finding 1 came
// within seconds at a limit of 4). Every answer is a future or a 429 with Retry-After,
// never a 5xx, and the server keeps serving both. In CI it runs under the race
// detector, which reports the race at once if it comes back.
func Test429FloodOfTwoTenants(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Limits.MaxQueuedPerTenant = 4
	s := testenv.Start(t, cfg)
	var accepted, refused atomic.Int64
	var wg sync.WaitGroup
	for _, key := range []string{testenv.KeyA, testenv.KeyB} {
		tn := newTenant(t, s.URL(), key)
		sess := tn.session()
		sm := tn.sampler(sess, 0, map[string]any{"base_model": testenv.Model})
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := testenv.NewClient(t, s.URL(), key)
				for i := 0; i < 60; i++ {
					r := c.Do("POST", "/api/v1/asample", map[string]any{"sampling_session_id": sm, "seq_id": g*1000 + i, "num_samples": 1,
						"prompt":          map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{1, 2, 3}}}},
						"sampling_params": map[string]any{"max_tokens": 2, "seed": 1}}, nil)
					switch r.Status {
					case http.StatusOK:
						accepted.Add(1)
					case http.StatusTooManyRequests:
						if n, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || n < 1 {
							t.Errorf("429 without a Retry-After: %q", r.Header.Get("Retry-After"))
						}
						refused.Add(1)
					default:
						t.Errorf("flood answer %d %s", r.Status, r.Body)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("flood: %d accepted, %d answered 429", accepted.Load(), refused.Load())
	if accepted.Load() == 0 || refused.Load() == 0 {
		t.Fatal("the flood should both pass and hit the limit")
	}
	// Both tenants are still served, once their queues drain (a 429 until then, as a
	// client that honours Retry-After would see).
	for _, key := range []string{testenv.KeyA, testenv.KeyB} {
		tn := newTenant(t, s.URL(), key)
		sess := tn.session()
		var f future
		check.Eventually(t, 30*time.Second, "create_model after the flood", func() bool {
			r := tn.c.Do("POST", "/api/v1/create_model", map[string]any{"session_id": sess, "model_seq_id": 0, "base_model": testenv.Model,
				"lora_config": map[string]any{"rank": 4, "seed": 1, "train_attn": true}}, nil)
			if r.Status == http.StatusOK {
				r.JSON(t, &f)
			}
			return r.Status == http.StatusOK
		})
		tn.c.Result(f.RequestID, nil)
		tn.c.Result(tn.fb(f.ModelID, 1), nil)
	}
}
