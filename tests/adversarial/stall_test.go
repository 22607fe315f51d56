package adversarial

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
)

// stall opens a connection and sends a request head that declares a body (or, with
// partialHead, only part of a head), then the first bytes of the body, and stalls.
func stall(t *testing.T, base, key string, contentLength int64, part string, partialHead bool) net.Conn {
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	head := "POST /api/v1/forward_backward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
	if key != "" {
		head += "X-API-Key: " + key + "\r\n"
	}
	if partialHead {
		_, _ = io.WriteString(c, head)
		return c
	}
	_, _ = fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n%s", head, contentLength, part)
	return c
}

// outcome reads what the server does with a stalled connection within d: the status of
// its answer (0: none) and whether it then closed the connection.
func outcome(c net.Conn, d time.Duration) (status int, closed bool) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	br := bufio.NewReader(c)
	if r, err := http.ReadResponse(br, nil); err == nil {
		status = r.StatusCode
		io.Copy(io.Discard, r.Body)
	}
	_, err := io.Copy(io.Discard, br)
	ne, isNet := err.(net.Error)
	return status, err == nil || !(isNet && ne.Timeout())
}

// Stalled bodies, with and without a key, and stalled request heads cannot make the
// server answer nobody: a fresh client is answered at once throughout, anonymous stalls
// are answered 401 and closed at once, authenticated ones are cut at
// server.read_body_timeout_seconds (408), heads at server.read_header_timeout_seconds,
// and the server's file descriptors and memory return to where they were.
func TestStalledBodiesAndHeadsCannotStarveTheServer(t *testing.T) {
	home := t.TempDir()
	port := testenv.FreePort(t)
	p, _ := launch(t, home, configYAML(t, port, ", read_body_timeout_seconds: 3, read_header_timeout_seconds: 3", ""))
	fds0, rss0 := p.fds(), p.status("VmRSS")
	p.resetPeak()

	const anon, authed, heads = 200, 100, 50
	var conns []net.Conn
	start := time.Now()
	for i := 0; i < anon; i++ {
		conns = append(conns, stall(t, p.base, "", 63<<20, "", false))
	}
	for i := 0; i < authed; i++ {
		conns = append(conns, stall(t, p.base, testenv.KeyA, 63<<20, `{"model_id": "x", "pad": "`+strings.Repeat("y", 1024), false))
	}
	for i := 0; i < heads; i++ {
		conns = append(conns, stall(t, p.base, "", 0, "", true))
	}
	// Throughout the stalls, other clients are answered at once.
	b := testenv.NewClient(t, p.base, testenv.KeyB)
	var worst time.Duration
	for i := 0; i < 10; i++ {
		t0 := time.Now()
		if r := b.Do("GET", "/api/v1/healthz", nil, nil); r.Status != 200 {
			t.Fatalf("healthz during the stalls: %d", r.Status)
		}
		if r := b.Do("POST", "/api/v1/create_session", map[string]any{"tags": []string{}}, nil); r.Status != 200 {
			t.Fatalf("create_session of another tenant during the stalls: %d %s", r.Status, r.Body)
		}
		worst = max(worst, time.Since(t0))
	}
	hwm := p.status("VmHWM")
	fdsDuring := p.fds()

	type res struct {
		status int
		closed bool
		after  time.Duration
	}
	results := make([]res, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, closed := outcome(c, 10*time.Second)
			results[i] = res{st, closed, time.Since(start)}
		}()
	}
	wg.Wait()
	var anonMax, authedMax, headMax time.Duration
	for i, r := range results {
		switch {
		case i < anon:
			if r.status != http.StatusUnauthorized || !r.closed {
				t.Fatalf("anonymous stall %d: status %d, closed %v", i, r.status, r.closed)
			}
			anonMax = max(anonMax, r.after)
		case i < anon+authed:
			if r.status != http.StatusRequestTimeout || !r.closed {
				t.Fatalf("authenticated stall %d: status %d, closed %v", i, r.status, r.closed)
			}
			authedMax = max(authedMax, r.after)
		default:
			if !r.closed {
				t.Fatalf("stalled head %d left open", i)
			}
			headMax = max(headMax, r.after)
		}
	}
	if authedMax > 6*time.Second || headMax > 6*time.Second {
		t.Fatalf("stalls cut after %s (bodies) and %s (heads); the timeouts are 3 s", authedMax, headMax)
	}
	check.Eventually(t, 10*time.Second, "file descriptors back to the baseline", func() bool { return p.fds() <= fds0+5 })
	t.Logf("%d anonymous stalls answered 401 and closed within %s; %d authenticated stalls answered 408 and closed by %s; "+
		"%d stalled heads closed by %s; other clients' worst latency meanwhile %s; fds %d → %d (during) → %d; RSS %d KiB, peak %d KiB (+%d KiB)",
		anon, anonMax.Round(time.Millisecond), authed, authedMax.Round(time.Millisecond), heads, headMax.Round(time.Millisecond),
		worst.Round(time.Millisecond), fds0, fdsDuring, p.fds(), rss0, hwm, hwm-rss0)
	if hwm-rss0 > 64<<10 {
		t.Fatalf("%d stalled 63 MiB uploads of 1 KiB each raised the peak RSS by %d KiB", authed, hwm-rss0)
	}
}
