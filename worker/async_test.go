package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/engine"
)

// The remote executor's Async forms (a goroutine per call: the gRPC stub blocks) call
// done exactly once, with what the blocking forms give: a refusal for an unknown
// adapter, results for work that runs.
func TestRemoteAsyncDoneOnce(t *testing.T) {
	ctx := context.Background()
	addr, _ := serve(t, tinyLocal(t))
	rem, err := backend.DialRemote(ctx, addr, backend.RemoteOptions{CallTimeout: testCallTimeout, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Close()
	if err := rem.CreateAdapter(ctx, "tiny", "x", engine.LoraConfig{Rank: 2, TrainAttn: true}); err != nil {
		t.Fatal(err)
	}
	adam := engine.StepParams{Adam: engine.AdamParams{LearningRate: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}}
	sreq := engine.SampleRequest{Prompt: []int32{1, 2, 3}, NumSamples: 1, Params: engine.SampleParams{MaxTokens: 2, Temperature: 1, TopP: 1, TopK: -1}}
	for _, c := range []struct {
		what    string
		lora    string
		wantErr error
		call    func(lora string, done func(error))
	}{
		{"forward_backward", "x", nil, func(lora string, done func(error)) {
			rem.ForwardBackwardAsync(ctx, "tiny", lora, ceRequest([]int32{1, 2, 3, 4}), func(_ engine.ForwardResult, err error) { done(err) })
		}},
		{"forward_backward, unknown adapter", "nope", backend.ErrUnknownAdapter, func(lora string, done func(error)) {
			rem.ForwardBackwardAsync(ctx, "tiny", lora, ceRequest([]int32{1, 2, 3, 4}), func(_ engine.ForwardResult, err error) { done(err) })
		}},
		{"optim_step", "x", nil, func(lora string, done func(error)) {
			rem.OptimStepAsync(ctx, "tiny", lora, adam, func(_ map[string]float64, err error) { done(err) })
		}},
		{"sample", "", nil, func(lora string, done func(error)) {
			rem.SampleAsync(ctx, "tiny", lora, sreq, func(_ engine.SampleResult, err error) { done(err) })
		}},
	} {
		var calls atomic.Int64
		got := make(chan error, 2)
		c.call(c.lora, func(err error) { calls.Add(1); got <- err })
		select {
		case err := <-got:
			if (c.wantErr == nil) != (err == nil) || (c.wantErr != nil && !errors.Is(err, c.wantErr)) {
				t.Fatalf("%s: %v, want %v", c.what, err, c.wantErr)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: done never ran", c.what)
		}
		time.Sleep(5 * time.Millisecond) // a second call would land now
		if n := calls.Load(); n != 1 {
			t.Fatalf("%s: done ran %d times", c.what, n)
		}
	}
}
