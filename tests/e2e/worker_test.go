package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
	"github.com/tuft-go/tuft/store/storetest"
)

// startProc runs bin with args and env, logging to log; the test cleans it up.
func startProc(t *testing.T, bin, log string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	lf, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait(); lf.Close() })
	return cmd
}

// waitFor is check.Eventually (60 s) that shows the process's log when it fails.
func waitFor(t *testing.T, what, log string, ok func() bool) {
	t.Helper()
	done := false
	defer func() {
		if !done { // Eventually failed (runtime.Goexit runs this): show why
			b, _ := os.ReadFile(log)
			t.Logf("log %s:\n%s", log, b)
		}
	}()
	check.Eventually(t, 60*time.Second, what, ok)
	done = true
}

func stopProc(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _, _ = cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// An API server and a `tuft worker` as real processes, finding each other through a real
// Redis: a full SFT-and-sample flow runs on the worker; one trace spans the server's HTTP
// span and the worker's executor spans (read from what a real collector received); the
// worker is killed with SIGKILL in the middle of an operation, which fails promptly
// with a server error; the restarted worker gets the run's adapter back and training
// continues.
func TestWorkerProcessTraceKillAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	col := collectorBinary(t)
	redisURL := storetest.StartRedis(t)
	out := t.TempDir()
	otlpPort := testenv.FreePort(t)
	collector := startCollector(t, col, out, otlpPort)
	defer collector.stop()
	bin := testenv.BuildTuft(t)
	dir := t.TempDir()
	ns := fmt.Sprintf("e2e%d", time.Now().UnixNano())
	telemetryBlock := fmt.Sprintf(`telemetry:
  enabled: true
  otlp_endpoint: http://127.0.0.1:%d
  timeout_seconds: 1
  metrics: {export_interval_seconds: 1}
`, otlpPort)

	wport := testenv.FreePort(t)
	waddr := fmt.Sprintf("127.0.0.1:%d", wport)
	wcfg := filepath.Join(dir, "worker.yaml")
	os.WriteFile(wcfg, []byte(fmt.Sprintf(`models:
  - {name: tuft/tiny, path: %s}
persistence: {mode: redis, redis_url: %q, namespace: %s}
worker: {register: true, heartbeat_seconds: 1}
%s`, testenv.TinyDir(t), redisURL, ns, telemetryBlock)), 0o644)
	env := []string{"TUFT_WORKER_TOKEN=e2e-worker-token", "TUFT_HOME=" + dir}
	wlog := filepath.Join(dir, "worker.log")
	startWorker := func() *exec.Cmd {
		w := startProc(t, bin, wlog, env, "worker", "--config", wcfg, "--listen", waddr)
		waitFor(t, "worker start", wlog, func() bool {
			b, _ := os.ReadFile(wlog)
			return strings.Count(string(b), "tuft worker is serving") > 0 && w.ProcessState == nil
		})
		return w
	}
	w := startWorker()

	port := testenv.FreePort(t)
	scfg := filepath.Join(dir, "server.yaml")
	os.WriteFile(scfg, []byte(fmt.Sprintf(`server: {host: 127.0.0.1, port: %d}
models:
  - {name: tuft/tiny, remote: true}
checkpoint_dir: %s
auth:
  api_keys: [{tenant: alice, key_sha256: %s}]
persistence: {mode: redis, redis_url: %q, namespace: %s}
workers: {discover: true, check_seconds: 1, call_timeout_seconds: 120, start_timeout_seconds: 60}
%s`, port, filepath.Join(dir, "checkpoints"), testenv.HashKey(testenv.KeyA), redisURL, ns, telemetryBlock)), 0o644)
	slog := filepath.Join(dir, "server.log")
	srv := startProc(t, bin, slog, env, "launch", "--config", scfg)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	c := testenv.NewClient(t, base, testenv.KeyA)
	waitFor(t, "server start", slog, func() bool {
		b, _ := os.ReadFile(slog)
		return strings.Contains(string(b), "tuft is serving")
	})

	se := c.NewSession()
	var f struct {
		RequestID string `json:"request_id"`
		ModelID   string `json:"model_id"`
	}
	c.Post("/api/v1/create_model", map[string]any{"session_id": se, "model_seq_id": 0, "base_model": "tuft/tiny", "lora_config": map[string]any{"rank": 4}}, &f)
	c.Result(f.RequestID, nil)
	model := f.ModelID
	seq := 1
	workload(t, []*testenv.Client{c}, &seq, model, se, 0)

	// SIGKILL the worker while it runs a long forward_backward.
	var data []any
	toks := make([]int, 200)
	for i := range toks {
		toks[i] = i%400 + 1
	}
	for i := 0; i < 40; i++ {
		data = append(data, map[string]any{"model_input": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": toks}}},
			"loss_fn_inputs": map[string]any{"target_tokens": map[string]any{"data": toks, "dtype": "int64"}}})
	}
	c.Post("/api/v1/forward_backward", map[string]any{"model_id": model, "seq_id": seq, "forward_backward_input": map[string]any{"data": data, "loss_fn": "cross_entropy"}}, &f)
	seq++
	// Not a synchronisation: the checks below hold wherever the kill lands; the pause only
	// makes it likely to land while the worker runs the operation.
	time.Sleep(300 * time.Millisecond)
	_ = w.Process.Kill()
	killed := time.Now()
	r := c.Wait(f.RequestID, "")
	var fail struct {
		Error    string `json:"error"`
		Category string `json:"category"`
	}
	json.Unmarshal(r.Body, &fail)
	if fail.Category != "server" || !strings.Contains(fail.Error, "worker") {
		t.Fatalf("operation on a killed worker: %d %s", r.Status, r.Body)
	}
	if d := time.Since(killed); d > 15*time.Second {
		t.Fatalf("the failure took %v", d)
	}
	t.Logf("killed worker: the operation failed after %v: %s", time.Since(killed).Round(time.Millisecond), fail.Error)

	// The restarted worker (a new instance at the same address) gets the adapter back
	// from the autosave of the last optim_step; training and sampling go on.
	w = startWorker()
	waitFor(t, "discovery of the restarted worker", slog, func() bool {
		b, _ := os.ReadFile(slog)
		return strings.Contains(string(b), "worker restarted") || strings.Count(string(b), "worker joined") > 1
	})
	workload(t, []*testenv.Client{c}, &seq, model, se, 1)
	if b, _ := os.ReadFile(slog); !strings.Contains(string(b), "adapter restored after its worker lost it") {
		t.Error("the server log does not mention restoring the adapter")
	}

	// Flush both processes' telemetry, then read what the collector received.
	// Both flush their telemetry before they exit, and the collector writes out all it
	// received when it stops.
	stopProc(srv)
	stopProc(w)
	collector.stop()
	spans, _, _ := readOTLP(t, out)
	serverTraces := map[string]bool{}
	for _, a := range spans["POST /api/v1/forward_backward"] {
		if a["_role"] == "server" {
			serverTraces[a["_trace"]] = true
		}
	}
	joined := false
	for _, a := range spans["hf_model.forward_backward"] {
		if a["_role"] != "worker" {
			t.Fatalf("hf_model.forward_backward exported with tuft.role=%q, want worker", a["_role"])
		}
		if serverTraces[a["_trace"]] && a["tuft.training_run_id"] == model {
			joined = true
		}
	}
	if !joined {
		t.Errorf("no trace holds both the server's HTTP span and the worker's hf_model span with the run's keys (%d server traces, %d worker spans)",
			len(serverTraces), len(spans["hf_model.forward_backward"]))
	}
	for _, name := range []string{"training_backend.forward_backward", "hf_model.optim_step", "hf_model.sample"} {
		if len(spans[name]) == 0 {
			t.Errorf("no %s span", name)
		}
	}
}

// Two API replicas on one Redis and one worker, as real processes: a client alternates
// between the replicas on every request through a full SFT-and-sample flow; requests
// about a session another replica owns are forwarded there, and listings show every
// replica's records.
func TestTwoReplicasShareOneWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	redisURL := storetest.StartRedis(t)
	bin := testenv.BuildTuft(t)
	dir := t.TempDir()
	ns := fmt.Sprintf("rep%d", time.Now().UnixNano())
	env := []string{"TUFT_WORKER_TOKEN=e2e-worker-token", "TUFT_HOME=" + dir}
	waddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	wcfg := filepath.Join(dir, "worker.yaml")
	os.WriteFile(wcfg, []byte(fmt.Sprintf(`models:
  - {name: tuft/tiny, path: %s}
persistence: {mode: redis, redis_url: %q, namespace: %s}
worker: {register: true, heartbeat_seconds: 1}
`, testenv.TinyDir(t), redisURL, ns)), 0o644)
	wlog := filepath.Join(dir, "worker.log")
	startProc(t, bin, wlog, env, "worker", "--config", wcfg, "--listen", waddr)
	waitFor(t, "worker start", wlog, func() bool {
		b, _ := os.ReadFile(wlog)
		return strings.Contains(string(b), "tuft worker is serving")
	})

	var clients []*testenv.Client
	for _, id := range []string{"api-a", "api-b"} {
		port := testenv.FreePort(t)
		cfg := filepath.Join(dir, id+".yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf(`server: {host: 127.0.0.1, port: %d, replica_id: %s}
models:
  - {name: tuft/tiny, remote: true}
checkpoint_dir: %s
auth:
  api_keys: [{tenant: alice, key_sha256: %s}, {tenant: bob, key_sha256: %s}]
persistence: {mode: redis, redis_url: %q, namespace: %s}
workers: {discover: true, check_seconds: 1}
`, port, id, filepath.Join(dir, "checkpoints"), testenv.HashKey(testenv.KeyA), testenv.HashKey(testenv.KeyB), redisURL, ns)), 0o644)
		log := filepath.Join(dir, id+".log")
		startProc(t, bin, log, env, "launch", "--config", cfg)
		waitFor(t, id+" start", log, func() bool {
			b, _ := os.ReadFile(log)
			return strings.Contains(string(b), "tuft is serving")
		})
		clients = append(clients, testenv.NewClient(t, fmt.Sprintf("http://127.0.0.1:%d", port), testenv.KeyA))
	}
	a, b := clients[0], clients[1]
	se := a.NewSession()
	var f struct {
		RequestID string `json:"request_id"`
		ModelID   string `json:"model_id"`
	}
	// The session lives on api-a; create_model sent to api-b runs there too.
	b.Post("/api/v1/create_model", map[string]any{"session_id": se, "model_seq_id": 0, "base_model": "tuft/tiny", "lora_config": map[string]any{"rank": 4}}, &f)
	a.Result(f.RequestID, nil)
	seq := 1
	workload(t, clients, &seq, f.ModelID, se, 0)
	workload(t, []*testenv.Client{b, a}, &seq, f.ModelID, se, 1)

	// A session created through api-b (so owned by it) samples from a checkpoint that was
	// saved through the session on api-a.
	se2 := b.NewSession()
	var ss struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	b.Post("/api/v1/create_sampling_session", map[string]any{"session_id": se2, "sampling_session_seq_id": 0,
		"model_path": "tinker://" + f.ModelID + "/sampler_weights/e2e-1"}, &ss)
	b.Post("/api/v1/asample", map[string]any{"sampling_session_id": ss.SamplingSessionID, "seq_id": 0, "num_samples": 1,
		"prompt": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{1, 2}}}}, "sampling_params": map[string]any{"max_tokens": 3}}, &f)
	b.Result(f.RequestID, nil)

	// Both replicas describe the run and list it; another tenant sees nothing of it.
	for i, c := range clients {
		var run struct {
			TrainingRunID string `json:"training_run_id"`
		}
		if r := c.Do("GET", "/api/v1/training_runs/"+f.ModelID, nil, nil); r.Status != 200 {
			t.Fatalf("replica %d: GET run: %d %s", i, r.Status, r.Body)
		} else {
			r.JSON(t, &run)
		}
		if r := c.Do("GET", "/api/v1/training_runs", nil, nil); !strings.Contains(string(r.Body), f.ModelID) {
			t.Errorf("replica %d does not list the run: %s", i, r.Body)
		}
		if r := c.Do("GET", "/api/v1/checkpoints", nil, nil); !strings.Contains(string(r.Body), "e2e-1") {
			t.Errorf("replica %d does not list the checkpoint saved through the other: %s", i, r.Body)
		}
		other := testenv.NewClient(t, c.Base, testenv.KeyB)
		if r := other.Do("GET", "/api/v1/training_runs/"+f.ModelID, nil, nil); r.Status != 404 {
			t.Errorf("replica %d: another tenant got %d for the run", i, r.Status)
		}
		if r := other.Do("POST", "/api/v1/forward_backward", map[string]any{"model_id": f.ModelID, "seq_id": 99,
			"forward_backward_input": map[string]any{"data": []any{map[string]any{"model_input": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{1, 2}}}},
				"loss_fn_inputs": map[string]any{"target_tokens": map[string]any{"data": []int{2, 3}, "dtype": "int64"}}}}, "loss_fn": "cross_entropy"}}, nil); r.Status != 404 {
			t.Errorf("replica %d: another tenant's forward_backward got %d %s", i, r.Status, r.Body)
		}
	}
}
