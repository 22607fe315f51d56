package service_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/service"
)

// blockingSampler samples until its context ends, like a generation that would run long.
type blockingSampler struct {
	*testenv.NoopExecutor
	started chan struct{}
	calls   atomic.Int32
}

func (b *blockingSampler) Sample(ctx context.Context, _, _ string, _ engine.SampleRequest) (engine.SampleResult, error) {
	b.calls.Add(1)
	b.started <- struct{}{}
	<-ctx.Done()
	return engine.SampleResult{}, ctx.Err()
}

// SampleAsync is Sample as the backend's asynchronous form calls it (the fake's own
// goroutine stands in for the model's loop): without it the embedded executor's would
// answer without blocking.
func (b *blockingSampler) SampleAsync(ctx context.Context, model, lora string, req engine.SampleRequest, done func(engine.SampleResult, error)) {
	go func() { done(b.Sample(ctx, model, lora, req)) }()
}

// cancel_future: the running sample's context ends (the executor stops) and its future
// fails saying it was cancelled; a queued one fails at once and never reaches the
// executor; a training operation cannot be cancelled.
func TestCancelSample(t *testing.T) {
	ctx := context.Background()
	exec := &blockingSampler{NoopExecutor: testenv.NewNoopExecutor(), started: make(chan struct{}, 4)}
	// A model operation reaches the executor as soon as it is runnable: one running
	// operation per tenant makes the second sample wait in its queue.
	svc := startService(t, setup{exec: exec, edit: func(cfg *config.Config) { cfg.Limits.MaxRunningPerTenant = 1 }})
	se, _ := svc.CreateSession(ctx, "alice", service.CreateSessionInput{})
	sm, err := svc.CreateSamplingSession(ctx, "alice", se.ID, 0, testenv.Model, "")
	if err != nil {
		t.Fatal(err)
	}
	sample := func(seq int64) string {
		id, err := svc.Sample(ctx, "alice", service.SampleInput{SamplingSessionID: sm.ID, SeqID: seq,
			Req: engine.SampleRequest{Prompt: []int32{1, 2}, NumSamples: 1, Params: engine.SampleParams{MaxTokens: 4, TopP: 1, Temperature: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	running := sample(1)
	<-exec.started
	queued := sample(2)
	if out, err := svc.CancelSample(ctx, "bob", queued); service.KindOf(err) != service.KindNotFound {
		t.Fatalf("another tenant cancels: %q %v", out, err)
	}
	if out, err := svc.CancelSample(ctx, "alice", queued); err != nil || out != service.CancelQueued {
		t.Fatalf("queued: %q %v", out, err)
	}
	rec, _ := svc.Retrieve(ctx, "alice", queued, 5*time.Second)
	if rec.Status != futures.StatusFailed || !strings.Contains(rec.Failure.Message, "before it started") {
		t.Fatalf("queued sample after cancel: %+v", rec)
	}
	if out, err := svc.CancelSample(ctx, "alice", running); err != nil || out != service.CancelRunning {
		t.Fatalf("running: %q %v", out, err)
	}
	rec, _ = svc.Retrieve(ctx, "alice", running, 5*time.Second)
	if rec.Status != futures.StatusFailed || rec.Failure.Category != futures.CategoryUser || !strings.Contains(rec.Failure.Message, "while it ran") {
		t.Fatalf("running sample after cancel: %+v", rec)
	}
	if n := exec.calls.Load(); n != 1 {
		t.Fatalf("the executor sampled %d times; the queued sample must never reach it", n)
	}
	if out, err := svc.CancelSample(ctx, "alice", running); err != nil || out != service.CancelDone {
		t.Fatalf("again: %q %v", out, err)
	}
	id, _, err := svc.CreateModel(ctx, "alice", service.CreateModelInput{SessionID: se.ID, BaseModel: testenv.Model,
		Lora: engine.LoraConfig{Rank: 2, TrainAttn: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CancelSample(ctx, "alice", id); err == nil {
		// Done already (create_model is quick) or refused: never cancelled.
		if rec, _ := svc.Retrieve(ctx, "alice", id, 5*time.Second); rec.Status != futures.StatusReady {
			t.Fatalf("create_model after a cancel: %+v", rec)
		}
	} else if service.KindOf(err) != service.KindInvalid || !strings.Contains(err.Error(), "only sampling requests") {
		t.Fatalf("cancelling create_model: %v", err)
	}
}
