// Package browser is the web console's browser suite (issue 27): a real headless
// Chromium (Debian's `chromium`), driven over the DevTools protocol with chromedp,
// against the real `tuft launch` binary on the built-in tiny model with two tenants
// (alice and bob) and an operator key. Tenant A's records come from the official Tinker
// SDK (train.py, run by the SDK 0.38.0 venv of tests/conformance) while the browser
// watches; tenant B's from the Go client. TestConsoleFirefox is a smoke test of the same
// pages in Debian's headless firefox-esr, driven over WebDriver BiDi (bidi_test.go).
//
// Without a browser or the SDK venv a test skips, saying which is missing, unless
// TUFT_REQUIRE_BROWSER=1 (CI, tests/browser/run.sh), where it fails. With
// TUFT_BROWSER_SCREENSHOTS=docs/console it writes the screenshots docs/console.md shows;
// otherwise into a temporary folder. A failed scenario saves a screenshot of its tab
// into TUFT_BROWSER_ARTIFACTS (default: a folder under the temporary directory) and
// logs where.
package browser

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// root is the repository root (go test runs in tests/browser).
var root = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}()

// sessionTTL is console.session_ttl_seconds in the suite's config: the cookie's expiry
// must match it.
const sessionTTL = time.Hour

// require fails (TUFT_REQUIRE_BROWSER=1) or skips the test for a missing prerequisite.
func require(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("TUFT_REQUIRE_BROWSER") == "1" {
		t.Fatalf("%s (TUFT_REQUIRE_BROWSER=1)", msg)
	}
	t.Skipf("%s; scripts/setup.sh installs it (set TUFT_REQUIRE_BROWSER=1 to fail instead)", msg)
}

// chromiumPath finds Debian's chromium (TUFT_CHROMIUM overrides).
func chromiumPath(t *testing.T) string {
	t.Helper()
	return browserPath(t, "TUFT_CHROMIUM", "chromium", "chromium", "chromium-browser")
}

// browserPath finds a browser: the executable the environment variable env names, else
// the first of names on PATH; pkg is the Debian package that installs it.
func browserPath(t *testing.T, env, pkg string, names ...string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			require(t, "%s=%s is not an executable", env, p)
		}
		return p
	}
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	require(t, "no %s on PATH (Debian package %s)", names[0], pkg)
	return ""
}

// sdkPython is the Tinker SDK 0.38.0 venv's python (tests/conformance/venvs.sh).
func sdkPython(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("TUFT_SDK_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "tuft", "sdk")
	}
	py := filepath.Join(cache, "0.38.0", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		require(t, "no Tinker SDK 0.38.0 venv at %s", py)
	}
	return py
}

// server is a running `tuft launch`.
type server struct {
	base              string
	keyA, keyB, keyOp string
	log               string
}

func newKey() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "tml-" + hex.EncodeToString(b)
}

// startServer builds tuft and starts `tuft launch` on embedded defaults with the tiny
// model, tenants alice (keyA) and bob (keyB) and an operator key, recording each
// session's spans (sessions.record_spans, the session trace page; set explicitly in case the default changes); stopped
// at cleanup.
func startServer(t *testing.T) *server {
	t.Helper()
	work := t.TempDir()
	bin := filepath.Join(work, "tuft")
	build := exec.Command("go", "build", "-o", bin, "./cmd/tuft")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build tuft: %v\n%s", err, out)
	}
	hash := func(key string) string {
		out, err := exec.Command(bin, "key", "hash", key).Output()
		if err != nil {
			t.Fatalf("tuft key hash: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	s := &server{keyA: newKey(), keyB: newKey(), keyOp: newKey(), log: filepath.Join(work, "server.log")}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s.base = fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := fmt.Sprintf(`server: {host: 127.0.0.1, port: %d, log_level: info}
models:
  - {name: tuft/tiny, preset: tiny, max_context_length: 1024, max_lora_rank: 32}
auth:
  api_keys:
    - {tenant: alice, key_sha256: %s}
    - {tenant: bob, key_sha256: %s}
  operator_key_sha256: %s
sessions: {record_spans: true}
console: {enabled: true, session_ttl_seconds: %d}
`, port, hash(s.keyA), hash(s.keyB), hash(s.keyOp), int(sessionTTL/time.Second))
	cfgPath := filepath.Join(work, "tuft_config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "launch", "--config", cfgPath)
	cmd.Env = append(os.Environ(), "TUFT_HOME="+filepath.Join(work, "home"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("server log (tail):\n%s", tail(s.log, 60))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.base + "/api/v1/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-exited:
			t.Fatalf("tuft launch exited:\n%s", tail(s.log, 60))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("tuft launch not healthy after 60s:\n%s", tail(s.log, 60))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// trainer is train.py running under the official SDK for tenant A: the suite reads its
// facts (JSON lines) and paces its steps.
type trainer struct {
	cmd    *exec.Cmd
	stdin  *os.File
	facts  chan map[string]any
	stderr *strings.Builder
	mu     *sync.Mutex
}

// startTrainer runs train.py with STEPS steps; cleanup kills it if still running.
func startTrainer(t *testing.T, py string, s *server, steps int) *trainer {
	t.Helper()
	cmd := exec.Command(py, filepath.Join(root, "tests", "browser", "train.py"))
	cmd.Env = append(os.Environ(), "TINKER_BASE_URL="+s.base, "TINKER_API_KEY="+s.keyA, "TUFT_MODEL=tuft/tiny",
		fmt.Sprintf("TUFT_STEPS=%d", steps))
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = pr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	tr := &trainer{cmd: cmd, stdin: pw, facts: make(chan map[string]any, 64), stderr: &strings.Builder{}, mu: &sync.Mutex{}}
	cmd.Stderr = lockedWriter{tr.mu, tr.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var fact map[string]any
			if err := json.Unmarshal(sc.Bytes(), &fact); err == nil {
				tr.facts <- fact
			}
		}
		close(tr.facts)
	}()
	t.Cleanup(func() {
		pw.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return tr
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// next reads the trainer's next fact, which must be event; fails after timeout.
func (tr *trainer) next(t *testing.T, event string, timeout time.Duration) map[string]any {
	t.Helper()
	select {
	case f, ok := <-tr.facts:
		if !ok {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			t.Fatalf("train.py ended before %q:\n%s", event, tr.stderr.String())
		}
		if f["event"] != event {
			t.Fatalf("train.py said %v, want event %q", f, event)
		}
		return f
	case <-time.After(timeout):
		tr.mu.Lock()
		defer tr.mu.Unlock()
		t.Fatalf("train.py said nothing for %v waiting for %q:\n%s", timeout, event, tr.stderr.String())
	}
	return nil
}

// step lets train.py run its next step.
func (tr *trainer) step(t *testing.T) {
	t.Helper()
	if _, err := tr.stdin.WriteString("next\n"); err != nil {
		t.Fatalf("train.py stdin: %v", err)
	}
}
