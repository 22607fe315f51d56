package api_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
)

// Behaviour the SDK releases after 0.25 rely on (up to 0.38).

func prompt(toks ...int) map[string]any {
	return map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": toks}}}
}

func (h *harness) sampler(c *testenv.Client, sess string, seq int) string {
	var ss struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	c.Post("/api/v1/create_sampling_session", map[string]any{"session_id": sess, "sampling_session_seq_id": seq, "base_model": testenv.Model}, &ss)
	return ss.SamplingSessionID
}

type sampleFuture struct {
	RequestID         string   `json:"request_id"`
	SampleSequenceIDs []string `json:"sample_sequence_ids"`
}

type sampleJSON struct {
	Sequences []struct {
		Tokens     []int     `json:"tokens"`
		Logprobs   []float64 `json:"logprobs"`
		StopReason string    `json:"stop_reason"`
	} `json:"sequences"`
	PromptLogprobs     []*float64  `json:"prompt_logprobs"`
	TopkPromptLogprobs []*[][2]any `json:"topk_prompt_logprobs"`
}

type infoJSON struct {
	ModelID   string `json:"model_id"`
	LoraRank  int    `json:"lora_rank"`
	ModelData struct {
		ModelName string `json:"model_name"`
	} `json:"model_data"`
	OptimizerConfig map[string]any `json:"optimizer_config"`
}

// The session's finish (ServiceClient.close / the end of a with-block): first reason
// wins, queued operations fail naming it, and the session's operations and heartbeats
// get 410 while records and results stay readable.
func TestFinishSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sess := h.session(h.a)
	model := h.model(h.a, sess, 0, 4)
	sm := h.sampler(h.a, sess, 1)
	var done, queued future
	h.a.Post("/api/v1/forward_backward", fwdbwdJSON(model, 1, datum(1, 8)), &done)
	h.a.Result(done.RequestID, nil)
	h.a.Post("/api/v1/optim_step", optim(model, 3, 1e-3), &queued) // waits for seq 2, which never comes

	var fin struct {
		Status struct {
			Type   string `json:"type"`
			Reason struct {
				Type string `json:"type"`
			} `json:"reason"`
			Detail *string `json:"detail"`
		} `json:"status"`
	}
	h.a.Post("/api/v1/sessions/"+sess+"/finish", map[string]any{"reason": map[string]any{"type": "success"}, "detail": "all done"}, &fin)
	if fin.Status.Type != "client_finished" || fin.Status.Reason.Type != "success" || fin.Status.Detail == nil || *fin.Status.Detail != "all done" {
		t.Fatalf("finish: %+v", fin)
	}
	h.a.Post("/api/v1/sessions/"+sess+"/finish", map[string]any{"reason": map[string]any{"type": "errored"}, "detail": nil}, &fin)
	if fin.Status.Reason.Type != "success" {
		t.Fatalf("second finish replaced the first reason: %+v", fin)
	}
	r := h.a.Wait(queued.RequestID, "")
	var fail struct{ Error, Category string }
	r.JSON(t, &fail)
	if !strings.Contains(fail.Error, "finished") {
		t.Fatalf("queued operation after finish: %s", r.Body)
	}
	h.a.Result(done.RequestID, nil) // results stay retrievable

	gone := []struct{ path, body string }{
		{"/api/v1/session_heartbeat", `{"session_id":"` + sess + `"}`},
		{"/api/v1/create_model", `{"session_id":"` + sess + `","model_seq_id":7,"base_model":"tuft/tiny","lora_config":{"rank":4}}`},
		{"/api/v1/create_sampling_session", `{"session_id":"` + sess + `","sampling_session_seq_id":7,"base_model":"tuft/tiny"}`},
		{"/api/v1/forward_backward", mustJSON(fwdbwdJSON(model, 2, datum(1, 8)))},
		{"/api/v1/optim_step", mustJSON(optim(model, 4, 1e-3))},
		{"/api/v1/save_weights", `{"model_id":"` + model + `","seq_id":4,"path":"x"}`},
		{"/api/v1/asample", `{"sampling_session_id":"` + sm + `","seq_id":1,"num_samples":1,"prompt":{"chunks":[{"type":"encoded_text","tokens":[1,2]}]},"sampling_params":{"max_tokens":2}}`},
		{"/api/v1/load_weights", `{"session_id":"` + sess + `","model_seq_id":8,"path":"tinker://` + model + `/weights/x","optimizer":false}`},
	}
	for _, g := range gone {
		if r := h.a.Do("POST", g.path, []byte(g.body), nil); r.Status != http.StatusGone || !strings.Contains(string(r.Body), "finished") {
			t.Errorf("POST %s after finish: %d %s, want 410", g.path, r.Status, r.Body)
		}
	}
	var sv struct {
		Status struct {
			Type   string `json:"type"`
			Reason struct {
				Type string `json:"type"`
			} `json:"reason"`
		} `json:"status"`
		TrainingRunIDs []string `json:"training_run_ids"`
	}
	h.a.Do("GET", "/api/v1/sessions/"+sess, nil, nil).JSON(t, &sv)
	if sv.Status.Type != "client_finished" || sv.Status.Reason.Type != "success" || len(sv.TrainingRunIDs) != 1 {
		t.Fatalf("GET session after finish: %+v", sv)
	}
	if r := h.a.Do("GET", "/api/v1/training_runs/"+model, nil, nil); r.Status != 200 {
		t.Fatalf("run record after finish: %d %s", r.Status, r.Body)
	}
	other := h.session(h.a)
	for _, tc := range []struct {
		sess, body string
		c          *testenv.Client
		code       int
	}{
		{other, `{"reason":{"type":"finished-ish"}}`, h.a, 400},
		{other, `{"detail":"no reason"}`, h.a, 400},
		{"sess_missing", `{"reason":{"type":"success"}}`, h.a, 404},
		{other, `{"reason":{"type":"success"}}`, h.b, 404},
	} {
		if r := tc.c.Do("POST", "/api/v1/sessions/"+tc.sess+"/finish", []byte(tc.body), nil); r.Status != tc.code {
			t.Errorf("finish %s %s: %d %s, want %d", tc.sess, tc.body, r.Status, r.Body, tc.code)
		}
	}
	var active struct {
		Status struct {
			Type string `json:"type"`
		} `json:"status"`
	}
	h.a.Do("GET", "/api/v1/sessions/"+other, nil, nil).JSON(t, &active)
	if active.Status.Type != "active" {
		t.Fatalf("open session status: %+v", active)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// user_metadata on checkpoints (stored, listed, replaced whole on overwrite), the save's
// kind, and the session's display_name and user_metadata.
func TestUserMetadataKindAndDisplayName(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	var cs struct {
		SessionID string `json:"session_id"`
	}
	h.a.Post("/api/v1/create_session", map[string]any{"tags": []string{}, "user_metadata": map[string]any{"team": "x", "n": 3}, "sdk_version": "0.38.0",
		"display_name": "my run", "type": "create_session"}, &cs)
	var gs struct {
		DisplayName  string            `json:"display_name"`
		UserMetadata map[string]string `json:"user_metadata"`
	}
	h.a.Do("GET", "/api/v1/sessions/"+cs.SessionID, nil, nil).JSON(t, &gs)
	if gs.DisplayName != "my run" || gs.UserMetadata["team"] != "x" || gs.UserMetadata["n"] != "3" {
		t.Fatalf("session: %+v", gs)
	}
	var cm future
	h.a.Post("/api/v1/create_model", map[string]any{"session_id": cs.SessionID, "model_seq_id": 0, "base_model": testenv.Model,
		"lora_config": map[string]any{"rank": 4}, "user_metadata": map[string]any{"purpose": "test"}}, &cm)
	h.a.Result(cm.RequestID, nil)
	model := cm.ModelID
	var run struct {
		UserMetadata map[string]string `json:"user_metadata"`
	}
	h.a.Do("GET", "/api/v1/training_runs/"+model, nil, nil).JSON(t, &run)
	if run.UserMetadata["purpose"] != "test" {
		t.Fatalf("run user_metadata: %+v", run)
	}
	seq := 1
	save := func(route string, body map[string]any) *testenv.Response {
		body["model_id"], body["seq_id"] = model, seq
		seq++
		return h.a.Do("POST", route, body, nil)
	}
	wait := func(r *testenv.Response) {
		t.Helper()
		if r.Status != 200 {
			t.Fatalf("save: %d %s", r.Status, r.Body)
		}
		var f future
		r.JSON(t, &f)
		h.a.Result(f.RequestID, nil)
	}
	meta := func(id string) map[string]string {
		var l struct {
			Checkpoints []struct {
				CheckpointID string            `json:"checkpoint_id"`
				UserMetadata map[string]string `json:"user_metadata"`
			} `json:"checkpoints"`
		}
		h.a.Do("GET", "/api/v1/training_runs/"+model+"/checkpoints", nil, nil).JSON(t, &l)
		for _, c := range l.Checkpoints {
			if c.CheckpointID == id {
				return c.UserMetadata
			}
		}
		t.Fatalf("checkpoint %s not listed", id)
		return nil
	}
	wait(save("/api/v1/save_weights", map[string]any{"path": "a", "user_metadata": map[string]any{"step": "1", "tag": "x"}}))
	if m := meta("weights/a"); m["step"] != "1" || m["tag"] != "x" {
		t.Fatalf("metadata: %v", m)
	}
	wait(save("/api/v1/save_weights", map[string]any{"path": "a", "overwrite": true, "user_metadata": map[string]any{"step": "2"}}))
	if m := meta("weights/a"); m["step"] != "2" || len(m) != 1 {
		t.Fatalf("metadata after overwrite: %v", m)
	}
	wait(save("/api/v1/save_weights", map[string]any{"path": "a", "overwrite": true}))
	if m := meta("weights/a"); len(m) != 0 {
		t.Fatalf("metadata after overwrite without any: %v", m)
	}
	wait(save("/api/v1/save_weights_for_sampler", map[string]any{"path": "s", "kind": "snapshot", "user_metadata": map[string]any{"k": "v"}}))
	if m := meta("sampler_weights/s"); m["k"] != "v" {
		t.Fatalf("sampler metadata: %v", m)
	}
	wait(save("/api/v1/save_weights_for_sampler", map[string]any{"sampling_session_seq_id": 0, "kind": "inflight"}))
	for _, tc := range []struct {
		route string
		body  map[string]any
		want  string
	}{
		{"/api/v1/save_weights_for_sampler", map[string]any{"path": "k", "kind": "live"}, "kind"},
		{"/api/v1/save_weights_for_sampler", map[string]any{"sampling_session_seq_id": 1, "user_metadata": map[string]any{"k": "v"}}, "user_metadata"},
		{"/api/v1/save_weights", map[string]any{"path": "m", "user_metadata": map[string]any{"k": 1}}, "user_metadata"},
	} {
		if r := save(tc.route, tc.body); r.Status != 400 || !strings.Contains(string(r.Body), tc.want) {
			t.Errorf("%s %v: %d %s, want 400 naming %q", tc.route, tc.body, r.Status, r.Body, tc.want)
		}
	}
}

// The SDK's telemetry events become log records correlated with the client's session.
func TestClientTelemetryBecomesLogRecords(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	s := testenv.StartWith(t, testenv.Config(t, t.TempDir(), "memory"), server.Options{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	c := testenv.NewClient(t, s.URL(), testenv.KeyA)
	c.Post("/api/v1/telemetry", map[string]any{"session_id": "sess_x", "platform": "linux", "sdk_version": "0.38.0", "process_uuid": "p1",
		"events": []any{
			map[string]any{"event": "UNHANDLED_EXCEPTION", "event_id": "e1", "event_session_index": 3, "severity": "ERROR", "error_type": "ValueError",
				"error_message": "boom", "traceback": "tb", "timestamp": "2026-11-22T15:00:00Z"},
			map[string]any{"event": "GENERIC_EVENT", "event_id": "e2", "severity": "INFO", "event_name": "custom", "event_data": map[string]any{"k": 1},
				"timestamp": 1.7e9},
			map[string]any{"event": "SESSION_START", "event_id": "e3", "severity": "INFO"},
			map[string]any{"event": "SESSION_END", "event_id": "e4", "severity": "INFO", "duration": "0:00:05"},
		}}, nil)
	logs := buf.String()
	for _, want := range []string{"client unhandled exception: ValueError: boom", `"exception.stacktrace":"tb"`, "client event custom",
		`"client.event_data":"{\"k\":1}"`, "client event SESSION_START", `"client.duration":"0:00:05"`, `"client.sdk_version":"0.38.0"`,
		`"client.process_uuid":"p1"`, `"client.platform":"linux"`, `"tuft.session_id":"sess_x"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("no %s in the logs:\n%s", want, logs)
		}
	}
}
