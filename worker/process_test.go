package worker_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/worker"
)

// recorder is a Publisher that keeps what it was given and reports when the
// registration is withdrawn (its context ended).
type recorder struct {
	mu        sync.Mutex
	reg       backend.Registration
	every     time.Duration
	published chan struct{}
	withdrawn chan struct{}
}

func (r *recorder) Publish(ctx context.Context, reg backend.Registration, every time.Duration, _ func(error)) {
	r.mu.Lock()
	r.reg, r.every = reg, every
	r.mu.Unlock()
	close(r.published)
	<-ctx.Done()
	close(r.withdrawn)
}

func workerConfig(t *testing.T) config.Config {
	t.Setenv("TUFT_WORKER_TOKEN", token)
	cfg := config.Default(t.TempDir())
	cfg.Worker.Listen = "127.0.0.1:0"
	cfg.Worker.HeartbeatSeconds = 2
	return cfg
}

// Start serves the executor and publishes the registration; Shutdown withdraws it before
// the server stops, and the port is closed afterwards.
func TestStartServesAndShutdownWithdraws(t *testing.T) {
	cfg := workerConfig(t)
	cfg.Worker.Register = true
	cfg.Worker.Advertise = "worker-7.example:10620"
	pub := &recorder{published: make(chan struct{}), withdrawn: make(chan struct{})}
	w, err := worker.Start(context.Background(), cfg, worker.Options{Executor: testenv.NewNoopExecutor(), Publisher: pub})
	if err != nil {
		t.Fatal(err)
	}
	<-pub.published
	pub.mu.Lock()
	reg, every := pub.reg, pub.every
	pub.mu.Unlock()
	if reg.Address != cfg.Worker.Advertise || reg.Instance != w.Instance() || len(reg.Models) != 1 || reg.Models[0] != testenv.Model || every != 2*time.Second {
		t.Fatalf("registration %+v every %v", reg, every)
	}
	ctx := context.Background()
	rem, err := backend.DialRemote(ctx, w.Addr(), backend.RemoteOptions{CallTimeout: testCallTimeout, Token: token, ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if inst, err := rem.Ping(ctx); err != nil || inst != w.Instance() {
		t.Fatalf("ping: %q %v", inst, err)
	}
	rem.Close()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := w.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pub.withdrawn:
	default:
		t.Fatal("Shutdown returned with the registration still published")
	}
	if _, err := backend.DialRemote(ctx, w.Addr(), backend.RemoteOptions{CallTimeout: testCallTimeout, Token: token, ConnectTimeout: time.Second}); err == nil {
		t.Fatal("the worker still answers after Shutdown")
	}
	if err := w.Shutdown(sctx); err != nil {
		t.Fatalf("a second Shutdown: %v", err)
	}
}

// Start refuses what it cannot serve, naming the problem.
func TestStartRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		mut  func(*config.Config)
		o    worker.Options
		want string
	}{
		"register without a publisher": {func(c *config.Config) { c.Worker.Register = true }, worker.Options{Executor: testenv.NewNoopExecutor()}, "publisher"},
		"remote model":                 {func(c *config.Config) { c.Models = []config.Model{{Name: "m", Remote: true}} }, worker.Options{}, "models[0] (m) is remote"},
		"no token":                     {func(c *config.Config) { t.Setenv("TUFT_WORKER_TOKEN", "") }, worker.Options{Executor: testenv.NewNoopExecutor()}, "token"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := workerConfig(t)
			tc.mut(&cfg)
			w, err := worker.Start(context.Background(), cfg, tc.o)
			if err == nil {
				w.Shutdown(context.Background())
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}
