package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
)

type future struct {
	RequestID string `json:"request_id"`
	ModelID   string `json:"model_id"`
}

// harness is one server and two tenants' clients.
type harness struct {
	t    *testing.T
	a, b *testenv.Client
	url  string
}

func newHarness(t *testing.T, mode string) *harness {
	t.Helper()
	cfg := testenv.Config(t, t.TempDir(), mode)
	s := testenv.Start(t, cfg)
	return &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
}

func (h *harness) session(c *testenv.Client) string {
	var out struct {
		SessionID string `json:"session_id"`
	}
	c.Post("/api/v1/create_session", map[string]any{"tags": []string{}, "user_metadata": map[string]any{}, "sdk_version": "0.25.0", "type": "create_session"}, &out)
	if out.SessionID == "" {
		h.t.Fatal("no session id")
	}
	return out.SessionID
}

func (h *harness) model(c *testenv.Client, sess string, seq int, rank int) string {
	var f future
	c.Post("/api/v1/create_model", map[string]any{"session_id": sess, "model_seq_id": seq, "base_model": testenv.Model,
		"lora_config": map[string]any{"rank": rank, "seed": 1, "train_unembed": true, "train_mlp": true, "train_attn": true}, "type": "create_model"}, &f)
	var res struct {
		ModelID string `json:"model_id"`
	}
	c.Result(f.RequestID, &res)
	if res.ModelID == "" || res.ModelID != f.ModelID {
		h.t.Fatalf("create_model result %q vs future %q", res.ModelID, f.ModelID)
	}
	return res.ModelID
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
	w := make([]float64, n)
	for i := range w {
		w[i] = 1
	}
	return map[string]any{
		"model_input":    map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": seq[:n]}}},
		"loss_fn_inputs": map[string]any{"target_tokens": map[string]any{"data": seq[1:], "dtype": "int64", "shape": []int{n}}, "weights": map[string]any{"data": w, "dtype": "float32", "shape": []int{n}}},
	}
}

func fwdbwdJSON(model string, seq int, data ...map[string]any) map[string]any {
	return map[string]any{"model_id": model, "seq_id": seq, "forward_backward_input": map[string]any{"data": data, "loss_fn": "cross_entropy"}}
}

func optim(model string, seq int, lr float64) map[string]any {
	return map[string]any{"model_id": model, "seq_id": seq, "type": "optim_step",
		"adam_params": map[string]any{"learning_rate": lr, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0, "grad_clip_norm": 0}}
}

func lossOf(t *testing.T, r *testenv.Response) float64 {
	var out struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	r.JSON(t, &out)
	v, ok := out.Metrics["loss:sum"]
	if !ok {
		t.Fatalf("no loss:sum in %s", r.Body)
	}
	return v
}

func TestHealthzNeedsNoKeyAndEverythingElseDoes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	anon := testenv.NewClient(t, h.url, "")
	if r := anon.Do("GET", "/api/v1/healthz", nil, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"ok"`) {
		t.Fatalf("healthz: %d %s", r.Status, r.Body)
	}
	routes := [][2]string{{"POST", "/api/v1/client/config"}, {"GET", "/api/v1/get_server_capabilities"}, {"POST", "/api/v1/create_session"},
		{"POST", "/api/v1/telemetry"}, {"POST", "/api/v1/forward_backward"}, {"POST", "/api/v1/retrieve_future"}, {"GET", "/api/v1/training_runs"},
		{"GET", "/api/v1/checkpoints"}, {"GET", "/api/v1/sessions"}, {"POST", "/api/v1/asample"}}
	bad := testenv.NewClient(t, h.url, "tml-wrong")
	for _, rt := range routes {
		for _, c := range []*testenv.Client{anon, bad} {
			r := c.Do(rt[0], rt[1], []byte(`{}`), nil)
			if r.Status != http.StatusUnauthorized || !strings.Contains(strings.ToLower(string(r.Body)), "api key") {
				t.Errorf("%s %s with key %q: %d %s", rt[0], rt[1], c.Key, r.Status, r.Body)
			}
		}
	}
}

func TestSFTFlowOverJSON(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	var cc map[string]any
	h.a.Post("/api/v1/client/config", map[string]any{"sdk_version": "0.25.0"}, &cc)
	if cc["pjwt_auth_enabled"] != false || cc["parallel_fwdbwd_chunks"] != false {
		t.Fatalf("client config %v", cc)
	}
	var caps struct {
		SupportedModels []struct {
			ModelName string `json:"model_name"`
		} `json:"supported_models"`
	}
	r := h.a.Do("GET", "/api/v1/get_server_capabilities", nil, nil)
	r.JSON(t, &caps)
	if len(caps.SupportedModels) != 1 || caps.SupportedModels[0].ModelName != testenv.Model {
		t.Fatalf("capabilities %s", r.Body)
	}
	sess := h.session(h.a)
	model := h.model(h.a, sess, 0, 8)

	var losses []float64
	seq := 1
	for step := 0; step < 5; step++ {
		var f, o future
		h.a.Post("/api/v1/forward_backward", fwdbwdJSON(model, seq, datum(1, 16), datum(50, 16)), &f)
		h.a.Post("/api/v1/optim_step", optim(model, seq+1, 5e-3), &o)
		seq += 2
		losses = append(losses, lossOf(t, h.a.Result(f.RequestID, nil)))
		h.a.Result(o.RequestID, nil)
	}
	if !(losses[len(losses)-1] < losses[0]) {
		t.Fatalf("loss did not go down: %v", losses)
	}

	// Protobuf results for 0.25 clients.
	var f future
	h.a.Post("/api/v1/forward", map[string]any{"model_id": model, "seq_id": seq, "forward_input": map[string]any{"data": []any{datum(1, 8)}, "loss_fn": "cross_entropy"}}, &f)
	seq++
	pr := h.a.Wait(f.RequestID, "application/x-protobuf")
	if pr.Status != 200 || pr.Header.Get("Content-Type") != "application/x-protobuf" || len(pr.Body) == 0 {
		t.Fatalf("proto result: %d %q", pr.Status, pr.Header.Get("Content-Type"))
	}

	var sv future
	h.a.Post("/api/v1/save_weights", map[string]any{"model_id": model, "path": "step5", "seq_id": seq, "type": "save_weights"}, &sv)
	seq++
	var saved struct{ Path string }
	h.a.Result(sv.RequestID, &saved)
	if saved.Path != "tinker://"+model+"/weights/step5" {
		t.Fatalf("save path %q", saved.Path)
	}
	h.a.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": model, "path": "s5", "seq_id": seq, "type": "save_weights_for_sampler"}, &sv)
	h.a.Result(sv.RequestID, &saved)
	var ss struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	h.a.Post("/api/v1/create_sampling_session", map[string]any{"session_id": sess, "sampling_session_seq_id": 0, "model_path": saved.Path, "type": "create_sampling_session"}, &ss)
	var sf future
	h.a.Post("/api/v1/asample", map[string]any{"num_samples": 3, "prompt": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": tokens(1, 4)}}},
		"sampling_params":     map[string]any{"max_tokens": 5, "seed": 3, "temperature": 1.0, "top_k": -1, "top_p": 1.0},
		"sampling_session_id": ss.SamplingSessionID, "seq_id": 0, "prompt_logprobs": true, "topk_prompt_logprobs": 2, "type": "sample"}, &sf)
	var sample struct {
		Sequences []struct {
			Tokens     []int     `json:"tokens"`
			Logprobs   []float64 `json:"logprobs"`
			StopReason string    `json:"stop_reason"`
		} `json:"sequences"`
		PromptLogprobs []*float64 `json:"prompt_logprobs"`
	}
	h.a.Result(sf.RequestID, &sample)
	if len(sample.Sequences) != 3 || len(sample.PromptLogprobs) != 4 || sample.PromptLogprobs[0] != nil {
		t.Fatalf("sample: %+v", sample)
	}
	for _, s := range sample.Sequences {
		if len(s.Tokens) == 0 || len(s.Tokens) != len(s.Logprobs) {
			t.Fatalf("sequence %+v", s)
		}
	}

	// REST views.
	var runs struct {
		TrainingRuns []struct {
			TrainingRunID string `json:"training_run_id"`
			LoraRank      int    `json:"lora_rank"`
		} `json:"training_runs"`
	}
	h.a.Do("GET", "/api/v1/training_runs", nil, nil).JSON(t, &runs)
	if len(runs.TrainingRuns) != 1 || runs.TrainingRuns[0].TrainingRunID != model || runs.TrainingRuns[0].LoraRank != 8 {
		t.Fatalf("runs %+v", runs)
	}
	var cks struct {
		Checkpoints []struct {
			CheckpointID string `json:"checkpoint_id"`
		} `json:"checkpoints"`
	}
	h.a.Do("GET", "/api/v1/training_runs/"+model+"/checkpoints", nil, nil).JSON(t, &cks)
	if len(cks.Checkpoints) != 2 {
		t.Fatalf("checkpoints %+v", cks)
	}
}

func TestOutOfOrderSubmissionRunsInSeqOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	model := h.model(h.a, h.session(h.a), 0, 4)
	// Submit seq 6..1 in reverse order, each answered (queued) before the next is sent, so
	// every one arrives before its predecessors: the later ones wait for the earlier ones,
	// and the proof of order is that the optim steps of earlier seq_ids show in the losses
	// of later forward_backwards.
	ids := make([]string, 7)
	for seq := 6; seq >= 1; seq-- {
		var f future
		if seq%2 == 1 {
			h.a.Post("/api/v1/forward_backward", fwdbwdJSON(model, seq, datum(3, 8)), &f)
		} else {
			h.a.Post("/api/v1/optim_step", optim(model, seq, 1e-2), &f)
		}
		ids[seq] = f.RequestID
	}
	var losses []float64
	for seq := 1; seq <= 6; seq++ {
		r := h.a.Result(ids[seq], nil)
		if seq%2 == 1 {
			losses = append(losses, lossOf(t, r))
		}
	}
	if !(losses[2] < losses[1] && losses[1] < losses[0]) {
		t.Fatalf("steps did not run in order: losses %v", losses)
	}
}

func TestResubmissionDedupeAndConflict(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	model := h.model(h.a, h.session(h.a), 0, 4)
	body, _ := json.Marshal(fwdbwdJSON(model, 1, datum(1, 8)))
	var f1, f2 future
	h.a.Post("/api/v1/forward_backward", body, &f1)
	h.a.Post("/api/v1/forward_backward", body, &f2)
	if f1.RequestID != f2.RequestID {
		t.Fatalf("identical resubmission got a new id: %s vs %s", f1.RequestID, f2.RequestID)
	}
	r := h.a.Do("POST", "/api/v1/forward_backward", fwdbwdJSON(model, 1, datum(2, 8)), nil)
	if r.Status != http.StatusConflict || !strings.Contains(string(r.Body), "seq") {
		t.Fatalf("different payload, same seq: %d %s", r.Status, r.Body)
	}
	h.a.Result(f1.RequestID, nil)
}

func TestLongPollAnswers408WithQueueState(t *testing.T) {
	h := newHarness(t, "memory")
	model := h.model(h.a, h.session(h.a), 0, 4)
	// seq 2 waits for seq 1, which never comes: its retrieve must time out with try_again.
	var f future
	h.a.Post("/api/v1/optim_step", optim(model, 2, 1e-3), &f)
	start := time.Now()
	r := h.a.Do("POST", "/api/v1/retrieve_future", map[string]any{"request_id": f.RequestID}, nil)
	el := time.Since(start)
	if r.Status != http.StatusRequestTimeout {
		t.Fatalf("pending retrieve: %d %s", r.Status, r.Body)
	}
	var ta struct {
		Type       string `json:"type"`
		QueueState string `json:"queue_state"`
		RequestID  string `json:"request_id"`
	}
	r.JSON(t, &ta)
	if ta.Type != "try_again" || ta.RequestID != f.RequestID || ta.QueueState == "" {
		t.Fatalf("try_again body %s", r.Body)
	}
	if el < 1500*time.Millisecond || el > 6*time.Second {
		t.Fatalf("long poll held %v, want about 2s", el)
	}
}

func TestBadInputGetsA4xxThatNamesTheProblem(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sess := h.session(h.a)
	model := h.model(h.a, sess, 0, 4)
	bigVocab := datum(1, 4)
	bigVocab["model_input"] = map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{1, 2, 99999, 3}}}}
	mismatch := datum(1, 4)
	mismatch["loss_fn_inputs"].(map[string]any)["weights"] = map[string]any{"data": []float64{1, 1}, "dtype": "float32", "shape": []int{2}}
	cases := []struct {
		name, path string
		body       any
		want       string
		header     map[string]string
	}{
		{"malformed json", "/api/v1/create_session", []byte(`{"tags": [`), "json", nil},
		{"malformed proto", "/api/v1/forward_backward", []byte{0xff, 0xff, 0xff}, "", map[string]string{"Content-Type": "application/x-protobuf"}},
		{"unknown loss", "/api/v1/forward_backward", map[string]any{"model_id": model, "seq_id": 1, "forward_backward_input": map[string]any{"data": []any{datum(1, 4)}, "loss_fn": "hinge"}}, "hinge", nil},
		{"unknown loss config key", "/api/v1/forward_backward", map[string]any{"model_id": model, "seq_id": 1, "forward_backward_input": map[string]any{"data": []any{datum(1, 4)}, "loss_fn": "cross_entropy", "loss_fn_config": map[string]any{"clip": 1}}}, "clip", nil},
		{"token outside vocab", "/api/v1/forward_backward", fwdbwdJSON(model, 1, bigVocab), "99999", nil},
		{"shape mismatch", "/api/v1/forward_backward", fwdbwdJSON(model, 1, mismatch), "weights", nil},
		{"unknown model", "/api/v1/create_model", map[string]any{"session_id": sess, "model_seq_id": 5, "base_model": "nope", "lora_config": map[string]any{"rank": 4}}, "nope", nil},
		{"rank too big", "/api/v1/create_model", map[string]any{"session_id": sess, "model_seq_id": 6, "base_model": testenv.Model, "lora_config": map[string]any{"rank": 4096, "train_attn": true}}, "rank", nil},
		{"bad checkpoint name", "/api/v1/save_weights", map[string]any{"model_id": model, "path": "../../etc", "seq_id": 1}, "checkpoint name", nil},
		{"bad tinker path", "/api/v1/load_weights", map[string]any{"model_id": model, "path": "s3://x", "seq_id": 1, "optimizer": false}, "tinker://", nil},
		{"oversized body", "/api/v1/create_session", []byte(`{"tags":["` + strings.Repeat("x", 70<<20) + `"]}`), "max_request_bytes", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := h.a.Do("POST", tc.path, tc.body, tc.header)
			if r.Status/100 == 2 {
				// Engine-level validation surfaces when the future runs.
				var f future
				r.JSON(t, &f)
				r = h.a.Wait(f.RequestID, "")
				var fail struct{ Error, Category string }
				r.JSON(t, &fail)
				if fail.Error == "" || fail.Category != "user" || !strings.Contains(fail.Error, tc.want) {
					t.Fatalf("future result %s does not name %q as a user error", r.Body, tc.want)
				}
				return
			}
			if r.Status/100 != 4 || len(r.Body) == 0 || r.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %q %s", r.Status, r.Header.Get("Content-Type"), r.Body)
			}
			if !strings.Contains(strings.ToLower(string(r.Body)), strings.ToLower(tc.want)) {
				t.Fatalf("%d %s does not mention %q", r.Status, r.Body, tc.want)
			}
		})
	}
}

// TestTenantIsolation sends every id-taking route tenant A's ids from tenant B and
// requires the exact answer a missing id gets.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sess := h.session(h.a)
	model := h.model(h.a, sess, 0, 4)
	var f future
	h.a.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": model, "path": "iso", "seq_id": 1}, &f)
	var saved struct{ Path string }
	h.a.Result(f.RequestID, &saved)
	var ss struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	h.a.Post("/api/v1/create_sampling_session", map[string]any{"session_id": sess, "sampling_session_seq_id": 0, "model_path": saved.Path}, &ss)

	missing := map[string]string{"SESS": "sess_doesnotexist", "RUN": "sess_doesnotexist:train:0", "SAMPLER": "sess_doesnotexist:sample:0",
		"FUT": "req_doesnotexist", "PATH": "tinker://sess_doesnotexist:train:0/sampler_weights/iso"}
	real := map[string]string{"SESS": sess, "RUN": model, "SAMPLER": ss.SamplingSessionID, "FUT": f.RequestID, "PATH": saved.Path}
	routes := []struct{ method, path, body string }{
		{"POST", "/api/v1/session_heartbeat", `{"session_id":"SESS"}`},
		{"POST", "/api/v1/create_model", `{"session_id":"SESS","model_seq_id":9,"base_model":"tuft/tiny","lora_config":{"rank":4,"train_attn":true}}`},
		{"POST", "/api/v1/create_sampling_session", `{"session_id":"SESS","sampling_session_seq_id":5,"base_model":"tuft/tiny"}`},
		{"GET", "/api/v1/samplers/SAMPLER", ``},
		{"POST", "/api/v1/get_info", `{"model_id":"RUN"}`},
		{"POST", "/api/v1/unload_model", `{"model_id":"RUN"}`},
		{"POST", "/api/v1/weights_info", `{"tinker_path":"PATH"}`},
		{"POST", "/api/v1/forward_backward", `{"model_id":"RUN","seq_id":2,"forward_backward_input":{"data":[{"model_input":{"chunks":[{"type":"encoded_text","tokens":[1,2]}]},"loss_fn_inputs":{"target_tokens":{"data":[2,3],"dtype":"int64"},"weights":{"data":[1,1],"dtype":"float32"}}}],"loss_fn":"cross_entropy"}}`},
		{"POST", "/api/v1/optim_step", `{"model_id":"RUN","seq_id":2,"adam_params":{"learning_rate":0.001}}`},
		{"POST", "/api/v1/save_weights", `{"model_id":"RUN","seq_id":2,"path":"x"}`},
		{"POST", "/api/v1/save_weights_for_sampler", `{"model_id":"RUN","seq_id":2,"path":"x"}`},
		{"POST", "/api/v1/asample", `{"sampling_session_id":"SAMPLER","seq_id":1,"num_samples":1,"prompt":{"chunks":[{"type":"encoded_text","tokens":[1,2]}]},"sampling_params":{"max_tokens":2}}`},
		{"POST", "/api/v1/retrieve_future", `{"request_id":"FUT"}`},
		{"GET", "/api/v1/training_runs/RUN", ``},
		{"GET", "/api/v1/training_runs/RUN/checkpoints", ``},
		{"DELETE", "/api/v1/training_runs/RUN/checkpoints/sampler_weights/iso", ``},
		{"POST", "/api/v1/training_runs/RUN/checkpoints/sampler_weights/iso/publish", ``},
		{"DELETE", "/api/v1/training_runs/RUN/checkpoints/sampler_weights/iso/publish", ``},
		{"PUT", "/api/v1/training_runs/RUN/checkpoints/sampler_weights/iso/ttl", `{"ttl_seconds":60}`},
		{"GET", "/api/v1/training_runs/RUN/checkpoints/sampler_weights/iso/archive", ``},
		{"GET", "/api/v1/sessions/SESS", ``},
		{"PUT", "/api/v1/sessions/SESS/project", `{"project_id":"p"}`},
		{"POST", "/api/v1/sessions/SESS/finish", `{"reason":{"type":"success"},"detail":null}`},
		{"POST", "/api/v1/load_weights", `{"session_id":"SESS","model_seq_id":9,"path":"PATH","optimizer":false}`},
		{"POST", "/api/v1/save_weights_external", `{"model_id":"RUN","seq_id":2,"path":"x"}`},
	}
	fill := func(s string, ids map[string]string) string {
		for k, v := range ids {
			s = strings.ReplaceAll(s, k, v)
		}
		return s
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			var body, mbody any
			if rt.body != "" {
				body, mbody = []byte(fill(rt.body, real)), []byte(fill(rt.body, missing))
			}
			got := h.b.Do(rt.method, fill(rt.path, real), body, nil)
			want := h.b.Do(rt.method, fill(rt.path, missing), mbody, nil)
			if got.Status != http.StatusNotFound || want.Status != http.StatusNotFound {
				t.Fatalf("other tenant's id: %d %s; missing id: %d %s", got.Status, got.Body, want.Status, want.Body)
			}
			norm := func(b []byte, ids map[string]string) string {
				// Longest ids first: a run id contains its session id.
				keys := make([]string, 0, len(ids))
				for k := range ids {
					keys = append(keys, k)
				}
				sort.Slice(keys, func(i, j int) bool { return len(ids[keys[i]]) > len(ids[keys[j]]) })
				s := string(b)
				for _, k := range keys {
					s = strings.ReplaceAll(s, ids[k], k)
				}
				return s
			}
			if norm(got.Body, real) != norm(want.Body, missing) {
				t.Fatalf("answers differ:\n  other tenant: %s\n  missing:      %s", got.Body, want.Body)
			}
		})
	}
	// And tenant A still owns everything.
	if r := h.a.Do("GET", "/api/v1/training_runs/"+model, nil, nil); r.Status != 200 {
		t.Fatalf("owner lost access: %d %s", r.Status, r.Body)
	}
}

func TestArchiveDownloadIsSignedAndExpires(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	model := h.model(h.a, h.session(h.a), 0, 4)
	var f future
	h.a.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": model, "path": "arch", "seq_id": 1}, &f)
	h.a.Result(f.RequestID, nil)
	r := h.a.Do("GET", "/api/v1/training_runs/"+model+"/checkpoints/sampler_weights/arch/archive", nil, map[string]string{"Accept": "application/json"})
	if r.Status != http.StatusFound || r.Header.Get("Location") == "" || r.Header.Get("Expires") == "" {
		t.Fatalf("archive: %d %v %s", r.Status, r.Header, r.Body)
	}
	loc := r.Header.Get("Location")
	anon := testenv.NewClient(t, "", "")
	d := anon.Do("GET", loc, nil, nil)
	if d.Status != 200 || !strings.Contains(string(d.Body), "adapter_config.json") || !strings.Contains(string(d.Body), "adapter_model.safetensors") {
		t.Fatalf("download: %d (%d bytes)", d.Status, len(d.Body))
	}
	forged := anon.Do("GET", loc[:len(loc)-3]+"abc", nil, nil)
	if forged.Status != http.StatusForbidden {
		t.Fatalf("forged token: %d %s", forged.Status, forged.Body)
	}
	_ = fmt.Sprint()
}
