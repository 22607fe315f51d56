package sched

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/tuft-go/tuft/engine"
)

// testHost is the smallest host of a model's scheduler for these tests: adapters by
// name, each guarded the way backend.Local guards them (training operations hold the
// adapter exclusively, samples share it), and the blocking forms over the scheduler's
// callbacks. The model argument of its methods is the one hosted model's name.
type testHost struct {
	s *Scheduler
	m *engine.Model

	mu       sync.Mutex
	adapters map[string]*testSlot
}

type testSlot struct {
	mu  sync.RWMutex
	a   *engine.Adapter
	gen uint64
}

// Stream asks for a sample's tokens as they are drawn (as backend.Stream).
type Stream struct {
	OnToken     func(engine.TokenEvent)
	TopLogprobs int
}

func newTestHost(t *testing.T, m *engine.Model, cfg Config) *testHost {
	l := &testHost{s: New(m, cfg), m: m, adapters: map[string]*testSlot{}}
	t.Cleanup(func() { l.Close() })
	return l
}

// tinyLocal hosts the tiny preset with the default configuration.
func tinyLocal(t *testing.T) *testHost {
	dir := t.TempDir()
	if err := engine.WritePreset("tiny", dir); err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(dir, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	return newTestHost(t, m, DefaultConfig())
}

func (l *testHost) Close() error { l.s.Close(); return nil }

func (l *testHost) slot(_, lora string) (*testSlot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.adapters[lora]
	if !ok {
		return nil, fmt.Errorf("unknown adapter %q", lora)
	}
	return s, nil
}

func (l *testHost) CreateAdapter(ctx context.Context, _, lora string, cfg engine.LoraConfig) error {
	a, err := l.m.NewAdapter(cfg)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.adapters[lora] = &testSlot{a: a}
	return nil
}

func (l *testHost) RemoveAdapter(ctx context.Context, _, lora string) error {
	l.mu.Lock()
	delete(l.adapters, lora)
	l.mu.Unlock()
	l.s.DropPrefixes(lora)
	return nil
}

func (l *testHost) ForwardBackward(ctx context.Context, model, lora string, req engine.ForwardRequest) (engine.ForwardResult, error) {
	var a *engine.Adapter
	if lora != "" {
		s, err := l.slot(model, lora)
		if err != nil {
			return engine.ForwardResult{}, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		a = s.a
	}
	type outcome struct {
		res engine.ForwardResult
		err error
	}
	ch := make(chan outcome, 1)
	l.s.SubmitForward(ctx, a, req, func(res engine.ForwardResult, _ PackStats, err error) { ch <- outcome{res, err} })
	o := <-ch
	return o.res, o.err
}

func (l *testHost) OptimStep(ctx context.Context, model, lora string, p engine.StepParams) (map[string]float64, error) {
	s, err := l.slot(model, lora)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var m map[string]float64
	ch := make(chan error, 1)
	l.s.SubmitJob(ctx, func() error {
		var err error
		m, err = l.m.Step(ctx, s.a, p)
		if err == nil {
			s.gen++
			l.s.DropPrefixes(lora)
		}
		return err
	}, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		return nil, err
	}
	return m, nil
}

func (l *testHost) Sample(ctx context.Context, model, lora string, req engine.SampleRequest) (engine.SampleResult, error) {
	return l.SampleStream(ctx, model, lora, req, Stream{})
}

func (l *testHost) SampleStream(ctx context.Context, model, lora string, req engine.SampleRequest, st Stream) (engine.SampleResult, error) {
	var lw *engine.LoraWeights[float32]
	key := PrefixKey("", 0)
	if lora != "" {
		s, err := l.slot(model, lora)
		if err != nil {
			return engine.SampleResult{}, err
		}
		s.mu.RLock()
		defer s.mu.RUnlock()
		lw, key = &s.a.W, PrefixKey(lora, s.gen)
	}
	r, err := l.s.NewSample(ctx, key, lw, req, SampleHooks{Token: st.OnToken, Top: st.TopLogprobs})
	if err != nil {
		return engine.SampleResult{}, err
	}
	type outcome struct {
		res engine.SampleResult
		err error
	}
	ch := make(chan outcome, 1)
	l.s.SubmitSample(r, func(res engine.SampleResult, err error) { ch <- outcome{res, err} })
	o := <-ch
	return o.res, o.err
}

// holdLoop makes the scheduler wait before its next unit of work until the returned
// function is called, so that tests can queue requests deterministically.
func holdLoop(t *testing.T, s *Scheduler) (release func()) {
	t.Helper()
	return s.Hold()
}

// waitQueued waits until n submissions reached the (held) scheduler.
func waitQueued(s *Scheduler, n int) {
	for s.Queued() < n {
		runtime.Gosched()
	}
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
