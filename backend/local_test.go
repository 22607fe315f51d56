package backend

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/tuft-go/tuft/backend/sched"
	"github.com/tuft-go/tuft/engine"
)

func tinyLocal(t *testing.T) *Local {
	dir := t.TempDir()
	if err := engine.WritePreset("tiny", dir); err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(dir, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	return NewLocal([]*engine.Model{m}, []ModelInfo{{Name: "tiny", Config: m.Cfg}})
}

func ce(toks []int32) engine.ForwardRequest {
	n := len(toks) - 1
	tt := make([]int64, n)
	for i := range tt {
		tt[i] = int64(toks[i+1])
	}
	return engine.ForwardRequest{LossFn: "cross_entropy", Backward: true, Data: []engine.Datum{{Tokens: toks[:n],
		LossInputs: map[string]engine.Tensor{"target_tokens": {DType: engine.Int64, Shape: []int{n}, I64: tt}}}}}
}

// holdLoop makes the model's scheduler wait before its next unit of work until the
// returned function is called, so that tests can queue requests deterministically.
func holdLoop(t *testing.T, s *sched.Scheduler) (release func()) {
	t.Helper()
	return s.Hold()
}

// waitQueued waits until n submissions reached the (held) scheduler.
func waitQueued(s *sched.Scheduler, n int) {
	for s.Queued() < n {
		runtime.Gosched()
	}
}

// Concurrent forward_backwards of different adapters on one base model run together in
// multi-LoRA packs and give exactly what they give one at a time.
func TestConcurrentForwardBackwardsAreBatched(t *testing.T) {
	ctx := context.Background()
	batched, serial := tinyLocal(t), tinyLocal(t)
	const n = 6
	reqs := make([]engine.ForwardRequest, n)
	for i := range reqs {
		toks := make([]int32, 12+i)
		for j := range toks {
			toks[j] = int32((i*31+j*7)%400 + 1)
		}
		reqs[i] = ce(toks)
		for _, l := range []*Local{batched, serial} {
			if err := l.CreateAdapter(ctx, "tiny", string(rune('a'+i)), engine.LoraConfig{Rank: 4, TrainAttn: true, TrainMLP: true, Seed: int64(i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	h := batched.models["tiny"]
	release := holdLoop(t, h.sched)
	got := make([]engine.ForwardResult, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := batched.ForwardBackward(WithTenant(ctx, fmt.Sprint("tenant", i%2)), "tiny", string(rune('a'+i)), reqs[i])
			if err != nil {
				t.Error(err)
			}
			got[i] = r
		}(i)
	}
	waitQueued(h.sched, n)
	release()
	wg.Wait()
	if b := h.sched.Stats().Packs; b != 1 {
		t.Fatalf("%d queued requests ran in %d packs, want 1", n, b)
	}
	for i := 0; i < n; i++ {
		want, err := serial.ForwardBackward(ctx, "tiny", string(rune('a'+i)), reqs[i])
		if err != nil {
			t.Fatal(err)
		}
		if d := got[i].Metrics["loss:sum"] - want.Metrics["loss:sum"]; d > 1e-4 || d < -1e-4 {
			t.Fatalf("request %d: batched loss %v, alone %v", i, got[i].Metrics["loss:sum"], want.Metrics["loss:sum"])
		}
	}
	// The gradients landed in the right adapters: one optimizer step makes them equal.
	for i := 0; i < n; i++ {
		lora := string(rune('a' + i))
		p := engine.StepParams{Adam: engine.AdamParams{LearningRate: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}}
		batched.OptimStep(ctx, "tiny", lora, p)
		serial.OptimStep(ctx, "tiny", lora, p)
		a, _ := batched.ForwardBackward(ctx, "tiny", lora, reqs[i])
		b, _ := serial.ForwardBackward(ctx, "tiny", lora, reqs[i])
		if d := a.Metrics["loss:sum"] - b.Metrics["loss:sum"]; d > 1e-3 || d < -1e-3 {
			t.Fatalf("adapter %s after a step: %v vs %v", lora, a.Metrics["loss:sum"], b.Metrics["loss:sum"])
		}
	}
}

// A request whose caller gives up while it waits is withdrawn, not run, and leaves its
// adapter untouched.
func TestCancelledWaitingRequestIsWithdrawn(t *testing.T) {
	l := tinyLocal(t)
	ctx := context.Background()
	l.CreateAdapter(ctx, "tiny", "x", engine.LoraConfig{Rank: 2, TrainAttn: true})
	h := l.models["tiny"]
	release := holdLoop(t, h.sched)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := l.ForwardBackward(cctx, "tiny", "x", ce([]int32{1, 2, 3, 4}))
		done <- err
	}()
	waitQueued(h.sched, 1)
	cancel()
	release()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled request: %v", err)
	}
	if p := h.sched.Stats().Packs; p != 0 {
		t.Fatalf("the withdrawn request ran (%d packs)", p)
	}
	s, _ := l.slot("tiny", "x")
	for _, p := range s.a.Grad.Layers {
		for _, q := range p {
			if q == nil {
				continue
			}
			for _, v := range q.B {
				if v != 0 {
					t.Fatal("the withdrawn request left gradients")
				}
			}
		}
	}
}
