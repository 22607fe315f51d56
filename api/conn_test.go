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

	"github.com/tuft-go/tuft/internal/testenv"
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
