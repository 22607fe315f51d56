// Package adversarial is the permanent suite of what one tenant (hostile or unlucky)
// must not be able to do to another, or to the server: crash it with a flood, starve it
// with stalled bodies, exhaust its memory with amplifying bodies, poison a run with
// extreme numbers, lose data to store damage or a SIGKILL inside a write, or keep using
// a checkpoint its owner withdrew. Tests that measure a process (file descriptors,
// memory) or kill one run the real `tuft` binary; the others run a server in process,
// under the race detector in CI (tests/adversarial/run.sh).
package adversarial

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// tuftBin builds the tuft binary once for the whole suite.
func tuftBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tuft-adversarial-*")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "tuft")
		if out, err := exec.Command("go", "build", "-o", binPath, "github.com/tuft-go/tuft/cmd/tuft").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("build tuft: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// proc is a running `tuft launch`.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	home   string
	base   string
	log    string
	exited chan struct{} // closed once the process has exited and been reaped
}

// configYAML is a server config with the tiny model and both test tenants; server adds
// keys to the server section (", key: value"), extra more sections.
func configYAML(t *testing.T, port int, server, extra string) string {
	return fmt.Sprintf(`server: {host: 127.0.0.1, port: %d, long_poll_seconds: 2%s}
models:
  - {name: tuft/tiny, path: %s, max_lora_rank: 32}
auth:
  api_keys:
    - {tenant: alice, key_sha256: %s}
    - {tenant: bob, key_sha256: %s}
persistence: {mode: embedded}
%s`, port, server, testenv.TinyDir(t), testenv.HashKey(testenv.KeyA), testenv.HashKey(testenv.KeyB), extra)
}

// launch starts `tuft launch` in home with cfg and waits until it answers (or fails:
// then ok is false and the log says why).
func launch(t *testing.T, home, cfg string) (p *proc, ok bool) {
	t.Helper()
	cfgPath := filepath.Join(home, "tuft_config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	port := ""
	for _, line := range strings.Split(cfg, "\n") {
		if i := strings.Index(line, "port: "); i >= 0 {
			port = strings.TrimRight(strings.Fields(line[i+6:])[0], ",}")
		}
	}
	logPath := filepath.Join(home, "server.log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tuftBin(t), "launch", "--config", cfgPath)
	cmd.Env = append(os.Environ(), "TUFT_HOME="+home)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); lf.Close(); close(exited) }()
	p = &proc{t: t, cmd: cmd, home: home, base: "http://127.0.0.1:" + port, log: logPath, exited: exited}
	t.Cleanup(func() { p.kill() })
	c := testenv.NewClient(t, p.base, "")
	c.HTTP.Timeout = time.Second
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			return p, false
		default:
		}
		if resp, err := c.HTTP.Get(p.base + "/api/v1/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p, true
			}
		}
	}
	t.Fatalf("tuft did not start:\n%s", p.logText())
	return p, false
}

func (p *proc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop ends the server with SIGTERM (a clean shutdown) and waits for it.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.kill()
	}
}

// status reads a field of /proc/<pid>/status in KiB (VmRSS, VmHWM).
func (p *proc) status(field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		p.t.Skipf("no /proc here: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == field+":" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

// resetPeak makes VmHWM the current RSS (Linux: clear_refs 5).
func (p *proc) resetPeak() {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.cmd.Process.Pid), []byte("5"), 0); err != nil {
		p.t.Skipf("cannot reset the peak RSS here: %v", err)
	}
}

// fds counts the open file descriptors of the server.
func (p *proc) fds() int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	if err != nil {
		p.t.Skipf("no /proc here: %v", err)
	}
	return len(ents)
}
