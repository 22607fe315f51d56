package service_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/store/memory"
)

// A store written before RunState (testdata/records/run_legacy_*.json: the run records of
// the code as of 2026-11-23) loads: each run comes back in the state its flags meant, and
// behaves so (an unloaded run refuses operations with its note).
func TestLegacyRunRecordsRestore(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	for name, id := range map[string]string{"run_legacy_unloaded": "sess_1:train:2", "run_legacy_corrupted": "sess_1:train:3"} {
		b, err := os.ReadFile(filepath.Join("testdata", "records", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Set(ctx, "run/"+id, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	svc, _ := newTestService(t, st, &clock{t: time.Unix(1_800_000_000, 0)})
	for id, want := range map[string]service.RunState{"sess_1:train:2": service.RunUnloaded, "sess_1:train:3": service.RunCorrupted} {
		v, err := svc.GetRun("alice", id)
		if err != nil || v.State != want {
			t.Errorf("run %s after restore: state %q (%v), want %q", id, v.State, err, want)
		}
	}
	if err := svc.CheckRun("alice", "sess_1:train:2"); service.KindOf(err) != service.KindNotFound || !strings.Contains(err.Error(), "unload_model was called") {
		t.Errorf("an operation on the migrated unloaded run: %v", err)
	}
	if err := svc.CheckRun("alice", "sess_1:train:3"); service.KindOf(err) != service.KindConflict || !strings.Contains(err.Error(), "no longer configured") {
		t.Errorf("an operation on the migrated corrupted run: %v", err)
	}
}
