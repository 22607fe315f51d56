package api

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/config"
)

// stallingBody yields some bytes, then fails as a read deadline would.
type stallingBody struct{ r io.Reader }

func (b *stallingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, errors.New("stalled")
	}
	return n, err
}

func (b *stallingBody) Close() error { return nil }

// The body buffer follows the bytes that arrive, not the Content-Length a client
// declares: a 63 MiB declaration that sends 1 KiB costs kilobytes.
func TestReadBodyDoesNotAllocateTheDeclaredLength(t *testing.T) {
	h := &Handler{opt: OptionsFrom(config.Default(""))}
	req := httptest.NewRequest("POST", "/api/v1/forward_backward", &stallingBody{strings.NewReader(strings.Repeat("x", 1024))})
	req.ContentLength = 63 << 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w := httptest.NewRecorder()
	if _, ok := h.readBody(w, req); ok {
		t.Fatal("a stalled body was accepted")
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("reading 1 KiB of a body declared 63 MiB allocated %d bytes", got)
	}
	if w.Code != http.StatusBadRequest {
		t.Fatalf("status %d", w.Code)
	}
}
