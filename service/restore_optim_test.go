package service_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/store/memory"
)

// loadRecorder records whether each LoadState asked for the optimizer state.
type loadRecorder struct {
	*testenv.NoopExecutor
	mu        sync.Mutex
	optimizer map[string]bool // run → the optimizer flag of its load
}

func (e *loadRecorder) LoadState(ctx context.Context, model, lora, dir string, optimizer bool, want engine.OptimizerConfig) error {
	e.mu.Lock()
	e.optimizer[lora] = optimizer
	e.mu.Unlock()
	return e.NoopExecutor.LoadState(ctx, model, lora, dir, optimizer, want)
}

// A run whose create-via-load a crash interrupted is restored from the checkpoint it was
// loading. A record written before another tenant's optimizer state was refused may ask
// for it: the restore loads that checkpoint's weights only, and a tenant's own checkpoint
// with its optimizer as recorded.
func TestRestoreRepeatsNoLoadOfAnotherTenantsOptimizer(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	dir := t.TempDir()
	put := func(key string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Set(ctx, key, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	const ownerRun = "sess_a:train:0"
	pub := &service.Checkpoint{RunID: ownerRun, Tenant: "alice", Type: service.CkptTraining, Name: "pub", Dir: filepath.Join(dir, "pub"),
		BaseModel: testenv.Model, Public: true}
	put("ckpt/"+ownerRun+"/"+pub.Type+"/"+pub.Name, pub)
	for id, tenant := range map[string]string{"sess_b:train:0": "bob", "sess_a:train:1": "alice"} {
		put("run/"+id, &service.Run{ID: id, Tenant: tenant, State: service.RunCreating, BaseModel: testenv.Model,
			LoadedFrom: &service.LoadSource{Path: pub.TinkerPath(), Dir: pub.Dir, Optimizer: true}})
	}
	cfg := config.Default(t.TempDir())
	cfg.CheckpointDir = filepath.Join(dir, "ck")
	cfg.Models = []config.Model{{Name: testenv.Model, Preset: "tiny", MaxLoraRank: 8, LoraAlphaRatio: 1}}
	fut, _ := futures.New(testenv.FuturesOptions(cfg, st))
	t.Cleanup(func() { _ = fut.Shutdown(ctx) })
	exec := &loadRecorder{NoopExecutor: testenv.NewNoopExecutor(), optimizer: map[string]bool{}}
	svc, err := service.New(ctx, service.Options{Encoder: enc{}, Config: cfg, Store: st, Futures: fut, Backend: backend.New(exec)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	exec.mu.Lock()
	defer exec.mu.Unlock()
	if opt, ok := exec.optimizer["sess_b:train:0"]; !ok || opt {
		t.Errorf("bob's run restored from alice's published checkpoint: loaded %v, with the optimizer %v (want the weights only)", ok, opt)
	}
	if opt, ok := exec.optimizer["sess_a:train:1"]; !ok || !opt {
		t.Errorf("alice's run restored from her own checkpoint: loaded %v, with the optimizer %v (want it)", ok, opt)
	}
}
