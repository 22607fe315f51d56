package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
)

func failureOf(t *testing.T, r *testenv.Response) (msg, category string) {
	t.Helper()
	var f struct {
		Error    string `json:"error"`
		Category string `json:"category"`
	}
	r.JSON(t, &f)
	return f.Error, f.Category
}

// Gradients accumulated since the last optim_step do not survive a restart: the next
// operation that would use them fails with an error that says so (and nothing is
// applied), instead of an optim_step that "succeeds" with grad_norm 0 while Adam moves
// the weights. The operation after that works.
func TestRestartWithPendingGradientsFailsTheNextGradientOperation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testenv.Config(t, dir, "embedded")
	s := testenv.Start(t, cfg)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	h := &harness{t: t, a: a}
	sess := h.session(a)
	model := h.model(a, sess, 0, 4)
	var f, o future
	a.Post("/api/v1/forward_backward", fwdbwdJSON(model, 1, datum(1, 8)), &f)
	a.Post("/api/v1/optim_step", optim(model, 2, 1e-2), &o)
	a.Result(f.RequestID, nil)
	a.Result(o.RequestID, nil)
	a.Post("/api/v1/forward_backward", fwdbwdJSON(model, 3, datum(1, 8)), &f)
	a.Result(f.RequestID, nil) // acknowledged: its gradients live in memory only
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	s2 := testenv.Start(t, cfg)
	a = testenv.NewClient(t, s2.URL(), testenv.KeyA)
	a.Post("/api/v1/session_heartbeat", map[string]any{"session_id": sess}, nil)
	before := probeWith(t, a, model, 4)
	a.Post("/api/v1/optim_step", optim(model, 5, 1e-2), &o)
	msg, cat := failureOf(t, a.Wait(o.RequestID, ""))
	if !strings.Contains(msg, "gradients") || !strings.Contains(msg, "lost") || !strings.Contains(msg, "restart") {
		t.Fatalf("optim_step after a restart with pending gradients: %q (%s)", msg, cat)
	}
	if after := probeWith(t, a, model, 6); after != before {
		t.Fatalf("the refused optim_step moved the weights: %v → %v", before, after)
	}
	// Once said, the run trains on: a new forward_backward and optim_step work.
	a.Post("/api/v1/forward_backward", fwdbwdJSON(model, 7, datum(1, 8)), &f)
	a.Post("/api/v1/optim_step", optim(model, 8, 1e-2), &o)
	a.Result(f.RequestID, nil)
	var res struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	a.Result(o.RequestID, &res)
	if res.Metrics["grad_norm:max"] <= 0 {
		t.Fatalf("optim_step after the error: %v", res.Metrics)
	}
}

// A restart with no pending gradient changes nothing: the next optim_step is normal.
func TestRestartWithoutPendingGradientsIsSilent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testenv.Config(t, dir, "embedded")
	s := testenv.Start(t, cfg)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	h := &harness{t: t, a: a}
	sess := h.session(a)
	model := h.model(a, sess, 0, 4)
	var f, o future
	a.Post("/api/v1/forward_backward", fwdbwdJSON(model, 1, datum(1, 8)), &f)
	a.Post("/api/v1/optim_step", optim(model, 2, 1e-2), &o)
	a.Result(f.RequestID, nil)
	a.Result(o.RequestID, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := testenv.Start(t, cfg)
	a = testenv.NewClient(t, s2.URL(), testenv.KeyA)
	a.Post("/api/v1/forward_backward", fwdbwdJSON(model, 3, datum(1, 8)), &f)
	a.Post("/api/v1/optim_step", optim(model, 4, 1e-2), &o)
	a.Result(f.RequestID, nil)
	a.Result(o.RequestID, nil)
}

func probeWith(t *testing.T, c *testenv.Client, model string, seq int) float64 {
	t.Helper()
	var f future
	c.Post("/api/v1/forward", map[string]any{"model_id": model, "seq_id": seq, "forward_input": map[string]any{"data": []any{datum(1, 8)}, "loss_fn": "cross_entropy"}}, &f)
	return lossOf(t, c.Result(f.RequestID, nil))
}

// fullDisk wraps the real executor; while armed, saving the autosave fails as a full
// disk would.
type fullDisk struct {
	backend.Executor
	armed atomic.Bool
}

func (d *fullDisk) SaveState(ctx context.Context, model, lora, dir string, optimizer bool) error {
	if d.armed.Load() && strings.HasSuffix(dir, "_autosave") {
		return fmt.Errorf("write %s: %w", dir, syscall.ENOSPC)
	}
	return d.Executor.SaveState(ctx, model, lora, dir, optimizer)
}

// An optim_step whose autosave fails (a full disk) replies failed, and is not applied:
// the adapter is back where it was before the step.
func TestOptimStepWhoseAutosaveFailsIsNotApplied(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	models, infos, err := backend.LoadModels(cfg, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	disk := &fullDisk{Executor: backend.NewLocal(models, infos)}
	s := testenv.StartWith(t, cfg, server.Options{Executor: disk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	h := &harness{t: t, a: a}
	model := h.model(a, h.session(a), 0, 4)
	var f, o future
	a.Post("/api/v1/forward_backward", fwdbwdJSON(model, 1, datum(1, 8)), &f)
	a.Post("/api/v1/optim_step", optim(model, 2, 1e-2), &o)
	a.Result(f.RequestID, nil)
	a.Result(o.RequestID, nil)
	before := probeWith(t, a, model, 3)

	a.Post("/api/v1/forward_backward", fwdbwdJSON(model, 4, datum(1, 8)), &f)
	a.Result(f.RequestID, nil)
	disk.armed.Store(true)
	a.Post("/api/v1/optim_step", optim(model, 5, 1e-2), &o)
	msg, cat := failureOf(t, a.Wait(o.RequestID, ""))
	disk.armed.Store(false)
	if !strings.Contains(msg, "not applied") || cat != "server" {
		t.Fatalf("optim_step with a full disk: %q (%s)", msg, cat)
	}
	if after := probeWith(t, a, model, 6); after != before {
		t.Fatalf("the failed optim_step was applied: loss %v → %v", before, after)
	}
	a.Post("/api/v1/forward_backward", fwdbwdJSON(model, 7, datum(1, 8)), &f)
	a.Post("/api/v1/optim_step", optim(model, 8, 1e-2), &o)
	a.Result(f.RequestID, nil)
	a.Result(o.RequestID, nil)
	if after := probeWith(t, a, model, 9); after == before {
		t.Fatal("the run no longer trains")
	}
}

var _ = config.Default
