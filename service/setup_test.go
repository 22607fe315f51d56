package service_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/store/memory"
	"github.com/tuft-go/tuft/telemetry"
)

// setup is what a service test varies; the rest of the wiring is startService's.
type setup struct {
	store store.Store            // nil: a fresh memory store
	exec  backend.Executor       // nil: a no-op executor
	now   func() time.Time       // nil: the wall clock
	in    *telemetry.Instruments // nil: no metrics
	edit  func(*config.Config)   // adjusts the default config (one tiny model, a checkpoint dir)
}

// startService builds the service the way every test here needs it: the default config
// with the tiny model, futures over the store, the backend over the executor. Both stop
// when the test ends (the service first); the futures' shutdown is bounded, since after a
// failure an executor may still hold work that never ends.
func startService(t *testing.T, s setup) *service.Service {
	t.Helper()
	svc, _ := startServiceFutures(t, s)
	return svc
}

// startServiceFutures is startService for a test that also reads the futures directly.
func startServiceFutures(t *testing.T, s setup) (*service.Service, *futures.Manager) {
	t.Helper()
	ctx := context.Background()
	cfg := config.Default(t.TempDir())
	cfg.CheckpointDir = filepath.Join(t.TempDir(), "ck")
	cfg.Models = []config.Model{{Name: testenv.Model, Preset: "tiny", MaxLoraRank: 8, LoraAlphaRatio: 1}}
	if s.edit != nil {
		s.edit(&cfg)
	}
	if s.store == nil {
		s.store = memory.New()
	}
	if s.exec == nil {
		s.exec = testenv.NewNoopExecutor()
	}
	fut, err := futures.New(testenv.FuturesOptions(cfg, s.store))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = fut.Shutdown(sctx)
	})
	svc, err := service.New(ctx, service.Options{Encoder: enc{}, Config: cfg, Store: s.store, Futures: fut,
		Backend: backend.New(s.exec), Now: s.now, Instruments: s.in})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc, fut
}
