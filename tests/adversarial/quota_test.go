package adversarial

import (
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/internal/testenv"
)

// One tenant tries to exhaust the server's memory and disk with legal requests (issue
// 12, finding 6): many training runs, a sampler per RL iteration never reused, big
// user_metadata, checkpoint after checkpoint. Each attempt stops at its per-tenant quota
// with a 4xx naming the limit (an RL loop's samplers are bounded per run instead) (never a 5xx, never a 429 the SDK would retry in vain),
// what it holds stays within the quotas, and the other tenant still trains, saves and
// samples.
func TestExhaustionStopsAtTheTenantsQuotas(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	b, err := os.ReadFile(filepath.Join(testenv.TinyDir(t), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	mc, err := engine.ParseHFConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	params := engine.LoraParamCount(mc, engine.LoraConfig{Rank: 4, TrainAttn: true, TrainMLP: true, TrainUnembed: true})
	l := &cfg.Limits
	l.MaxRunsPerTenant, l.MaxSamplersPerTenant, l.MaxEphemeralSamplersPerRun = 4, 6, 3
	l.MaxMetadataBytes, l.MaxMetadataBytesPerTenant = 64<<10, 256<<10
	l.MaxDiskBytesPerTenant = 10 * (4*params + 64<<10)
	s := testenv.Start(t, cfg)
	mallory, victim := newTenant(t, s.URL(), testenv.KeyA), newTenant(t, s.URL(), testenv.KeyB)

	// flood sends req until it is refused (at most limit+10 times) and returns how many
	// were accepted; the refusal must be 403/413 naming key.
	flood := func(what, key string, limit int, req func(i int) *testenv.Response) int {
		t.Helper()
		for i := 0; i < limit+10; i++ {
			r := req(i)
			if r.Status/100 == 2 {
				continue
			}
			if (r.Status != http.StatusForbidden && r.Status != http.StatusRequestEntityTooLarge) || !strings.Contains(string(r.Body), key) {
				t.Fatalf("%s #%d: want 403/413 naming %s, got %d %s", what, i, key, r.Status, r.Body)
			}
			t.Logf("%s: %d accepted, then %d naming %s", what, i, r.Status, key)
			return i
		}
		t.Fatalf("%s: %d accepted, no quota", what, limit+10)
		return 0
	}
	md := map[string]any{"blob": strings.Repeat("m", 60<<10)}
	flood("sessions with 60 KiB of user_metadata", "limits.max_metadata_bytes_per_tenant", 4, func(int) *testenv.Response {
		return mallory.c.Do("POST", "/api/v1/create_session", map[string]any{"tags": []string{}, "user_metadata": md, "sdk_version": "0.38.0"}, nil)
	})
	flood("one session with 1 MiB of user_metadata", "limits.max_metadata_bytes", 0, func(int) *testenv.Response {
		return mallory.c.Do("POST", "/api/v1/create_session", map[string]any{"tags": []string{}, "user_metadata": map[string]any{"blob": strings.Repeat("m", 1<<20)}, "sdk_version": "0.38.0"}, nil)
	})
	sess := mallory.session()
	if n := flood("training runs", "limits.max_runs_per_tenant", 4, func(i int) *testenv.Response {
		r := mallory.c.Do("POST", "/api/v1/create_model", map[string]any{"session_id": sess, "model_seq_id": i, "base_model": testenv.Model,
			"lora_config": map[string]any{"rank": 4, "seed": 1, "train_attn": true, "train_mlp": true, "train_unembed": true}}, nil)
		if r.Status == 200 {
			var f future
			r.JSON(t, &f)
			mallory.c.Result(f.RequestID, nil)
		}
		return r
	}); n != 4 {
		t.Fatalf("%d runs accepted, want limits.max_runs_per_tenant (4)", n)
	}
	run := sess + ":train:0"
	seq := 0
	save := func(body map[string]any) *testenv.Response {
		seq++
		body["model_id"], body["seq_id"] = run, seq
		r := mallory.c.Do("POST", "/api/v1/save_weights_for_sampler", body, nil)
		if r.Status == 200 {
			var f future
			r.JSON(t, &f)
			mallory.c.Result(f.RequestID, nil)
		}
		return r
	}
	// An RL loop that never reuses its sampling_session_seq_id (as the SDK does): a
	// sampler per iteration, never released by the client. The run keeps the newest
	// limits.max_ephemeral_samplers_per_run (3) open; the loop never fails.
	for i := range 20 {
		if r := save(map[string]any{"sampling_session_seq_id": i}); r.Status != 200 {
			t.Fatalf("RL iteration %d: %d %s", i, r.Status, r.Body)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(cfg.CheckpointDir, run, "_ephemeral")); len(ents) != 3 {
		t.Fatalf("after 20 iterations the run holds %d samplers' weights, want limits.max_ephemeral_samplers_per_run (3)", len(ents))
	}
	if n := flood("sampling sessions", "limits.max_samplers_per_tenant", 6, func(i int) *testenv.Response {
		return mallory.c.Do("POST", "/api/v1/create_sampling_session", map[string]any{"session_id": sess, "sampling_session_seq_id": 100 + i, "base_model": testenv.Model}, nil)
	}); n != 3 {
		t.Fatalf("%d sampling sessions accepted beside the run's 3, want limits.max_samplers_per_tenant (6) in all", n)
	}
	flood("named sampler checkpoints", "limits.max_disk_bytes_per_tenant", 10, func(i int) *testenv.Response {
		return save(map[string]any{"path": "c" + string(rune('a'+i))})
	})
	var used int64
	_ = filepath.WalkDir(cfg.CheckpointDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, sess) {
			if fi, err := d.Info(); err == nil {
				used += fi.Size()
			}
		}
		return nil
	})
	if used > l.MaxDiskBytesPerTenant {
		t.Fatalf("mallory holds %d bytes on disk, over limits.max_disk_bytes_per_tenant (%d)", used, l.MaxDiskBytesPerTenant)
	}
	t.Logf("mallory holds %d bytes on disk of %d", used, l.MaxDiskBytesPerTenant)

	// The victim still works: a session with metadata, a run, a training step, a
	// checkpoint, a sampler and a sample.
	var vs struct {
		SessionID string `json:"session_id"`
	}
	victim.c.Post("/api/v1/create_session", map[string]any{"tags": []string{}, "user_metadata": md, "sdk_version": "0.38.0"}, &vs)
	vm := victim.model(vs.SessionID, 0)
	victim.c.Result(victim.fb(vm, 1), nil)
	victim.c.Result(victim.optim(vm, 2, 1e-3), nil)
	var saved struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	victim.c.Result(victim.submit("/api/v1/save_weights_for_sampler", map[string]any{"model_id": vm, "seq_id": 3, "sampling_session_seq_id": 0}), &saved)
	victim.c.Result(victim.submit("/api/v1/asample", map[string]any{"sampling_session_id": saved.SamplingSessionID, "seq_id": 1, "num_samples": 1,
		"prompt":          map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": tokens(1, 4)}}},
		"sampling_params": map[string]any{"max_tokens": 4, "temperature": 0}}), nil)
}
