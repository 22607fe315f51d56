package adversarial

import (
	"context"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
)

// Finding 5 of issue 22: finished sessions kept their metadata in memory and in the
// store (1,000 create/finish loops with 60 KB of metadata: +95 MB of heap, +87 MB of
// store, all restored at start). Now an ended session's metadata counts against
// limits.max_metadata_bytes_per_tenant until sessions.finished_retention_seconds prunes
// it to a compact record that still answers 410 (docs/security.md, "Round two").

// bigMetadata is about 60 KB of user_metadata.
func bigMetadata(i int) map[string]any {
	return map[string]any{"blob": strings.Repeat("m", 60<<10), "i": i}
}

// createFinish opens a session with 60 KB of metadata and finishes it; it returns the
// session id, or the create's refusal.
func createFinish(tn *tenant, i int) (string, *testenv.Response) {
	r := tn.c.Do("POST", "/api/v1/create_session", map[string]any{"tags": []string{"loop"}, "user_metadata": bigMetadata(i), "sdk_version": "0.25.0"}, nil)
	if r.Status != 200 {
		return "", r
	}
	var out struct {
		SessionID string `json:"session_id"`
	}
	r.JSON(tn.t, &out)
	tn.c.Post("/api/v1/sessions/"+out.SessionID+"/finish", map[string]any{"reason": map[string]any{"type": "success"}}, nil)
	return out.SessionID, nil
}

// sessionStoreBytes is what the store holds under session/ and heartbeat/.
func sessionStoreBytes(t *testing.T, s *server.Server) (n int64) {
	for _, prefix := range []string{"session/", "heartbeat/"} {
		if err := s.Store.Scan(context.Background(), prefix, func(k string, v []byte) error { n += int64(len(k) + len(v)); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func heapBytes() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// Until they are pruned, finished sessions' metadata counts: the loop is refused at the
// tenant's quota (429: the prune will free it), and the store holds no more than it.
func TestFinishedSessionsCountAgainstTheMetadataQuota(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Limits.MaxMetadataBytesPerTenant = 4 << 20
	s := testenv.Start(t, cfg)
	a := newTenant(t, s.URL(), testenv.KeyA)
	refused := 0
	for i := 0; i < 150 && refused == 0; i++ {
		if _, r := createFinish(a, i); r != nil {
			// The reaper will prune the ended sessions: a 429 with Retry-After at that time.
			if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "limits.max_metadata_bytes_per_tenant") {
				t.Fatalf("loop %d: %d %s", i, r.Status, r.Body)
			}
			refused = i
		}
	}
	held := sessionStoreBytes(t, s)
	t.Logf("refused after %d create/finish loops of 60 KB; the store holds %d bytes of sessions", refused, held)
	if refused == 0 || held > cfg.Limits.MaxMetadataBytesPerTenant+64<<10 {
		t.Fatalf("150 loops of 60 KB under a 4 MiB quota: refused at %d, the store holds %d bytes of sessions", refused, held)
	}
	// Another tenant is not affected.
	b := newTenant(t, s.URL(), testenv.KeyB)
	if _, r := createFinish(b, 0); r != nil {
		t.Fatalf("another tenant: %d %s", r.Status, r.Body)
	}
}

// After the retention, ended sessions are pruned to compact records (memory and store)
// that still answer 410: many loops leave the heap and the store bounded.
func TestFinishedSessionsArePruned(t *testing.T) {
	const loops = 400
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Sessions.FinishedRetentionSeconds = 0.001
	s := testenv.Start(t, cfg)
	a := newTenant(t, s.URL(), testenv.KeyA)
	first, _ := createFinish(a, -1) // warm up the paths the loop takes
	s.Service.Reap(context.Background())
	heap0, store0 := heapBytes(), sessionStoreBytes(t, s)
	for i := 0; i < loops; i++ {
		if _, r := createFinish(a, i); r != nil {
			t.Fatalf("loop %d: %d %s", i, r.Status, r.Body)
		}
		if i%20 == 19 {
			time.Sleep(2 * time.Millisecond) // past the retention
			s.Service.Reap(context.Background())
		}
	}
	heap1, store1 := heapBytes(), sessionStoreBytes(t, s)
	t.Logf("%d create/finish loops of 60 KB: heap %+d bytes, store %+d bytes (%.0f and %.0f per loop)", loops, heap1-heap0, store1-store0,
		float64(heap1-heap0)/loops, float64(store1-store0)/loops)
	// A compact record is a few hundred bytes; the metadata was 60 KB a loop.
	if per := (store1 - store0) / loops; per > 1024 {
		t.Fatalf("the store grew %d bytes per loop", per)
	}
	if per := (heap1 - heap0) / loops; per > 4096 {
		t.Fatalf("the heap grew %d bytes per loop", per)
	}
	// What the API must still answer for a pruned session: 410.
	r := a.c.Do("POST", "/api/v1/session_heartbeat", map[string]any{"session_id": first}, nil)
	if r.Status != http.StatusGone || !strings.Contains(string(r.Body), "finished") {
		t.Fatalf("a heartbeat on a pruned finished session: %d %s", r.Status, r.Body)
	}
	r = a.c.Do("POST", "/api/v1/create_model", map[string]any{"session_id": first, "model_seq_id": 0, "base_model": testenv.Model,
		"lora_config": map[string]any{"rank": 4}}, nil)
	if r.Status != http.StatusGone {
		t.Fatalf("create_model in a pruned finished session: %d %s", r.Status, r.Body)
	}
}
