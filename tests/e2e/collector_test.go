// Package e2e runs `tuft launch` against a real OpenTelemetry Collector (built from the
// Go module proxy by tools/otelcol/build.sh) and reads what the collector wrote.
package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
)

func collectorBinary(t *testing.T) string {
	if p := os.Getenv("TUFT_OTELCOL"); p != "" {
		return p
	}
	home, _ := os.UserHomeDir()
	p := filepath.Join(home, ".cache", "tuft", "otelcol", "otelcol-dev")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("TUFT_REQUIRE_OTELCOL") == "1" {
			t.Fatalf("no collector at %s (run tools/otelcol/build.sh)", p)
		}
		t.Skipf("no collector at %s; run tools/otelcol/build.sh", p)
	}
	return p
}

func repoRoot(t *testing.T) string {
	wd, _ := os.Getwd()
	return filepath.Join(wd, "..", "..")
}

type collector struct {
	cmd *exec.Cmd
}

func startCollector(t *testing.T, bin, out string, grpcPort int) *collector {
	t.Helper()
	cmd := exec.Command(bin, "--config", filepath.Join(repoRoot(t), "deploy", "otel", "collector-dev.yaml"))
	cmd.Env = append(os.Environ(), "TUFT_OTEL_OUT="+out, fmt.Sprintf("TUFT_OTEL_GRPC=127.0.0.1:%d", grpcPort),
		fmt.Sprintf("TUFT_OTEL_HTTP=127.0.0.1:%d", testenv.FreePort(t)))
	lf, _ := os.OpenFile(filepath.Join(out, "collector.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", grpcPort), 100*time.Millisecond); err == nil {
			c.Close()
			return &collector{cmd: cmd}
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := os.ReadFile(filepath.Join(out, "collector.log"))
	t.Fatalf("collector did not start:\n%s", b)
	return nil
}

func (c *collector) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _, _ = c.cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// workload runs an SFT step and a sample, returning per-request latencies. Each request
// goes to the next of clients in turn (several API replicas), or all to one.
func workload(t *testing.T, clients []*testenv.Client, seq *int, model, sess string, step int) []time.Duration {
	var lat []time.Duration
	n := 0
	next := func() *testenv.Client { n++; return clients[n%len(clients)] }
	timed := func(path string, body any, out any) {
		t0 := time.Now()
		next().Post(path, body, out)
		lat = append(lat, time.Since(t0))
	}
	datum := map[string]any{"model_input": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{1, 2, 3, 4}}}},
		"loss_fn_inputs": map[string]any{"target_tokens": map[string]any{"data": []int{2, 3, 4, 5}, "dtype": "int64"}}}
	for i := 0; i < 5; i++ {
		var f struct {
			RequestID string `json:"request_id"`
		}
		timed("/api/v1/forward_backward", map[string]any{"model_id": model, "seq_id": *seq, "forward_backward_input": map[string]any{"data": []any{datum}, "loss_fn": "cross_entropy"}}, &f)
		*seq++
		next().Result(f.RequestID, nil)
		timed("/api/v1/optim_step", map[string]any{"model_id": model, "seq_id": *seq, "adam_params": map[string]any{"learning_rate": 0.001}}, &f)
		*seq++
		next().Result(f.RequestID, nil)
	}
	var f struct {
		RequestID string `json:"request_id"`
	}
	next().Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": model, "seq_id": *seq, "path": fmt.Sprintf("e2e-%d", step)}, &f)
	*seq++
	var saved struct{ Path string }
	next().Result(f.RequestID, &saved)
	var ss struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	timed("/api/v1/create_sampling_session", map[string]any{"session_id": sess, "sampling_session_seq_id": step, "model_path": saved.Path}, &ss)
	next().Post("/api/v1/asample", map[string]any{"sampling_session_id": ss.SamplingSessionID, "seq_id": 0, "num_samples": 2,
		"prompt": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{1, 2}}}}, "sampling_params": map[string]any{"max_tokens": 3}}, &f)
	next().Result(f.RequestID, nil)
	return lat
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// readOTLP returns span (name → trace ids), metric names and log bodies from the file
// exporter's OTLP JSON lines.
func readOTLP(t *testing.T, dir string) (spans map[string][]map[string]string, metrics map[string]bool, logs []map[string]string) {
	spans, metrics = map[string][]map[string]string{}, map[string]bool{}
	attrs := func(list []any) map[string]string {
		m := map[string]string{}
		for _, a := range list {
			kv := a.(map[string]any)
			v := kv["value"].(map[string]any)
			for _, x := range v {
				m[kv["key"].(string)] = fmt.Sprint(x)
			}
		}
		return m
	}
	each := func(file string, fn func(map[string]any)) {
		f, err := os.Open(filepath.Join(dir, file))
		if err != nil {
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var doc map[string]any
			if json.Unmarshal(sc.Bytes(), &doc) == nil {
				fn(doc)
			}
		}
	}
	each("traces.jsonl", func(doc map[string]any) {
		for _, rs := range doc["resourceSpans"].([]any) {
			res := attrs(rs.(map[string]any)["resource"].(map[string]any)["attributes"].([]any))
			for _, ss := range rs.(map[string]any)["scopeSpans"].([]any) {
				for _, s := range ss.(map[string]any)["spans"].([]any) {
					sp := s.(map[string]any)
					a := attrs(sp["attributes"].([]any))
					a["_trace"], a["_span"], a["_role"] = sp["traceId"].(string), sp["spanId"].(string), res["tuft.role"]
					if p, ok := sp["parentSpanId"].(string); ok {
						a["_parent"] = p
					}
					spans[sp["name"].(string)] = append(spans[sp["name"].(string)], a)
				}
			}
		}
	})
	each("metrics.jsonl", func(doc map[string]any) {
		for _, rm := range doc["resourceMetrics"].([]any) {
			for _, sm := range rm.(map[string]any)["scopeMetrics"].([]any) {
				for _, m := range sm.(map[string]any)["metrics"].([]any) {
					metrics[m.(map[string]any)["name"].(string)] = true
				}
			}
		}
	})
	each("logs.jsonl", func(doc map[string]any) {
		for _, rl := range doc["resourceLogs"].([]any) {
			for _, sl := range rl.(map[string]any)["scopeLogs"].([]any) {
				for _, r := range sl.(map[string]any)["logRecords"].([]any) {
					rec := r.(map[string]any)
					a := map[string]string{}
					if l, ok := rec["attributes"].([]any); ok {
						a = attrs(l)
					}
					if b, ok := rec["body"].(map[string]any); ok {
						a["_body"] = fmt.Sprint(b["stringValue"])
					}
					a["_trace"], _ = rec["traceId"].(string)
					logs = append(logs, a)
				}
			}
		}
	})
	return spans, metrics, logs
}

func TestCollectorReceivesAllSignalsAndSurvivesAnOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	col := collectorBinary(t)
	out := t.TempDir()
	grpcPort := testenv.FreePort(t)
	c1 := startCollector(t, col, out, grpcPort)

	bin := testenv.BuildTuft(t)
	home := t.TempDir()
	port := testenv.FreePort(t)
	cfg := fmt.Sprintf(`server: {host: 127.0.0.1, port: %d}
models:
  - {name: tuft/tiny, path: %s}
auth:
  api_keys: [{tenant: alice, key_sha256: %s}]
telemetry:
  enabled: true
  otlp_endpoint: http://127.0.0.1:%d
  timeout_seconds: 1
  metrics: {export_interval_seconds: 1}
  resource_attributes: {deployment.environment: e2e}
`, port, testenv.TinyDir(t), testenv.HashKey(testenv.KeyA), grpcPort)
	cfgPath := filepath.Join(home, "tuft.yaml")
	os.WriteFile(cfgPath, []byte(cfg), 0o644)
	srv := exec.Command(bin, "launch", "--config", cfgPath)
	srv.Env = append(os.Environ(), "TUFT_HOME="+home)
	lf, _ := os.Create(filepath.Join(home, "server.log"))
	srv.Stdout, srv.Stderr = lf, lf
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _, _ = srv.Process.Wait() }()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	c := testenv.NewClient(t, base, testenv.KeyA)
	for i := 0; ; i++ {
		if cn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 100*time.Millisecond); err == nil {
			cn.Close()
			break
		}
		if i > 300 {
			b, _ := os.ReadFile(filepath.Join(home, "server.log"))
			t.Fatalf("server did not start:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	se := c.NewSession()
	modelID := c.NewTrainingRun(se, map[string]any{"rank": 4})
	seq := 1
	up := workload(t, []*testenv.Client{c}, &seq, modelID, se, 0)

	// Outage: the collector goes away; requests must keep their latency.
	c1.stop()
	down := workload(t, []*testenv.Client{c}, &seq, modelID, se, 1)
	c2 := startCollector(t, col, out, grpcPort)
	defer c2.stop()
	back := workload(t, []*testenv.Client{c}, &seq, modelID, se, 2)
	t.Logf("median request latency: collector up %v, down %v, back %v", median(up), median(down), median(back))
	smoke := exec.Command(bin, "smoke", "--config", cfgPath)
	smoke.Env = append(os.Environ(), "TUFT_HOME="+home)
	if out, err := smoke.CombinedOutput(); err != nil || !strings.Contains(string(out), "export OK") {
		t.Errorf("tuft smoke against a live collector: %v\n%s", err, out)
	}
	if median(down) > 3*median(up)+50*time.Millisecond {
		t.Errorf("a dead collector slowed requests: %v vs %v", median(down), median(up))
	}
	// A clean stop flushes the last batches.
	_ = srv.Process.Signal(syscall.SIGTERM)
	_, _ = srv.Process.Wait()
	c2.stop() // the collector writes out all it received when it stops

	spans, metrics, logs := readOTLP(t, out)
	for _, name := range []string{"POST /api/v1/forward_backward", "future_store.execute_operation", "training_controller.run_forward_backward",
		"training_backend.forward_backward", "hf_model.forward_backward", "hf_model.sample", "sample.decode", "store.SET"} {
		if len(spans[name]) == 0 {
			t.Errorf("collector received no %q span", name)
		}
	}
	// One trace from HTTP to the model executor, with the correlation keys.
	byTrace := map[string]map[string]bool{}
	for name, list := range spans {
		for _, a := range list {
			if byTrace[a["_trace"]] == nil {
				byTrace[a["_trace"]] = map[string]bool{}
			}
			byTrace[a["_trace"]][name] = true
			if a["_role"] != "server" {
				t.Fatalf("span %s without tuft.role=server", name)
			}
		}
	}
	full := false
	for _, names := range byTrace {
		if names["POST /api/v1/forward_backward"] && names["hf_model.forward_backward"] && names["training_controller.run_forward_backward"] {
			full = true
		}
	}
	if !full {
		t.Error("no single trace spans HTTP to the model executor")
	}
	keyed := false
	for _, a := range spans["hf_model.forward_backward"] {
		keyed = keyed || (a["tuft.training_run_id"] == modelID && a["tuft.session_id"] == se)
	}
	if !keyed {
		t.Error("executor spans lack the correlation keys")
	}
	// Export resumed after the outage: spans of the last phase arrived.
	resumed := false
	for _, a := range spans["sampling_controller.create_sampling_session"] {
		resumed = resumed || strings.HasSuffix(a["tuft.sampling_session_id"], ":sample:2")
	}
	if !resumed {
		t.Error("no spans exported after the collector came back")
	}
	for _, m := range []string{"tuft.futures.created", "tuft.futures.completed", "tuft.futures.execution_time", "tuft.training.tokens_per_second",
		"tuft.sampling.requests", "tuft.resource.process.memory_used_bytes", "go.goroutine.count"} {
		if !metrics[m] {
			t.Errorf("collector received no metric %s", m)
		}
	}
	correlated := false
	for _, l := range logs {
		correlated = correlated || (l["_trace"] != "" && strings.Contains(l["_body"], "session created"))
	}
	if !correlated {
		t.Error("no trace-correlated log record arrived")
	}
	if t.Failed() {
		// What the two processes said helps tell a lost export from a late one.
		for _, f := range []string{filepath.Join(home, "server.log"), filepath.Join(out, "collector.log")} {
			b, _ := os.ReadFile(f)
			t.Logf("%s (last 4 KiB):\n%s", f, b[max(0, len(b)-4096):])
		}
	}
}
