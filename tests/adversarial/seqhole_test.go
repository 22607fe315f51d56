package adversarial

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
)

// Finding 6 of issue 22: a body that is not JSON as Go reads it (a NaN literal, which
// Python's json.dumps writes for float("nan")) from any client but the official SDK left
// its seq_id unsettled: the run's next operation waited server.seq_gap_timeout (300 s)
// and failed. A refusal settles the seq_id it names whenever the body's model_id and
// seq_id can be read, whoever sent it; the SDK's User-Agent plays no part.
func TestMalformedBodySettlesSeqIDForEveryClient(t *testing.T) {
	s := testenv.Start(t, testenv.Config(t, t.TempDir(), "memory"))
	a := newTenant(t, s.URL(), testenv.KeyA)
	model := a.model(a.session(), 0)
	for i, c := range []struct{ route, body, ua string }{
		{"/api/v1/optim_step", `{"model_id":%q,"seq_id":%d,"adam_params":{"learning_rate":NaN}}`, "tuft-go-client/1"},
		{"/api/v1/forward_backward", `{"model_id":%q,"seq_id":%d,"forward_backward_input":{"loss_fn":"cross_entropy","data":[` +
			`{"model_input":{"chunks":[{"type":"encoded_text","tokens":[1,2]}]},"loss_fn_inputs":{"weights":{"data":[NaN,Infinity],"dtype":"float32"}}}]}}`, "python-requests/2.32"},
		{"/api/v1/save_weights", `{"model_id":%q,"seq_id":%d,"path":NaN}`, ""},
	} {
		body := fmt.Sprintf(c.body, model, i+1)
		r := a.c.Do("POST", c.route, []byte(body), map[string]string{"User-Agent": c.ua})
		if r.Status != http.StatusBadRequest {
			t.Fatalf("%s with a NaN literal: %d %s, want 400", c.route, r.Status, r.Body)
		}
	}
	// The next seq_id runs at once: it does not wait for the three refused ones.
	var f future
	a.c.Post("/api/v1/forward_backward", map[string]any{"model_id": model, "seq_id": 4,
		"forward_input": map[string]any{"data": []any{datum(1, 8)}, "loss_fn": "cross_entropy"}}, &f)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := a.c.Do("POST", "/api/v1/retrieve_future", map[string]any{"request_id": f.RequestID}, nil)
		if r.Status == http.StatusOK {
			var res map[string]any
			_ = json.Unmarshal(r.Body, &res)
			if _, failed := res["error"]; failed || !strings.Contains(string(r.Body), "loss") {
				t.Fatalf("the forward after the refusals: %s", r.Body)
			}
			return
		}
		if r.Status != http.StatusRequestTimeout {
			t.Fatalf("retrieve_future: %d %s", r.Status, r.Body)
		}
		if time.Now().After(deadline) {
			t.Fatal("the forward after three refused seq_ids still waits after 20 s: a refused body left a seq_id hole")
		}
	}
}
