package api_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
)

// roundTrip sends one HTTP/1.1 request with keep-alive on a fresh connection and reports
// the reply and whether the server then closed the connection.
func roundTrip(t *testing.T, url, path, key string) (*http.Response, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"sdk_version":"0.38.0"}`
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nContent-Type: application/json\r\nX-API-Key: %s\r\nContent-Length: %d\r\n\r\n%s",
		path, key, len(body), body)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// A kept-alive connection stays open: the read waits out the deadline. A closed one
	// reads EOF at once.
	if err := conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err = br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return resp, false
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("%s: after the reply, read %v; want EOF or a timeout", path, err)
	}
	return resp, true
}

// TestClientConfigClosesConnection keeps the fix for the SDK's 45-second poll stall (see
// closeAfter): the client/config reply closes its connection, whatever its outcome, and
// other routes keep theirs alive.
func TestClientConfigClosesConnection(t *testing.T) {
	t.Parallel()
	s := testenv.Start(t, testenv.Config(t, t.TempDir(), "embedded"))
	for _, tc := range []struct {
		path, key string
		code      int
		closed    bool
	}{
		{"/api/v1/client/config", testenv.KeyA, http.StatusOK, true},
		{"/api/v1/client/config", "tml-not-a-key", http.StatusUnauthorized, true},
		{"/api/v1/client/dynamic_config", testenv.KeyA, http.StatusOK, false},
	} {
		resp, closed := roundTrip(t, s.URL(), tc.path, tc.key)
		if resp.StatusCode != tc.code {
			t.Errorf("%s with key %s: status %d, want %d", tc.path, tc.key, resp.StatusCode, tc.code)
		}
		if closed != tc.closed || resp.Close != tc.closed {
			t.Errorf("%s with key %s: connection closed %v (Connection: %q), want %v", tc.path, tc.key, closed, resp.Header.Get("Connection"), tc.closed)
		}
	}
}

// dialFrom opens a raw connection to base from the local address ip.
func dialFrom(t *testing.T, base string, ip net.IP) *rawConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
	c, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

// A connection none of whose requests carried a valid key is closed after
// server.unauthenticated_idle_timeout_seconds idle (one that sent nothing too); an
// authenticated one keeps server.idle_timeout_seconds (finding 4 of issue 22).
func TestUnauthenticatedConnectionsIdleOutSooner(t *testing.T) {
	t.Parallel()
	base := limitsServer(t, func(c *config.Config) { c.Server.UnauthenticatedIdleTimeoutSeconds = 0.3 })
	keyless := dialRaw(t, base)
	keyless.send("GET", "/api/v1/healthz", "", 0, "")
	if _, _, ok := keyless.response(3 * time.Second); !ok {
		t.Fatal("healthz not answered")
	}
	silent := dialRaw(t, base)
	authed := dialRaw(t, base)
	authed.send("GET", "/api/v1/sessions", testenv.KeyA, 0, "")
	if r, _, ok := authed.response(3 * time.Second); !ok || r.StatusCode != 200 {
		t.Fatalf("sessions: %v %v", ok, r)
	}
	if !keyless.closedWithin(3 * time.Second) {
		t.Error("an idle keyless connection stays open past server.unauthenticated_idle_timeout_seconds")
	}
	if !silent.closedWithin(3 * time.Second) {
		t.Error("a connection that sent nothing stays open past server.unauthenticated_idle_timeout_seconds")
	}
	if authed.closedWithin(time.Second) {
		t.Error("an authenticated idle connection was closed after the keyless idle timeout")
	}
	authed.send("GET", "/api/v1/sessions", testenv.KeyA, 0, "")
	if r, _, ok := authed.response(3 * time.Second); !ok || r.StatusCode != 200 {
		t.Fatalf("sessions again on the kept connection: %v %v", ok, r)
	}
}

// One address holds at most server.max_connections_per_address connections: a new one
// evicts the address's own idle connection, or is closed when all of them are busy;
// another address is served throughout (finding 4 of issue 22).
func TestConnectionsPerAddressCap(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Server.MaxConnectionsPerAddress, cfg.Server.ReadBodyTimeoutSeconds = 4, 30
	s := testenv.Start(t, cfg)
	one, two := net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2)
	idle := dialFrom(t, s.URL(), one)
	idle.send("GET", "/api/v1/sessions", testenv.KeyA, 0, "")
	if _, _, ok := idle.response(3 * time.Second); !ok {
		t.Fatal("not served")
	}
	for i := 0; i < 3; i++ {
		dialFrom(t, s.URL(), one).send("POST", "/api/v1/create_session", testenv.KeyA, 1000, "{")
	}
	check.Eventually(t, 10*time.Second, "4 open connections, 1 idle", func() bool { st := s.Conns.Stats(); return st.Open == 4 && st.Idle == 1 })
	// A fifth from the same address evicts its idle one...
	fifth := dialFrom(t, s.URL(), one)
	fifth.send("GET", "/api/v1/sessions", testenv.KeyA, 0, "")
	if _, _, ok := fifth.response(3 * time.Second); !ok {
		t.Fatal("a fifth connection was refused while the address had an idle one")
	}
	if !idle.closedWithin(3 * time.Second) {
		t.Fatal("the address's idle connection was not evicted")
	}
	// ...and once all four are busy, a sixth is closed at once.
	fifth.send("POST", "/api/v1/create_session", testenv.KeyA, 1000, "{")
	check.Eventually(t, 10*time.Second, "4 open connections, none idle", func() bool { st := s.Conns.Stats(); return st.Open == 4 && st.Idle == 0 })
	if !dialFrom(t, s.URL(), one).closedWithin(3 * time.Second) {
		t.Fatal("a connection over server.max_connections_per_address stays open")
	}
	other := dialFrom(t, s.URL(), two)
	other.send("GET", "/api/v1/sessions", testenv.KeyB, 0, "")
	if r, _, ok := other.response(3 * time.Second); !ok || r.StatusCode != 200 {
		t.Fatalf("another address: %v %v", ok, r)
	}
}
