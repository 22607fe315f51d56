// Package restart checks crash safety with real processes: `tuft launch` is killed with
// SIGKILL in the middle of a run and started again on the same embedded store.
package restart

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
)

type proc struct {
	cmd *exec.Cmd
	log *os.File
}

func launch(t *testing.T, bin, home, cfg string) *proc {
	t.Helper()
	lf, err := os.OpenFile(filepath.Join(home, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "launch", "--config", cfg)
	cmd.Env = append(os.Environ(), "TUFT_HOME="+home)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, log: lf}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait(); lf.Close() })
	return p
}

func waitHealthy(t *testing.T, base string, p *proc, home string) {
	t.Helper()
	c := testenv.NewClient(t, base, "")
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 200*time.Millisecond)
		if err == nil {
			conn.Close()
			if r := c.Do("GET", "/api/v1/healthz", nil, nil); r.Status == 200 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := os.ReadFile(filepath.Join(home, "server.log"))
	t.Fatalf("server did not become healthy:\n%s", b)
}

func TestSIGKILLMidRunLosesNothingCompleted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	bin := testenv.BuildTuft(t)
	home := t.TempDir()
	port := testenv.FreePort(t)
	cfgPath := filepath.Join(home, "tuft_config.yaml")
	cfg := fmt.Sprintf(`server: {host: 127.0.0.1, port: %d, long_poll_seconds: 2}
models:
  - {name: tuft/tiny, path: %s, max_lora_rank: 32}
auth:
  api_keys:
    - {tenant: alice, key_sha256: %s}
persistence: {mode: embedded}
`, port, testenv.TinyDir(t), testenv.HashKey(testenv.KeyA))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := launch(t, bin, home, cfgPath)
	waitHealthy(t, base, p, home)
	c := testenv.NewClient(t, base, testenv.KeyA)

	sess := c.NewSession()
	model := c.NewTrainingRun(sess, map[string]any{"rank": 8, "seed": 3, "train_attn": true, "train_mlp": true, "train_unembed": true})
	datum := map[string]any{
		"model_input":    map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{10, 11, 12, 13, 14, 15, 16, 17}}}},
		"loss_fn_inputs": map[string]any{"target_tokens": map[string]any{"data": []int{11, 12, 13, 14, 15, 16, 17, 18}, "dtype": "int64"}, "weights": map[string]any{"data": []float64{1, 1, 1, 1, 1, 1, 1, 1}, "dtype": "float32"}},
	}
	fb := func(seq int, forwardOnly bool) string {
		key, route := "forward_backward_input", "/api/v1/forward_backward"
		if forwardOnly {
			key, route = "forward_input", "/api/v1/forward"
		}
		var ff struct {
			RequestID string `json:"request_id"`
		}
		c.Post(route, map[string]any{"model_id": model, "seq_id": seq, key: map[string]any{"data": []any{datum}, "loss_fn": "cross_entropy"}}, &ff)
		return ff.RequestID
	}
	opt := func(seq int) string {
		var ff struct {
			RequestID string `json:"request_id"`
		}
		c.Post("/api/v1/optim_step", map[string]any{"model_id": model, "seq_id": seq, "adam_params": map[string]any{"learning_rate": 0.01}}, &ff)
		return ff.RequestID
	}
	loss := func(id string) float64 {
		var out struct {
			Metrics map[string]float64 `json:"metrics"`
		}
		c.Result(id, &out)
		return out.Metrics["loss:sum"]
	}
	seq := 1
	var done []string
	for i := 0; i < 3; i++ {
		done = append(done, fb(seq, false), opt(seq+1))
		seq += 2
	}
	for _, id := range done {
		c.Result(id, nil)
	}
	var sv struct {
		RequestID string `json:"request_id"`
	}
	c.Post("/api/v1/save_weights", map[string]any{"model_id": model, "path": "before-crash", "seq_id": seq}, &sv)
	c.Result(sv.RequestID, nil)
	seq++
	before := loss(fb(seq, true))
	seq++

	// Queue work that cannot have finished when the process dies: seq+1 waits for seq,
	// which is never sent.
	pending := opt(seq + 1)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = p.cmd.Process.Wait()

	p2 := launch(t, bin, home, cfgPath)
	waitHealthy(t, base, p2, home)

	// Completed results are still retrievable.
	for _, id := range done {
		c.Result(id, nil)
	}
	// The in-flight future is resolved, as failed, with a message saying why.
	r := c.Wait(pending, "")
	var fail struct{ Error, Category string }
	r.JSON(t, &fail)
	if !strings.Contains(fail.Error, "restart") {
		t.Fatalf("in-flight future after restart: %d %s", r.Status, r.Body)
	}
	// Records are back.
	var runs struct {
		TrainingRuns []struct {
			TrainingRunID string `json:"training_run_id"`
		} `json:"training_runs"`
	}
	c.Do("GET", "/api/v1/training_runs", nil, nil).JSON(t, &runs)
	if len(runs.TrainingRuns) != 1 || runs.TrainingRuns[0].TrainingRunID != model {
		t.Fatalf("runs after restart: %+v", runs)
	}
	var cks struct {
		Checkpoints []struct {
			CheckpointID string `json:"checkpoint_id"`
		} `json:"checkpoints"`
	}
	c.Do("GET", "/api/v1/training_runs/"+model+"/checkpoints", nil, nil).JSON(t, &cks)
	if len(cks.Checkpoints) != 1 || cks.Checkpoints[0].CheckpointID != "weights/before-crash" {
		t.Fatalf("checkpoints after restart: %+v", cks)
	}
	// The adapter is restored from its latest state: the same forward gives the same loss.
	after := loss(fb(seq, true))
	if before != after {
		t.Fatalf("restored adapter differs: loss %v before the crash, %v after", before, after)
	}
	// Training continues.
	c.Result(opt(seq+1), nil)
	sc := bufio.NewScanner(strings.NewReader(""))
	_ = sc
	_ = json.Valid
}
