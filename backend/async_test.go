package backend

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/telemetry"
)

// once counts the calls of a done callback and says whether it ran before the call that
// was given it returned.
type once struct {
	calls    atomic.Int64
	returned atomic.Bool
	early    atomic.Bool
	fired    chan struct{}
}

func newOnce() *once { return &once{fired: make(chan struct{}, 2)} }

func (o *once) hit() {
	if o.calls.Add(1) == 1 && !o.returned.Load() {
		o.early.Store(true)
	}
	o.fired <- struct{}{}
}

func (o *once) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-o.fired:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: done never ran", what)
	}
}

var smallSample = engine.SampleRequest{Prompt: []int32{1, 2, 3}, NumSamples: 1,
	Params: engine.SampleParams{MaxTokens: 2, Temperature: 1, TopP: 1, TopK: -1}}

// Every Async form, on Local, on a Router over it and on the Backend, calls done exactly
// once: before it returns for a refusal (an unknown model or adapter), later for work
// that runs; the Backend's caller-side span ends in done.
func TestAsyncDoneExactlyOnce(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	local := tinyLocal(t)
	t.Cleanup(func() { local.Close() })
	ctx := context.Background()
	if err := local.CreateAdapter(ctx, "tiny", "x", engine.LoraConfig{Rank: 2, TrainAttn: true}); err != nil {
		t.Fatal(err)
	}
	router := NewRouter()
	router.Set("local", local)
	b := New(router, telemetry.WithTracerProvider(tp))
	adam := engine.StepParams{Adam: engine.AdamParams{LearningRate: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}}
	execs := map[string]Executor{"local": local, "router": router, "backend": backendExec{b}}
	for name, ex := range execs {
		for _, c := range []struct {
			what         string
			model, lora  string
			refused      bool
			wantErr      error
			fb, opt, smp bool
		}{
			{"fb, unknown model", "nope", "x", true, ErrUnknownModel, true, false, false},
			{"fb, unknown adapter", "tiny", "y", true, ErrUnknownAdapter, true, false, false},
			{"fb", "tiny", "x", false, nil, true, false, false},
			{"optim, unknown adapter", "tiny", "y", true, ErrUnknownAdapter, false, true, false},
			{"optim", "tiny", "x", false, nil, false, true, false},
			{"sample, unknown model", "nope", "", true, ErrUnknownModel, false, false, true},
			{"sample", "tiny", "", false, nil, false, false, true},
		} {
			o := newOnce()
			var err error
			switch {
			case c.fb:
				ex.ForwardBackwardAsync(ctx, c.model, c.lora, ce([]int32{1, 2, 3, 4}), func(_ engine.ForwardResult, e error) { err = e; o.hit() })
			case c.opt:
				ex.OptimStepAsync(ctx, c.model, c.lora, adam, func(_ map[string]float64, e error) { err = e; o.hit() })
			default:
				ex.SampleAsync(ctx, c.model, c.lora, smallSample, func(_ engine.SampleResult, e error) { err = e; o.hit() })
			}
			o.returned.Store(true)
			o.wait(t, name+" "+c.what)
			time.Sleep(time.Millisecond) // a second call would land now
			if n := o.calls.Load(); n != 1 {
				t.Fatalf("%s %s: done ran %d times", name, c.what, n)
			}
			if c.refused && !o.early.Load() {
				t.Fatalf("%s %s: a refusal's done ran after the call returned", name, c.what)
			}
			if (c.wantErr == nil) != (err == nil) || (c.wantErr != nil && !errors.Is(err, c.wantErr)) {
				t.Fatalf("%s %s: %v, want %v", name, c.what, err, c.wantErr)
			}
		}
	}
	ended := map[string]int{}
	for _, s := range rec.Ended() {
		ended[s.Name()]++
	}
	// The backend ran each operation kind three times (two refusals for forward_backward
	// and one each for the others, and the successes): every span ended.
	if ended[telemetry.SpanTBForwardBackward] != 3 || ended[telemetry.SpanTBOptimStep] != 2 || ended[telemetry.SpanSBSample] != 2 {
		t.Fatalf("ended backend spans %v", ended)
	}
}

// backendExec drives a Backend through the Executor's Async names (the rest are unused).
type backendExec struct{ *Backend }

func (b backendExec) CreateAdapter(context.Context, string, string, engine.LoraConfig) error {
	panic("unused")
}
func (b backendExec) SaveState(context.Context, string, string, string, bool) error { panic("unused") }
func (b backendExec) LoadState(context.Context, string, string, string, bool, engine.OptimizerConfig) error {
	panic("unused")
}
func (b backendExec) Close() error { return nil }

// Local's Async forms queue 300 operations (100 samples, and 100 forward_backwards and
// 100 optimizer steps on one adapter, which wait for each other) without a goroutine per
// call: the goroutine count stays flat while they wait, and each done runs once when the
// loop runs them.
func TestLocalAsyncStartsNoGoroutinePerCall(t *testing.T) {
	l := tinyLocal(t)
	t.Cleanup(func() { l.Close() })
	ctx := context.Background()
	if err := l.CreateAdapter(ctx, "tiny", "x", engine.LoraConfig{Rank: 2, TrainAttn: true}); err != nil {
		t.Fatal(err)
	}
	h := l.models["tiny"]
	release := holdLoop(t, h.sched)
	defer release()
	waitQueued(h.sched, 0)
	runtime.GC()
	before := runtime.NumGoroutine()
	const n = 100
	counts := make([]atomic.Int64, 3*n)
	var wg sync.WaitGroup
	wg.Add(3 * n)
	adam := engine.StepParams{Adam: engine.AdamParams{LearningRate: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}}
	for i := 0; i < n; i++ {
		l.SampleAsync(ctx, "tiny", "", smallSample, func(_ engine.SampleResult, err error) {
			if err != nil {
				t.Error(err)
			}
			counts[i].Add(1)
			wg.Done()
		})
		l.ForwardBackwardAsync(ctx, "tiny", "x", ce([]int32{1, 2, 3, 4}), func(_ engine.ForwardResult, err error) {
			if err != nil {
				t.Error(err)
			}
			counts[n+i].Add(1)
			wg.Done()
		})
		l.OptimStepAsync(ctx, "tiny", "x", adam, func(_ map[string]float64, err error) {
			if err != nil {
				t.Error(err)
			}
			counts[2*n+i].Add(1)
			wg.Done()
		})
	}
	during := runtime.NumGoroutine()
	if during-before > 4 {
		t.Fatalf("%d goroutines before 300 queued calls, %d with them queued", before, during)
	}
	release()
	wg.Wait()
	for i := range counts {
		if c := counts[i].Load(); c != 1 {
			t.Fatalf("call %d: done ran %d times", i, c)
		}
	}
}

// An optimizer step through Local is a job of the model's loop: while the loop is held it
// waits in the scheduler's queue (on the old code it ran at once on its caller's
// goroutine), and it completes once the loop runs.
func TestLocalOptimStepGoesThroughTheLoop(t *testing.T) {
	l := tinyLocal(t)
	t.Cleanup(func() { l.Close() })
	ctx := context.Background()
	if err := l.CreateAdapter(ctx, "tiny", "x", engine.LoraConfig{Rank: 2, TrainAttn: true}); err != nil {
		t.Fatal(err)
	}
	h := l.models["tiny"]
	release := holdLoop(t, h.sched)
	defer release()
	done := make(chan error, 1)
	go func() {
		_, err := l.OptimStep(ctx, "tiny", "x", engine.StepParams{Adam: engine.AdamParams{LearningRate: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}})
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for h.sched.Queued() < 1 {
		select {
		case err := <-done:
			t.Fatalf("the optimizer step finished (%v) while the model's loop was held", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the optimizer step never reached the model's loop")
		}
		runtime.Gosched()
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
