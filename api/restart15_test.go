package api_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
)

// What issue 15 adds survives a restart on the embedded store: a Dimuon run resumes
// with its optimizer, an inflight client samples the run's newest inflight weights,
// clone counters keep counting, an export's links sign and serve, and a copy_weights
// retry with its idempotency key still returns the first copy.
func TestIssue15StateSurvivesARestart(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "embedded")
	start := func() (*server.Server, *harness) {
		s, err := server.Start(context.Background(), cfg, server.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s, &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	}
	s, h := start()
	sess := h.session(h.a)
	var f future
	h.a.Post("/api/v1/create_model", map[string]any{"session_id": sess, "model_seq_id": 0, "base_model": testenv.Model,
		"lora_config": map[string]any{"rank": 4, "seed": 5}, "optimizer_config": map[string]any{"type": "dimuon", "version": 1}}, &f)
	h.a.Result(f.RequestID, nil)
	model := f.ModelID
	seq := 0
	op := func(h *harness, path string, body map[string]any, out any) {
		t.Helper()
		seq++
		body["model_id"], body["seq_id"] = model, seq
		var f future
		h.a.Post(path, body, &f)
		h.a.Result(f.RequestID, out)
	}
	dimuon := map[string]any{"optimizer_params": map[string]any{"type": "dimuon", "learning_rate": 0.05}}
	op(h, "/api/v1/forward_backward", fwdbwdJSON(model, 0, datum(11, 8)), nil)
	op(h, "/api/v1/optim_step", dimuon, nil)
	var inflight struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	op(h, "/api/v1/save_weights_for_sampler", map[string]any{"sampling_session_seq_id": 0, "kind": "inflight"}, &inflight)
	var exp struct{ Path string }
	op(h, "/api/v1/save_weights_external", map[string]any{"path": "e"}, &exp)
	var saved struct{ Path string }
	op(h, "/api/v1/save_weights", map[string]any{"path": "s"}, &saved)
	copyBody := map[string]any{"source_path": saved.Path, "destination_project_id": "alice"}
	var cp struct {
		TinkerPath string `json:"tinker_path"`
	}
	h.a.Do("POST", "/api/v1/copy_weights", copyBody, map[string]string{"X-Idempotency-Key": "k"}).JSON(t, &cp)
	var j struct {
		ClientCounter int64 `json:"client_counter"`
	}
	h.a.Post("/api/v1/join_sampling_session", map[string]any{"sampling_session_id": inflight.SamplingSessionID}, &j)
	sampleSeq := 0
	scores := func(h *harness) []float64 {
		t.Helper()
		sampleSeq++
		var sf sampleFuture
		h.a.Post("/api/v1/asample", map[string]any{"sampling_session_id": inflight.SamplingSessionID, "seq_id": sampleSeq, "num_samples": 1,
			"prompt": prompt(11, 12, 13, 14), "prompt_logprobs": true, "sampling_params": map[string]any{"max_tokens": 1, "temperature": 0}}, &sf)
		var out sampleJSON
		h.a.Result(sf.RequestID, &out)
		var lp []float64
		for _, p := range out.PromptLogprobs[1:] {
			lp = append(lp, *p)
		}
		return lp
	}
	before := scores(h)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s, h = start()
	defer s.Shutdown(context.Background())

	var info infoJSON
	h.a.Post("/api/v1/get_info", map[string]any{"model_id": model}, &info)
	if info.OptimizerConfig["type"] != "dimuon" {
		t.Fatalf("after the restart the run's optimizer is %v", info.OptimizerConfig)
	}
	op(h, "/api/v1/forward_backward", fwdbwdJSON(model, 0, datum(11, 8)), nil)
	op(h, "/api/v1/optim_step", dimuon, nil) // Dimuon state restored from the autosave
	if got := scores(h); !slices.Equal(got, before) {
		t.Fatalf("the inflight client samples %v after the restart, %v before", got, before)
	}
	h.a.Post("/api/v1/join_sampling_session", map[string]any{"sampling_session_id": inflight.SamplingSessionID}, &j)
	if j.ClientCounter != 2 {
		t.Fatalf("clone counter after the restart: %d, want 2", j.ClientCounter)
	}
	run, id := splitTinker(exp.Path)
	var u urlsReply
	h.a.Do("GET", "/api/v1/training_runs/"+run+"/checkpoints/"+id+"/external_weights_urls", nil, nil).JSON(t, &u)
	if code, b := fetch(t, u.URLs["adapter_config.json"]); code != 200 || len(b) == 0 {
		t.Fatalf("an export's link after the restart: %d", code)
	}
	var again struct {
		TinkerPath string `json:"tinker_path"`
	}
	h.a.Do("POST", "/api/v1/copy_weights", copyBody, map[string]string{"X-Idempotency-Key": "k"}).JSON(t, &again)
	if again.TinkerPath != cp.TinkerPath {
		t.Fatalf("copy retry after the restart: %s, want %s", again.TinkerPath, cp.TinkerPath)
	}
}

func splitTinker(p string) (run, ckpt string) {
	rest := p[len("tinker://"):]
	for i := range rest {
		if rest[i] == '/' {
			return rest[:i], rest[i+1:]
		}
	}
	return rest, ""
}
