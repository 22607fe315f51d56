package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/internal/testenv"
)

// tinyLoraParams is the parameter count of a rank-r adapter (attn, mlp, unembed) on the
// tiny test model.
func tinyLoraParams(t *testing.T, rank int) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.TinyDir(t), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := engine.ParseHFConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	return engine.LoraParamCount(c, engine.LoraConfig{Rank: rank, TrainAttn: true, TrainMLP: true, TrainUnembed: true})
}

// quotaRefused requires a quota refusal: the status, the config key in the message, and (for
// 429) a Retry-After.
func quotaRefused(t *testing.T, r *testenv.Response, status int, key string) {
	t.Helper()
	var e struct {
		Detail string `json:"detail"`
	}
	_ = json.Unmarshal(r.Body, &e)
	if r.Status != status || !strings.Contains(e.Detail, key) {
		t.Fatalf("want %d naming %s, got %d %s", status, key, r.Status, r.Body)
	}
	if status == http.StatusTooManyRequests && r.Header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
}

func createModel(c *testenv.Client, sess string, seq, rank int) *testenv.Response {
	return c.Do("POST", "/api/v1/create_model", map[string]any{"session_id": sess, "model_seq_id": seq, "base_model": testenv.Model,
		"lora_config": map[string]any{"rank": rank, "seed": 1, "train_unembed": true, "train_mlp": true, "train_attn": true}}, nil)
}

func baseSampler(c *testenv.Client, sess string, seq int) *testenv.Response {
	return c.Do("POST", "/api/v1/create_sampling_session", map[string]any{"session_id": sess, "sampling_session_seq_id": seq, "base_model": testenv.Model}, nil)
}

func sessionWith(c *testenv.Client, md map[string]any) *testenv.Response {
	return c.Do("POST", "/api/v1/create_session", map[string]any{"tags": []string{"t"}, "user_metadata": md, "sdk_version": "0.38.0"}, nil)
}

func finish(c *testenv.Client, sess string) {
	c.Post("/api/v1/sessions/"+sess+"/finish", map[string]any{"reason": map[string]any{"type": "success"}}, nil)
}

// waitPruned polls an ended session until the reaper has pruned its metadata.
func waitPruned(t *testing.T, c *testenv.Client, sess string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var v struct {
			UserMetadata map[string]string `json:"user_metadata"`
		}
		c.Do("GET", "/api/v1/sessions/"+sess, nil, nil).JSON(t, &v)
		if len(v.UserMetadata) == 0 {
			return
		}
	}
	t.Fatalf("session %s was not pruned", sess)
}

func bigMetadata(n int) map[string]any { return map[string]any{"blob": strings.Repeat("x", n)} }

// Each per-tenant quota: over it, the right status naming its config key and nothing
// changed; the other tenant unaffected; freeing what the tenant holds brings the capacity
// back. Each case failed before the quotas existed (every request was accepted).
func TestPerTenantQuotas(t *testing.T) {
	t.Parallel()
	const rank = 4
	adapter := 16 * tinyLoraParams(t, rank)
	sampler := 4*tinyLoraParams(t, rank) + 64<<10
	cases := []struct {
		name string
		edit func(*config.Limits)
		// fill uses up alice's quota and returns the request over it, and how to free.
		run func(t *testing.T, h *harness) (over func() *testenv.Response, free func())
		// status and key of the refusal
		status int
		key    string
		// other: the same request by bob succeeds.
		other func(t *testing.T, h *harness)
	}{
		{
			name: "sessions", edit: func(l *config.Limits) { l.MaxSessionsPerTenant = 2 },
			run: func(t *testing.T, h *harness) (func() *testenv.Response, func()) {
				first := h.session(h.a)
				h.session(h.a)
				return func() *testenv.Response { return sessionWith(h.a, nil) },
					func() { finish(h.a, first) }
			},
			status: http.StatusForbidden, key: "limits.max_sessions_per_tenant",
			other: func(t *testing.T, h *harness) {
				h.session(h.b)
				h.session(h.b)
			},
		},
		{
			name: "runs", edit: func(l *config.Limits) { l.MaxRunsPerTenant = 2 },
			run: func(t *testing.T, h *harness) (func() *testenv.Response, func()) {
				sess := h.session(h.a)
				m0 := h.model(h.a, sess, 0, rank)
				h.model(h.a, sess, 1, rank)
				return func() *testenv.Response { return createModel(h.a, sess, 2, rank) },
					func() {
						var f future
						h.a.Post("/api/v1/unload_model", map[string]any{"model_id": m0}, &f)
						h.a.Result(f.RequestID, nil)
					}
			},
			status: http.StatusForbidden, key: "limits.max_runs_per_tenant",
			other: func(t *testing.T, h *harness) {
				sess := h.session(h.b)
				h.model(h.b, sess, 0, rank)
				h.model(h.b, sess, 1, rank)
			},
		},
		{
			name: "adapter memory", edit: func(l *config.Limits) { l.MaxAdapterBytesPerTenant = adapter*3/2 + 1 },
			run: func(t *testing.T, h *harness) (func() *testenv.Response, func()) {
				sess := h.session(h.a)
				m0 := h.model(h.a, sess, 0, rank)
				return func() *testenv.Response { return createModel(h.a, sess, 1, rank) },
					func() {
						var f future
						h.a.Post("/api/v1/unload_model", map[string]any{"model_id": m0}, &f)
						h.a.Result(f.RequestID, nil)
					}
			},
			status: http.StatusForbidden, key: "limits.max_adapter_bytes_per_tenant",
			other: func(t *testing.T, h *harness) { h.model(h.b, h.session(h.b), 0, rank) },
		},
		{
			name: "samplers", edit: func(l *config.Limits) { l.MaxSamplersPerTenant = 2 },
			run: func(t *testing.T, h *harness) (func() *testenv.Response, func()) {
				sess := h.session(h.a)
				for seq := range 2 {
					if r := baseSampler(h.a, sess, seq); r.Status != 200 {
						t.Fatalf("sampler %d: %d %s", seq, r.Status, r.Body)
					}
				}
				other := h.session(h.a)
				return func() *testenv.Response { return baseSampler(h.a, other, 0) }, func() { finish(h.a, sess) }
			},
			status: http.StatusForbidden, key: "limits.max_samplers_per_tenant",
			other: func(t *testing.T, h *harness) {
				sess := h.session(h.b)
				for seq := range 2 {
					if r := baseSampler(h.b, sess, seq); r.Status != 200 {
						t.Fatalf("bob's sampler %d: %d %s", seq, r.Status, r.Body)
					}
				}
			},
		},
		{
			name: "metadata of one session", edit: func(l *config.Limits) { l.MaxMetadataBytes = 1024 },
			run: func(t *testing.T, h *harness) (func() *testenv.Response, func()) {
				return func() *testenv.Response { return sessionWith(h.a, bigMetadata(2000)) }, nil
			},
			status: http.StatusRequestEntityTooLarge, key: "limits.max_metadata_bytes",
			other: func(t *testing.T, h *harness) {
				if r := sessionWith(h.b, bigMetadata(900)); r.Status != 200 {
					t.Fatalf("bob: %d %s", r.Status, r.Body)
				}
			},
		},
		{
			name: "metadata of a tenant", edit: func(l *config.Limits) { l.MaxMetadataBytes, l.MaxMetadataBytesPerTenant = 1024, 2500 },
			run: func(t *testing.T, h *harness) (func() *testenv.Response, func()) {
				var first string
				for i := range 2 {
					r := sessionWith(h.a, bigMetadata(900))
					if r.Status != 200 {
						t.Fatalf("session %d: %d %s", i, r.Status, r.Body)
					}
					var out struct {
						SessionID string `json:"session_id"`
					}
					r.JSON(t, &out)
					if i == 0 {
						first = out.SessionID
					}
				}
				// A finished session's metadata counts until the reaper prunes it
				// (sessions.finished_retention_seconds, 1 s here).
				return func() *testenv.Response { return sessionWith(h.a, bigMetadata(900)) }, func() { finish(h.a, first); waitPruned(t, h.a, first) }
			},
			status: http.StatusForbidden, key: "limits.max_metadata_bytes_per_tenant",
			other: func(t *testing.T, h *harness) {
				for range 2 {
					if r := sessionWith(h.b, bigMetadata(900)); r.Status != 200 {
						t.Fatalf("bob: %d %s", r.Status, r.Body)
					}
				}
			},
		},
		{
			name: "disk", edit: func(l *config.Limits) { l.MaxDiskBytesPerTenant = sampler * 3 / 2 },
			run: func(t *testing.T, h *harness) (func() *testenv.Response, func()) {
				sess := h.session(h.a)
				m := h.model(h.a, sess, 0, rank)
				var f future
				h.a.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": m, "path": "first", "seq_id": 1}, &f)
				h.a.Result(f.RequestID, nil)
				seq := 2
				return func() *testenv.Response {
						r := h.a.Do("POST", "/api/v1/save_weights_for_sampler", map[string]any{"model_id": m, "path": "second", "seq_id": seq}, nil)
						if r.Status == 200 {
							var f future
							r.JSON(t, &f)
							h.a.Result(f.RequestID, nil)
						}
						seq++
						return r
					}, func() {
						if r := h.a.Do("DELETE", "/api/v1/training_runs/"+m+"/checkpoints/sampler_weights/first", nil, nil); r.Status/100 != 2 {
							t.Fatalf("delete: %d %s", r.Status, r.Body)
						}
					}
			},
			status: http.StatusForbidden, key: "limits.max_disk_bytes_per_tenant",
			other: func(t *testing.T, h *harness) {
				m := h.model(h.b, h.session(h.b), 0, rank)
				var f future
				h.b.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": m, "path": "first", "seq_id": 1}, &f)
				h.b.Result(f.RequestID, nil)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, cfg := newHarnessCfg(t, func(c *config.Config) { tc.edit(&c.Limits); c.Sessions.FinishedRetentionSeconds = 1 })
			over, free := tc.run(t, h)
			quotaRefused(t, over(), tc.status, tc.key)
			quotaRefused(t, over(), tc.status, tc.key) // refusing changed nothing
			tc.other(t, h)
			if tc.name == "disk" {
				// Nothing of the refused save was written.
				for _, pat := range []string{"*/sampler_weights/second*", "*/sampler_weights/.tmp-*"} {
					if m, _ := filepath.Glob(filepath.Join(cfg.CheckpointDir, pat)); len(m) > 0 {
						t.Fatalf("a refused save left %v", m)
					}
				}
			}
			if free == nil {
				return
			}
			free()
			if r := over(); r.Status != 200 {
				t.Fatalf("after freeing: %d %s", r.Status, r.Body)
			}
		})
	}
}

// The weights save_weights_and_get_sampling_client writes under _ephemeral/<n> go when
// their sampling session is released: replaced (same sampling_session_seq_id), its
// session finished, and at start for sessions that no longer exist. Before, nothing ever
// deleted them. Open sessions keep theirs across a restart.
func TestEphemeralSamplerWeightsAreDeleted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testenv.Config(t, dir, "embedded")
	s := testenv.Start(t, cfg)
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA)}
	sess := h.session(h.a)
	model := h.model(h.a, sess, 0, 4)
	seq := 0
	ephemeral := func(c *testenv.Client, samplerSeq int) string {
		seq++
		var f future
		c.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": model, "seq_id": seq, "sampling_session_seq_id": samplerSeq}, &f)
		var res struct {
			SamplingSessionID string `json:"sampling_session_id"`
		}
		c.Result(f.RequestID, &res)
		return res.SamplingSessionID
	}
	eph := filepath.Join(cfg.CheckpointDir, strings.ReplaceAll(model, "/", "_"), "_ephemeral")
	held := func(want ...string) {
		t.Helper()
		ents, _ := os.ReadDir(eph)
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("_ephemeral holds %v, want %v", got, want)
		}
	}
	ephemeral(h.a, 1)
	held("1")
	ephemeral(h.a, 1) // replaces sampling session 1: its old weights go
	held("2")
	ephemeral(h.a, 2)
	held("2", "3")

	// Restart: open sessions keep their weights; weights no session uses (left by a
	// version that never deleted them) go.
	if err := os.MkdirAll(filepath.Join(eph, "99"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s = testenv.Start(t, cfg)
	h.a = testenv.NewClient(t, s.URL(), testenv.KeyA)
	held("2", "3")
	finish(h.a, sess)
	held()
}

// Inflight clients (kind "inflight") never copy weights: however many there are, the
// run holds one _inflight directory and nothing under _ephemeral. Each is a sampling
// session: an RL loop making one per iteration (the SDK never releases them) keeps the
// newest limits.max_ephemeral_samplers_per_run, fewer when the tenant is at
// limits.max_samplers_per_tenant, and a released client's sample says why. With no
// session of the run to release, the tenant's quota refuses (403).
func TestEphemeralSamplersOfARunAreBounded(t *testing.T) {
	t.Parallel()
	h, cfg := newHarnessCfg(t, func(c *config.Config) {
		c.Limits.MaxSamplersPerTenant, c.Limits.MaxEphemeralSamplersPerRun = 4, 2
	})
	sess := h.session(h.a)
	model := h.model(h.a, sess, 0, 4)
	seq := 0
	save := func(kind string) (string, *testenv.Response) {
		seq++
		r := h.a.Do("POST", "/api/v1/save_weights_for_sampler", map[string]any{"model_id": model, "seq_id": seq, "sampling_session_seq_id": seq, "kind": kind}, nil)
		var res struct {
			SamplingSessionID string `json:"sampling_session_id"`
		}
		if r.Status == 200 {
			var f future
			r.JSON(t, &f)
			h.a.Result(f.RequestID, &res)
		}
		return res.SamplingSessionID, r
	}
	sample := func(sm string) *testenv.Response {
		r := h.a.Do("POST", "/api/v1/asample", map[string]any{"sampling_session_id": sm, "seq_id": 1, "num_samples": 1,
			"prompt": prompt(1, 2, 3), "sampling_params": map[string]any{"max_tokens": 2}}, nil)
		if r.Status == 200 {
			var f future
			r.JSON(t, &f)
			return h.a.Wait(f.RequestID, "")
		}
		return r
	}
	var ids []string
	for range 6 { // an RL loop: a new client per iteration, alternating kinds
		kind := "inflight"
		if seq%2 == 1 {
			kind = "snapshot"
		}
		id, r := save(kind)
		if r.Status != 200 {
			t.Fatalf("save %d: %d %s", seq, r.Status, r.Body)
		}
		ids = append(ids, id)
	}
	// The newest two serve; the older ones were released, and say why.
	for i, id := range ids {
		r := sample(id)
		var e struct {
			Detail string `json:"detail"`
		}
		_ = json.Unmarshal(r.Body, &e)
		if i >= 4 && (r.Status != 200 || strings.Contains(string(r.Body), `"error"`)) {
			t.Fatalf("client %d: %d %s", i, r.Status, r.Body)
		}
		if i < 4 && (r.Status != http.StatusNotFound || !strings.Contains(e.Detail, "limits.max_ephemeral_samplers_per_run")) {
			t.Fatalf("released client %d: %d %s", i, r.Status, r.Body)
		}
	}
	rd := filepath.Join(cfg.CheckpointDir, strings.ReplaceAll(model, "/", "_"))
	var names []string
	_ = filepath.Walk(rd, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() && filepath.Dir(p) != rd && filepath.Base(filepath.Dir(p)) == "_ephemeral" {
			names = append(names, filepath.Base(p))
		}
		return nil
	})
	if len(names) != 1 { // the newest two: one snapshot (its own weights), one inflight (the run's)
		t.Fatalf("_ephemeral holds %v, want the one open snapshot's weights", names)
	}
	if _, err := os.Stat(filepath.Join(rd, "_inflight")); err != nil {
		t.Fatal("no shared _inflight weights")
	}
	// Base-model sessions fill the tenant's quota with the run's two: a new client of the
	// run releases the run's oldest instead of failing.
	other := h.session(h.a)
	for i := range 2 {
		if r := baseSampler(h.a, other, i); r.Status != 200 {
			t.Fatalf("base sampler %d: %d %s", i, r.Status, r.Body)
		}
	}
	quotaRefused(t, baseSampler(h.a, other, 2), http.StatusForbidden, "limits.max_samplers_per_tenant")
	if _, r := save("snapshot"); r.Status != 200 {
		t.Fatalf("a new client of the run at the tenant's quota: %d %s", r.Status, r.Body)
	}
}
