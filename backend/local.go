package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/backend/sched"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/telemetry"
)

// Local hosts base models in this process. It is the default executor; `tuft worker`
// serves the same type over gRPC. Each model has a scheduler (package sched) whose loop
// owns the model: it runs the decode steps, the training packs and every other device
// operation (optimizer steps, creating, loading, saving and removing adapters), so a
// device error belongs to the operation that caused it. Every method is a wrapper over a
// submission to that loop; the Async forms return at once and answer on the loop's
// goroutine, without a goroutine per call.
type Local struct {
	mu       sync.Mutex
	models   map[string]*hosted
	infos    []ModelInfo
	adapters map[adapterKey]*slot
	tracer   trace.Tracer
	// gens numbers adapter weights: a slot that replaces another (create or load over an
	// existing name) never reuses a generation whose prompts may still be cached.
	gens atomic.Uint64
}

type hosted struct {
	model *engine.Model
	sched *sched.Scheduler
}

type adapterKey struct{ model, lora string }

// slot is one adapter. a and gen are read and written only while holding lock.
type slot struct {
	lock slotLock
	a    *engine.Adapter
	gen  uint64 // changes with the weights (the prefix cache keys on it): from Local.gens
}

// NewLocal hosts the given models with the default scheduler configuration; info
// supplies each model's advertised limits. Its spans (hf_model.*) go to the tracer
// provider of opts (default: the global one).
func NewLocal(models []*engine.Model, infos []ModelInfo, opts ...telemetry.Option) *Local {
	return NewLocalWith(models, infos, DefaultSchedConfig(), opts...)
}

// NewLocalWith is NewLocal with a scheduler configuration.
func NewLocalWith(models []*engine.Model, infos []ModelInfo, sc SchedConfig, opts ...telemetry.Option) *Local {
	l := &Local{models: map[string]*hosted{}, adapters: map[adapterKey]*slot{}, infos: append([]ModelInfo(nil), infos...),
		tracer: telemetry.NewSettings(opts...).Tracer(telemetry.ScopeModel)}
	for _, m := range models {
		l.models[m.Name] = &hosted{model: m, sched: sched.New(m, sc)}
	}
	for i, mi := range l.infos {
		if h, ok := l.models[mi.Name]; ok {
			l.infos[i].KVCacheTokens = h.sched.KVTokens()
		}
	}
	for i, mi := range l.infos {
		if h, ok := l.models[mi.Name]; ok && mi.Text == nil && h.model.Tok != nil {
			l.infos[i].Text = NewText(h.model)
		}
	}
	return l
}

// Models lists the hosted models.
func (l *Local) Models() []ModelInfo { return append([]ModelInfo(nil), l.infos...) }

// Close stops the models' schedulers: queued and running operations fail with ErrClosed.
func (l *Local) Close() error {
	l.mu.Lock()
	hs := make([]*hosted, 0, len(l.models))
	for _, h := range l.models {
		hs = append(hs, h)
	}
	l.mu.Unlock()
	for _, h := range hs {
		h.sched.Close()
	}
	return nil
}

func (l *Local) model(name string) (*hosted, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.models[name]
	if !ok {
		return nil, UnknownModel(name)
	}
	return h, nil
}

func (l *Local) slot(model, lora string) (*slot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.adapters[adapterKey{model, lora}]
	if !ok {
		return nil, fmt.Errorf("%w %q on %q", ErrUnknownAdapter, lora, model)
	}
	return s, nil
}

func (l *Local) span(ctx context.Context, name, lora string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	attrs = append(attrs, attribute.String(telemetry.AttrLoraID, lora))
	return telemetry.StartSpan(ctx, l.tracer, name, attrs...)
}

// CreateAdapter creates a fresh LoRA adapter (on the model's loop: it allocates device
// memory).
func (l *Local) CreateAdapter(ctx context.Context, model, lora string, cfg engine.LoraConfig) (err error) {
	_, sp := l.span(ctx, telemetry.SpanHFCreateAdapter, lora, attribute.Int(telemetry.AttrLoraRank, cfg.Rank))
	defer func() { telemetry.End(sp, err) }()
	h, err := l.model(model)
	if err != nil {
		return err
	}
	return wait1(func(done func(error)) {
		h.sched.SubmitJob(ctx, func() error {
			a, err := h.model.NewAdapter(cfg)
			if err != nil {
				return err
			}
			l.install(h, model, lora, a)
			return nil
		}, done)
	})
}

// install puts a in a new slot for (model, lora), replacing one created meanwhile, on the
// model's loop. The slot's generation is new, so no cached prompt of older weights of the
// same name applies; the adapter's cached prefixes are dropped as well.
func (l *Local) install(h *hosted, model, lora string, a *engine.Adapter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.adapters[adapterKey{model, lora}] = &slot{a: a, gen: l.gens.Add(1)}
	h.sched.DropPrefixes(lora)
}

// RemoveAdapter drops an adapter; removing a missing one is not an error. Its cached
// prompts are released on the model's loop.
func (l *Local) RemoveAdapter(ctx context.Context, model, lora string) error {
	l.mu.Lock()
	delete(l.adapters, adapterKey{model, lora})
	h := l.models[model]
	l.mu.Unlock()
	if h == nil {
		return nil
	}
	err := wait1(func(done func(error)) {
		h.sched.SubmitJob(context.WithoutCancel(ctx), func() error { h.sched.DropPrefixes(lora); return nil }, done)
	})
	if errors.Is(err, ErrClosed) {
		return nil // a closed scheduler holds no cached prompts
	}
	return err
}

// ForwardBackward runs a forward (and backward, when req.Backward) pass.
func (l *Local) ForwardBackward(ctx context.Context, model, lora string, req engine.ForwardRequest) (engine.ForwardResult, error) {
	return wait(func(done func(engine.ForwardResult, error)) { l.ForwardBackwardAsync(ctx, model, lora, req, done) })
}

// ForwardBackwardAsync queues a forward (and backward) pass in the model's training
// packs and returns at once; done runs on the loop goroutine (on this one for an
// immediate refusal; on ctx's for a call whose ctx ends while it waits for the adapter's
// earlier operations). The adapter is held exclusively until done.
func (l *Local) ForwardBackwardAsync(ctx context.Context, model, lora string, req engine.ForwardRequest, done func(engine.ForwardResult, error)) {
	name := telemetry.SpanHFForward
	if req.Backward {
		name = telemetry.SpanHFForwardBackward
	}
	ctx, sp := l.span(ctx, name, lora, attribute.Bool(telemetry.AttrBackward, req.Backward),
		attribute.Int(telemetry.AttrDataCount, len(req.Data)))
	end := func(res engine.ForwardResult, ps sched.PackStats, err error) {
		if sp.IsRecording() {
			sp.SetAttributes(attribute.Int(telemetry.AttrTokens, res.Tokens), attribute.Int(telemetry.AttrBatchAdapters, ps.Parts),
				attribute.Int(telemetry.AttrNumMicroBatches, max(1, ps.Packs)),
				attribute.Float64(telemetry.AttrQueueWaitMs, float64(ps.Waited.Microseconds())/1000))
		}
		telemetry.End(sp, err)
		done(res, err)
	}
	h, err := l.model(model)
	if err != nil {
		end(engine.ForwardResult{}, sched.PackStats{}, err)
		return
	}
	if lora == "" {
		h.sched.SubmitForward(ctx, nil, req, end)
		return
	}
	s, err := l.slot(model, lora)
	if err != nil {
		end(engine.ForwardResult{}, sched.PackStats{}, err)
		return
	}
	// Held until the scheduler has run every datum of the request.
	s.lock.acquire(ctx, true, func() {
		h.sched.SubmitForward(ctx, s.a, req, func(res engine.ForwardResult, ps sched.PackStats, err error) {
			s.lock.release(true)
			end(res, ps, err)
		})
	}, func(err error) { end(engine.ForwardResult{}, sched.PackStats{}, err) })
}

// OptimStep applies one step of the adapter's optimizer (AdamW or Dimuon).
func (l *Local) OptimStep(ctx context.Context, model, lora string, p engine.StepParams) (map[string]float64, error) {
	return wait(func(done func(map[string]float64, error)) { l.OptimStepAsync(ctx, model, lora, p, done) })
}

// OptimStepAsync queues the optimizer step as a job of the model's loop and returns at
// once; done runs where ForwardBackwardAsync's does.
func (l *Local) OptimStepAsync(ctx context.Context, model, lora string, p engine.StepParams, done func(map[string]float64, error)) {
	ctx, sp := l.span(ctx, telemetry.SpanHFOptimStep, lora, attribute.Float64(telemetry.AttrLearningRate, p.LearningRate()),
		attribute.String(telemetry.AttrOptimizerFamily, p.Family()))
	end := func(m map[string]float64, err error) {
		telemetry.End(sp, err)
		done(m, err)
	}
	var m map[string]float64
	l.adapterJob(ctx, model, lora, func(h *hosted, s *slot) error {
		var err error
		m, err = h.model.Step(ctx, s.a, p)
		if err == nil {
			s.gen = l.gens.Add(1) // new weights: prompts cached under the old ones no longer apply
			h.sched.DropPrefixes(lora)
		}
		return err
	}, func(err error) {
		if err != nil {
			m = nil
		}
		end(m, err)
	})
}

// adapterJob runs job on the model's loop holding the adapter's slot exclusively, and
// then done (where ForwardBackwardAsync's runs).
func (l *Local) adapterJob(ctx context.Context, model, lora string, job func(*hosted, *slot) error, done func(error)) {
	h, err := l.model(model)
	if err != nil {
		done(err)
		return
	}
	s, err := l.slot(model, lora)
	if err != nil {
		done(err)
		return
	}
	s.lock.acquire(ctx, true, func() {
		h.sched.SubmitJob(ctx, func() error { return job(h, s) }, func(err error) {
			s.lock.release(true)
			done(err)
		})
	}, done)
}

// SaveState writes the adapter into dir: a snapshot on the model's loop (it reads the
// device), then the files on this goroutine, so the loop never waits for the disk. Saves
// of one adapter are serialised by its run's seq_id order (each operation ends before the
// next starts), which SaveAdapter's write protocol relies on.
func (l *Local) SaveState(ctx context.Context, model, lora, dir string, optimizer bool) (err error) {
	_, sp := l.span(ctx, telemetry.SpanHFSaveState, lora, attribute.Bool(telemetry.AttrOptimizer, optimizer))
	defer func() { telemetry.End(sp, err) }()
	var snap *engine.Adapter
	var m *engine.Model
	err = wait1(func(done func(error)) {
		l.adapterJob(ctx, model, lora, func(h *hosted, s *slot) (err error) {
			m = h.model
			snap, err = h.model.SnapshotAdapter(s.a, optimizer)
			return err
		}, done)
	})
	if err != nil {
		return err
	}
	return m.SaveAdapter(snap, dir, optimizer)
}

// LoadState creates or replaces the adapter from dir, training with want (on the
// model's loop: it writes the device). Replacing holds the adapter while it loads.
func (l *Local) LoadState(ctx context.Context, model, lora, dir string, optimizer bool, want engine.OptimizerConfig) (err error) {
	_, sp := l.span(ctx, telemetry.SpanHFLoadState, lora, attribute.Bool(telemetry.AttrOptimizer, optimizer))
	defer func() { telemetry.End(sp, err) }()
	h, err := l.model(model)
	if err != nil {
		return err
	}
	if _, err := l.slot(model, lora); err == nil {
		return wait1(func(done func(error)) {
			l.adapterJob(ctx, model, lora, func(h *hosted, s *slot) error {
				a, err := h.model.LoadAdapterAs(dir, optimizer, want)
				if err != nil {
					return err
				}
				s.a, s.gen = a, l.gens.Add(1)
				h.sched.DropPrefixes(lora)
				return nil
			}, done)
		})
	}
	return wait1(func(done func(error)) {
		h.sched.SubmitJob(ctx, func() error {
			a, err := h.model.LoadAdapterAs(dir, optimizer, want)
			if err != nil {
				return err
			}
			l.install(h, model, lora, a)
			return nil
		}, done)
	})
}

// Sample generates continuations through the model's scheduler, which decodes this
// request's sequences in one batch with every other active sequence. It traces the
// request's lifecycle slices (preprocess, schedule, prefill, decode with a first_token
// event, postprocess) as children of hf_model.sample, each at the time this request
// reaches it inside the shared batch.
func (l *Local) Sample(ctx context.Context, model, lora string, req engine.SampleRequest) (engine.SampleResult, error) {
	return l.SampleStream(ctx, model, lora, req, Stream{})
}

// SampleAsync queues a sample request in the model's decode steps and returns at once;
// done runs where ForwardBackwardAsync's does (the adapter is held shared).
func (l *Local) SampleAsync(ctx context.Context, model, lora string, req engine.SampleRequest, done func(engine.SampleResult, error)) {
	l.sampleAsync(ctx, model, lora, req, Stream{}, done)
}

// SampleStream is Sample reporting each token to st as the decode step that drew it
// ends.
func (l *Local) SampleStream(ctx context.Context, model, lora string, req engine.SampleRequest, st Stream) (engine.SampleResult, error) {
	return wait(func(done func(engine.SampleResult, error)) { l.sampleAsync(ctx, model, lora, req, st, done) })
}

// SampleStreamAsync implements Streamer: a callback of the model's loop, as SampleAsync.
func (l *Local) SampleStreamAsync(ctx context.Context, model, lora string, req engine.SampleRequest, st Stream, done func(engine.SampleResult, error)) {
	l.sampleAsync(ctx, model, lora, req, st, done)
}

func (l *Local) sampleAsync(ctx context.Context, model, lora string, req engine.SampleRequest, st Stream, done func(engine.SampleResult, error)) {
	start := time.Now()
	tr := telemetry.StartRequest(ctx, l.tracer, telemetry.SpanHFSample, attribute.String(telemetry.AttrLoraID, lora),
		attribute.Bool(telemetry.AttrHasLora, lora != ""), attribute.Int(telemetry.AttrNumSamples, req.NumSamples),
		attribute.String(telemetry.AttrGenAIRequestModel, model))
	ctx = tr.Context()
	var r *sched.Sample
	end := func(res engine.SampleResult, err error) {
		tr.EndSlice()
		if !tr.Recording() {
			tr.End(err)
			done(res, err)
			return
		}
		reasons := make([]string, 0, len(res.Sequences))
		for _, s := range res.Sequences {
			reasons = append(reasons, string(s.StopReason))
		}
		attrs := []attribute.KeyValue{
			attribute.Int(telemetry.AttrPromptTokens, res.PromptTokens),
			attribute.Int(telemetry.AttrOutputTokens, res.OutputTokens),
			attribute.Int(telemetry.AttrGenAIInputTokens, res.PromptTokens),
			attribute.Int(telemetry.AttrGenAIOutputTokens, res.OutputTokens),
			attribute.StringSlice(telemetry.AttrGenAIFinishReasons, reasons),
			attribute.Int(telemetry.AttrTokens, res.PromptTokens+res.OutputTokens),
			attribute.Int(telemetry.AttrPromptCacheHitTokens, res.PromptCacheHitTokens),
		}
		if r != nil {
			b := r.Batch()
			attrs = append(attrs, attribute.Int(telemetry.AttrBatchSizeMax, b.MaxRows), attribute.Int(telemetry.AttrPreemptions, b.Preempts))
			if b.Steps > 0 {
				attrs = append(attrs, attribute.Float64(telemetry.AttrBatchSizeMean, float64(b.Rows)/float64(b.Steps)))
			}
		}
		tr.End(err, attrs...)
		done(res, err)
	}
	h, err := l.model(model)
	if err != nil {
		end(engine.SampleResult{}, err)
		return
	}
	tr.StartSlice(telemetry.SpanSamplePreprocess)
	slice := func(name string) { tr.StartSlice(telemetry.SampleSpan(name)) }
	hooks := sched.SampleHooks{
		Phase: func(name string) {
			if name == "prefill" {
				tr.EndSlice(attribute.Float64(telemetry.AttrQueueWaitMs, float64(time.Since(start).Microseconds())/1000))
			}
			slice(name)
		},
		FirstToken: func() {
			tr.Event(telemetry.EventFirstToken,
				attribute.Float64(telemetry.AttrTimeToFirstToken, float64(time.Since(start).Microseconds())/1000))
		},
		Token: st.OnToken,
		Top:   st.TopLogprobs,
	}
	submit := func(key string, lw *engine.LoraWeights[float32], release func()) {
		var err error
		r, err = h.sched.NewSample(ctx, key, lw, req, hooks)
		if err != nil {
			release()
			end(engine.SampleResult{}, err)
			return
		}
		tr.StartSlice(telemetry.SpanSampleSchedule)
		h.sched.SubmitSample(r, func(res engine.SampleResult, err error) {
			release()
			end(res, err)
		})
	}
	if lora == "" {
		submit(sched.PrefixKey("", 0), nil, func() {})
		return
	}
	s, err := l.slot(model, lora)
	if err != nil {
		end(engine.SampleResult{}, err)
		return
	}
	// Sampling reads the weights; hold the slot (shared) so a concurrent LoadState or
	// optim_step cannot change them halfway through a generation.
	s.lock.acquire(ctx, false, func() {
		submit(sched.PrefixKey(lora, s.gen), &s.a.W, func() { s.lock.release(false) })
	}, func(err error) { end(engine.SampleResult{}, err) })
}

// SchedulerStats reads a hosted model's scheduler counters (for benchmarks and tests).
func (l *Local) SchedulerStats(model string) (SchedStats, error) {
	h, err := l.model(model)
	if err != nil {
		return SchedStats{}, err
	}
	return h.sched.Stats(), nil
}
