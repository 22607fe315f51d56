package adversarial

import (
	"archive/tar"
	"bytes"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine/safetensors"
	"github.com/tuft-go/tuft/internal/testenv"
)

// The gap left by issue 22's finding 10: a copy of another tenant's published checkpoint
// no longer carried the owner's optimizer state, but load_weights with the optimizer (and
// create-via-load with it, the SDK's create_training_client_from_state_with_optimizer)
// still put the owner's Adam moments into the reader's run, where saving and downloading
// handed them over. Another tenant now loads a published checkpoint's weights only;
// asking for the optimizer is a 400 saying the optimizer state is the owner's
// (docs/security.md, "Round two: finished sessions, copies, ...").

// tarFile is the file name in the tar stream b (the test fails without it).
func tarFile(t *testing.T, b []byte, name string) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("archive: no %s (%v)", name, err)
		}
		if h.Name == name {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("archive: %s: %v", name, err)
			}
			return data
		}
	}
}

// moments reads the optimizer moments of a safetensors file: tensor name → values.
func moments(t *testing.T, f *safetensors.File) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for _, x := range f.Tensors {
		if !strings.Contains(x.Name, ".exp_avg") {
			continue
		}
		v, err := x.Float32()
		if err != nil {
			t.Fatalf("%s: %v", x.Name, err)
		}
		out[x.Name] = v
	}
	return out
}

func nonzero(v []float32) bool {
	return slices.ContainsFunc(v, func(x float32) bool { return x != 0 })
}

func TestReaderOfAPublishedCheckpointGetsNoOptimizerState(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	s := testenv.Start(t, cfg)
	a, b := newTenant(t, s.URL(), testenv.KeyA), newTenant(t, s.URL(), testenv.KeyB)
	owner := a.model(a.session(), 0)
	a.c.Result(a.fb(owner, 1), nil)
	a.c.Result(a.optim(owner, 2, 1e-2), nil) // the owner's Adam moments: nonzero
	pub := savedCheckpoint(a, owner, "pub", 3)
	if r := a.c.Do("POST", "/api/v1/training_runs/"+owner+"/checkpoints/weights/pub/publish", nil, nil); r.Status != http.StatusNoContent {
		t.Fatalf("publish: %d %s", r.Status, r.Body)
	}
	of, err := safetensors.ReadFile(filepath.Join(cfg.CheckpointDir, owner, "weights", "pub", "optimizer.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	ownerM := moments(t, of)
	live := 0
	for _, v := range ownerM {
		if nonzero(v) {
			live++
		}
	}
	if live == 0 {
		t.Fatalf("the owner's checkpoint holds no nonzero moments (of %d): the test would prove nothing", len(ownerM))
	}

	sessB := b.session()
	legacy := b.model(sessB, 0)
	forms := []struct {
		name string
		// load loads pub into a run of b's, with the optimizer or not, and returns the
		// answer, the run and its next seq_id (the load done when it was accepted).
		load func(optimizer bool) (*testenv.Response, string, int)
	}{
		{"load_weights", func(optimizer bool) (*testenv.Response, string, int) {
			seq := 1 // a refused load settles its seq_id: the weights-only load is 2
			if !optimizer {
				seq = 2
			}
			r := b.c.Do("POST", "/api/v1/load_weights", map[string]any{"model_id": legacy, "path": pub, "optimizer": optimizer, "seq_id": seq}, nil)
			if r.Status == 200 {
				var f future
				r.JSON(t, &f)
				b.c.Result(f.RequestID, nil)
			}
			return r, legacy, seq + 1
		}},
		{"create-via-load (create_training_client_from_state_with_optimizer)", func(optimizer bool) (*testenv.Response, string, int) {
			r := b.c.Do("POST", "/api/v1/load_weights", map[string]any{"session_id": sessB, "model_seq_id": 1, "path": pub, "optimizer": optimizer}, nil)
			var f future
			if r.Status == 200 {
				r.JSON(t, &f)
				b.c.Result(f.RequestID, nil)
			}
			return r, f.ModelID, 1
		}},
	}
	for _, form := range forms {
		r, run, seq := form.load(true)
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "optimizer state is its owner's") {
			// The old behaviour: loaded. Go on, to show what the reader then downloads.
			t.Errorf("%s with the optimizer from another tenant's published checkpoint: %d %s, want a 400 saying the optimizer state is the owner's",
				form.name, r.Status, r.Body)
		} else if r, run, seq = form.load(false); r.Status != 200 {
			t.Fatalf("%s weights only: %d %s", form.name, r.Status, r.Body)
		}
		// The reader saves its run and downloads its own checkpoint.
		savedCheckpoint(b, run, "mine", seq)
		dl := download(b, "/api/v1/training_runs/"+run+"/checkpoints/weights/mine")
		if dl.Status != 200 {
			t.Fatalf("%s: download the reader's checkpoint: %d %s", form.name, dl.Status, dl.Body)
		}
		raw := tarFile(t, dl.Body, "optimizer.safetensors")
		rf, err := safetensors.Read(bytes.NewReader(raw), int64(len(raw)), "optimizer.safetensors")
		if err != nil {
			t.Fatal(err)
		}
		for name, v := range moments(t, rf) {
			if w, ok := ownerM[name]; ok && nonzero(w) && slices.Equal(v, w) {
				t.Fatalf("%s: the reader's own checkpoint holds the owner's moment %s", form.name, name)
			}
		}
		if step := rf.Metadata["step"]; step != "0" {
			t.Errorf("%s: the reader's optimizer is at step %s (the owner's is at %s), want a fresh 0", form.name, step, of.Metadata["step"])
		}
	}
}
