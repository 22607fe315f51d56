package adversarial

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
)

// SIGKILL at random moments of a training loop that autosaves after every step and
// keeps overwriting a checkpoint (so kills land in the middle of saves, their renames
// and store commits): after each restart the store opens, every acknowledged
// checkpoint is listed and loads, and the run is restored from a trained state, never
// from a fresh adapter. (Each window of each write protocol is also hit on purpose by
// TestSaveAdapterSurvivesSIGKILL and TestStoreSurvivesSIGKILLInEveryWindow, which
// run.sh runs with this suite.)
func TestSIGKILLDuringTrainingAndSaves(t *testing.T) {
	home := t.TempDir()
	cfg := configYAML(t, testenv.FreePort(t), "", "")
	p, _ := launch(t, home, cfg)
	a := newTenant(t, p.base, testenv.KeyA)
	sess := a.session()
	model := a.model(sess, 0)
	fresh := a.loss(model, 1)
	seq := 2
	rng := rand.New(rand.NewPCG(3, 4))
	acked := map[string]bool{}
	samplers := 100
	seen := seq // one past the last seq_id whose result the loop saw
	for round := 0; round < 3; round++ {
		var mu sync.Mutex
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			c := testenv.NewClient(t, p.base, testenv.KeyA)
			c.HTTP.Timeout = 5 * time.Second
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				s := seq
				seq += 3
				mu.Unlock()
				name := fmt.Sprintf("r%d-%d", round, i%2) // overwritten: a save renames over an existing checkpoint
				ids := []string{}
				for _, op := range []struct {
					route string
					body  map[string]any
				}{
					{"/api/v1/forward_backward", map[string]any{"model_id": model, "seq_id": s, "forward_backward_input": map[string]any{"data": []any{datum(1, 8)}, "loss_fn": "cross_entropy"}}},
					{"/api/v1/optim_step", map[string]any{"model_id": model, "seq_id": s + 1, "adam_params": map[string]any{"learning_rate": 1e-2}}},
					{"/api/v1/save_weights", map[string]any{"model_id": model, "seq_id": s + 2, "path": name, "overwrite": true}},
				} {
					id, ok := post(c, p.base, op.route, op.body)
					if !ok {
						return
					}
					ids = append(ids, id)
				}
				// The save's result acknowledges the checkpoint.
				body, ok := retrieve(c, p.base, ids[2])
				if !ok {
					return
				}
				mu.Lock()
				seen = s + 3
				if contains(body, "tinker://") {
					acked["weights/"+name] = true
				}
				mu.Unlock()
			}
		}()
		time.Sleep(time.Duration(150+rng.IntN(500)) * time.Millisecond) // the kill lands wherever the loop is
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		close(stop)
		<-done
		p.kill()
		var ok bool
		p, ok = launch(t, home, cfg)
		if !ok {
			t.Fatalf("round %d: tuft does not start after SIGKILL:\n%s", round, p.logText())
		}
		a = newTenant(t, p.base, testenv.KeyA)
		a.c.Post("/api/v1/session_heartbeat", map[string]any{"session_id": sess}, nil)
		// The seq_ids in flight at the kill were abandoned: go on from the next expected.
		seq = nextSeq(t, a, model, seen)
		var cks struct {
			Checkpoints []struct {
				CheckpointID string `json:"checkpoint_id"`
				TinkerPath   string `json:"tinker_path"`
			} `json:"checkpoints"`
		}
		a.c.Do("GET", "/api/v1/training_runs/"+model+"/checkpoints", nil, nil).JSON(t, &cks)
		have := map[string]string{}
		for _, c := range cks.Checkpoints {
			have[c.CheckpointID] = c.TinkerPath
		}
		for id := range acked {
			path, ok := have[id]
			if !ok {
				t.Fatalf("round %d: acknowledged checkpoint %s lost (have %v)", round, id, have)
			}
			// It loads: a sampler opened on it.
			samplers++
			if r := a.c.Do("POST", "/api/v1/create_sampling_session", map[string]any{"session_id": sess, "sampling_session_seq_id": samplers,
				"model_path": path}, nil); r.Status != 200 {
				t.Fatalf("round %d: acknowledged checkpoint %s does not load: %d %s", round, id, r.Status, r.Body)
			}
		}
		t.Logf("round %d: %d acknowledged checkpoints intact after SIGKILL", round, len(acked))
	}
	// Trained, not fresh.
	if l := a.loss(model, seq); l == fresh {
		t.Fatalf("after the kills the run computes the fresh adapter's loss %v: restored from nothing", l)
	}
}
