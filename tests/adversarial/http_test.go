package adversarial

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
)

// post submits an operation with a raw client (no test failure when the server dies);
// ok is false unless it was accepted.
func post(c *testenv.Client, base, route string, body any) (string, bool) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", base+route, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", c.Key)
	r, err := c.HTTP.Do(req)
	if err != nil {
		return "", false
	}
	defer r.Body.Close()
	var f future
	if r.StatusCode != http.StatusOK || json.NewDecoder(r.Body).Decode(&f) != nil {
		return "", false
	}
	return f.RequestID, true
}

// retrieve long-polls a future with a raw client (no test failure when the server dies);
// ok is false when the server did not answer.
func retrieve(c *testenv.Client, base, id string) (string, bool) {
	for i := 0; i < 20; i++ {
		req, _ := http.NewRequest("POST", base+"/api/v1/retrieve_future", strings.NewReader(`{"request_id":"`+id+`"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", c.Key)
		r, err := c.HTTP.Do(req)
		if err != nil {
			return "", false
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode == http.StatusRequestTimeout {
			continue
		}
		return string(b), r.StatusCode == 200
	}
	return "", false
}

// nextSeq finds the seq_id a run expects next after a restart, at or above from (one
// past the last seq_id whose result the client saw): every seq_id below it is refused
// (409, executed or submitted before), and the first accepted one is it. The probe (a
// forward pass) uses it up: the returned seq_id is the one after.
func nextSeq(t *testing.T, a *tenant, model string, from int) int {
	t.Helper()
	for s := from; s < from+1000; s++ {
		r := a.c.Do("POST", "/api/v1/forward_backward", map[string]any{"model_id": model, "seq_id": s,
			"forward_input": map[string]any{"data": []any{datum(1, 8)}, "loss_fn": "cross_entropy"}}, nil)
		switch r.Status {
		case http.StatusConflict:
			continue
		case http.StatusOK:
			var f future
			r.JSON(t, &f)
			a.c.Wait(f.RequestID, "")
			return s + 1
		default:
			t.Fatalf("probe seq_id %d: %d %s", s, r.Status, r.Body)
		}
	}
	t.Fatal("no seq_id accepted")
	return 0
}
