package testenv_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/worker"
)

// The scenario builders leave what they say on the server: a session of the caller's
// tenant, and a training run of Model in it.
func TestScenarioBuilders(t *testing.T) {
	t.Parallel()
	s := testenv.Start(t, testenv.Config(t, t.TempDir(), "memory"))
	c := testenv.NewClient(t, s.URL(), testenv.KeyA)
	session := c.NewSession()
	if r := c.Do("GET", "/api/v1/sessions/"+session, nil, nil); r.Status != 200 {
		t.Fatalf("the new session: %d %s", r.Status, r.Body)
	}
	if r := testenv.NewClient(t, s.URL(), testenv.KeyB).Do("GET", "/api/v1/sessions/"+session, nil, nil); r.Status == 200 {
		t.Fatal("another tenant sees the session")
	}
	model := c.NewTrainingRun(session, map[string]any{"rank": 4})
	var info struct {
		ModelID   string `json:"model_id"`
		ModelName string `json:"model_name"`
		LoraRank  int    `json:"lora_rank"`
	}
	r := c.Post("/api/v1/get_info", map[string]any{"model_id": model}, nil)
	if err := json.Unmarshal(r.Body, &info); err != nil || info.ModelID != model || info.ModelName != testenv.Model || info.LoraRank != 4 {
		t.Fatalf("get_info of the new run: %v %s", err, r.Body)
	}
}

// ServeWorker serves the executor it is given: a remote executor dialled to it sees its
// models.
func TestServeWorker(t *testing.T) {
	t.Parallel()
	addr, _ := testenv.ServeWorker(t, testenv.NewNoopExecutor(), worker.ServerOptions{Token: "tok"})
	rem, err := backend.DialRemote(context.Background(), addr, withToken(backend.RemoteOptionsFrom(config.Default("").Workers), "tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Close()
	if ms := rem.Models(); len(ms) != 1 || ms[0].Name != testenv.Model {
		t.Fatalf("models through the worker: %+v", ms)
	}
}

func withToken(o backend.RemoteOptions, token string) backend.RemoteOptions {
	o.Token = token
	return o
}
