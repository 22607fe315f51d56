package api_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
)

// A crash between the two renames of a save leaves only "<dir>.old" (and a temporary
// directory): the restart restores the run from it, not from a fresh adapter, and
// cleans up.
func TestRestartRecoversASaveCrashedBetweenItsRenames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testenv.Config(t, dir, "embedded")
	s := testenv.Start(t, cfg)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	h := &harness{t: t, a: a}
	sess := h.session(a)
	model := h.model(a, sess, 0, 4)
	fresh := probeWith(t, a, model, 1)
	var f, o future
	a.Post("/api/v1/forward_backward", fwdbwdJSON(model, 2, datum(1, 8)), &f)
	a.Post("/api/v1/optim_step", optim(model, 3, 5e-2), &o)
	a.Result(f.RequestID, nil)
	a.Result(o.RequestID, nil)
	trained := probeWith(t, a, model, 4)
	if trained == fresh {
		t.Fatal("the step did not change the adapter")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The state a SIGKILL between the renames leaves.
	auto := filepath.Join(cfg.CheckpointDir, model, "_autosave")
	if err := os.Rename(auto, auto+".old"); err != nil {
		t.Fatal(err)
	}
	// And the temporary directories of saves that never finished, one of a checkpoint
	// that never got its record.
	for _, d := range []string{".tmp-_autosave-123456", "weights/.tmp-never-recorded-42", "sampler_weights/.tmp-x-7"} {
		if err := os.MkdirAll(filepath.Join(cfg.CheckpointDir, model, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	s2 := testenv.Start(t, cfg)
	a = testenv.NewClient(t, s2.URL(), testenv.KeyA)
	if got := probeWith(t, a, model, 5); got != trained {
		t.Fatalf("restored loss %v, want the trained %v (a fresh adapter gives %v)", got, trained, fresh)
	}
	for _, d := range []string{"", "weights", "sampler_weights"} {
		ents, _ := os.ReadDir(filepath.Join(cfg.CheckpointDir, model, d))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".tmp-") || strings.HasSuffix(e.Name(), ".old") {
				t.Fatalf("left behind after the restart: %s/%s", d, e.Name())
			}
		}
	}
}
