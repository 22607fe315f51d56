package backend

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/backend/sched"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/telemetry"
)

// Local hosts base models in this process and runs operations on them directly. It is the
// default executor; `tuft worker` serves the same type over gRPC. Each model has a
// scheduler (sched.go) that runs its decode steps and training packs.
type Local struct {
	mu       sync.Mutex
	models   map[string]*hosted
	infos    []ModelInfo
	adapters map[adapterKey]*slot
	tracer   trace.Tracer
}

type hosted struct {
	model *engine.Model
	sched *sched.Scheduler
}

type adapterKey struct{ model, lora string }

// slot guards one adapter: training operations hold it exclusively, samples share it.
type slot struct {
	mu  sync.RWMutex
	a   *engine.Adapter
	gen uint64 // bumped when the weights change (the prefix cache keys on it)
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

// CreateAdapter creates a fresh LoRA adapter.
func (l *Local) CreateAdapter(ctx context.Context, model, lora string, cfg engine.LoraConfig) (err error) {
	_, sp := l.span(ctx, telemetry.SpanHFCreateAdapter, lora, attribute.Int(telemetry.AttrLoraRank, cfg.Rank))
	defer func() { telemetry.End(sp, err) }()
	h, err := l.model(model)
	if err != nil {
		return err
	}
	a, err := h.model.NewAdapter(cfg)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.adapters[adapterKey{model, lora}] = &slot{a: a}
	return nil
}

// RemoveAdapter drops an adapter; removing a missing one is not an error.
func (l *Local) RemoveAdapter(ctx context.Context, model, lora string) error {
	l.mu.Lock()
	delete(l.adapters, adapterKey{model, lora})
	h := l.models[model]
	l.mu.Unlock()
	if h != nil {
		h.sched.DropPrefixes(lora)
	}
	return nil
}

// ForwardBackward runs a forward (and backward, when req.Backward) pass.
func (l *Local) ForwardBackward(ctx context.Context, model, lora string, req engine.ForwardRequest) (res engine.ForwardResult, err error) {
	name := telemetry.SpanHFForward
	if req.Backward {
		name = telemetry.SpanHFForwardBackward
	}
	ctx, sp := l.span(ctx, name, lora, attribute.Bool(telemetry.AttrBackward, req.Backward),
		attribute.Int(telemetry.AttrDataCount, len(req.Data)))
	defer func() {
		if sp.IsRecording() {
			sp.SetAttributes(attribute.Int(telemetry.AttrTokens, res.Tokens))
		}
		telemetry.End(sp, err)
	}()
	h, err := l.model(model)
	if err != nil {
		return res, err
	}
	var a *engine.Adapter
	if lora != "" {
		s, err := l.slot(model, lora)
		if err != nil {
			return res, err
		}
		s.mu.Lock() // held until the scheduler has run every datum of the request
		defer s.mu.Unlock()
		a = s.a
	}
	type outcome struct {
		res engine.ForwardResult
		ps  sched.PackStats
		err error
	}
	ch := make(chan outcome, 1)
	h.sched.SubmitForward(ctx, a, req, func(res engine.ForwardResult, ps sched.PackStats, err error) { ch <- outcome{res, ps, err} })
	o := <-ch
	if sp.IsRecording() {
		sp.SetAttributes(attribute.Int(telemetry.AttrBatchAdapters, o.ps.Parts), attribute.Int(telemetry.AttrNumMicroBatches, max(1, o.ps.Packs)),
			attribute.Float64(telemetry.AttrQueueWaitMs, float64(o.ps.Waited.Microseconds())/1000))
	}
	return o.res, o.err
}

// OptimStep applies one step of the adapter's optimizer (AdamW or Dimuon).
func (l *Local) OptimStep(ctx context.Context, model, lora string, p engine.StepParams) (m map[string]float64, err error) {
	ctx, sp := l.span(ctx, telemetry.SpanHFOptimStep, lora, attribute.Float64(telemetry.AttrLearningRate, p.LearningRate()),
		attribute.String(telemetry.AttrOptimizerFamily, p.Family()))
	defer func() { telemetry.End(sp, err) }()
	h, err := l.model(model)
	if err != nil {
		return nil, err
	}
	s, err := l.slot(model, lora)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err = h.model.Step(ctx, s.a, p)
	if err == nil {
		s.gen++ // new weights: prompts cached under the old ones no longer apply
		h.sched.DropPrefixes(lora)
	}
	return m, err
}

// SaveState writes the adapter into dir.
func (l *Local) SaveState(ctx context.Context, model, lora, dir string, optimizer bool) (err error) {
	_, sp := l.span(ctx, telemetry.SpanHFSaveState, lora, attribute.Bool(telemetry.AttrOptimizer, optimizer))
	defer func() { telemetry.End(sp, err) }()
	h, err := l.model(model)
	if err != nil {
		return err
	}
	s, err := l.slot(model, lora)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return h.model.SaveAdapter(s.a, dir, optimizer)
}

// LoadState creates or replaces the adapter from dir, training with want.
func (l *Local) LoadState(ctx context.Context, model, lora, dir string, optimizer bool, want engine.OptimizerConfig) (err error) {
	_, sp := l.span(ctx, telemetry.SpanHFLoadState, lora, attribute.Bool(telemetry.AttrOptimizer, optimizer))
	defer func() { telemetry.End(sp, err) }()
	h, err := l.model(model)
	if err != nil {
		return err
	}
	a, err := h.model.LoadAdapterAs(dir, optimizer, want)
	if err != nil {
		return err
	}
	l.mu.Lock()
	s, ok := l.adapters[adapterKey{model, lora}]
	if !ok {
		l.adapters[adapterKey{model, lora}] = &slot{a: a}
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	// Not under l.mu: samples may hold the slot for a while, and other adapters' calls
	// must not wait for them.
	s.mu.Lock()
	s.a = a
	s.gen++
	s.mu.Unlock()
	h.sched.DropPrefixes(lora)
	return nil
}

// Sample generates continuations through the model's scheduler, which decodes this
// request's sequences in one batch with every other active sequence. It traces the
// request's lifecycle slices (preprocess, schedule, prefill, decode with a first_token
// event, postprocess) as children of hf_model.sample, each at the time this request
// reaches it inside the shared batch.
func (l *Local) Sample(ctx context.Context, model, lora string, req engine.SampleRequest) (engine.SampleResult, error) {
	return l.SampleStream(ctx, model, lora, req, Stream{})
}

// SampleStream is Sample reporting each token to st as the decode step that drew it
// ends.
func (l *Local) SampleStream(ctx context.Context, model, lora string, req engine.SampleRequest, st Stream) (res engine.SampleResult, err error) {
	start := time.Now()
	tr := telemetry.StartRequest(ctx, l.tracer, telemetry.SpanHFSample, attribute.String(telemetry.AttrLoraID, lora),
		attribute.Bool(telemetry.AttrHasLora, lora != ""), attribute.Int(telemetry.AttrNumSamples, req.NumSamples),
		attribute.String(telemetry.AttrGenAIRequestModel, model))
	ctx = tr.Context()
	var r *sched.Sample
	defer func() {
		tr.EndSlice()
		if !tr.Recording() {
			tr.End(err)
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
	}()
	h, err := l.model(model)
	if err != nil {
		return res, err
	}
	tr.StartSlice(telemetry.SpanSamplePreprocess)
	var lw *engine.LoraWeights[float32]
	key := sched.PrefixKey("", 0)
	if lora != "" {
		s, err := l.slot(model, lora)
		if err != nil {
			return res, err
		}
		// Sampling reads the weights; hold the slot so a concurrent LoadState or optim_step
		// cannot change them halfway through a generation.
		s.mu.RLock()
		defer s.mu.RUnlock()
		lw, key = &s.a.W, sched.PrefixKey(lora, s.gen)
	}
	slice := func(name string) { tr.StartSlice(telemetry.SampleSpan(name)) }
	r, err = h.sched.NewSample(ctx, key, lw, req, sched.SampleHooks{
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
	})
	if err != nil {
		return res, err
	}
	tr.StartSlice(telemetry.SpanSampleSchedule)
	type outcome struct {
		res engine.SampleResult
		err error
	}
	ch := make(chan outcome, 1)
	h.sched.SubmitSample(r, func(res engine.SampleResult, err error) { ch <- outcome{res, err} })
	o := <-ch
	return o.res, o.err
}

// SchedulerStats reads a hosted model's scheduler counters (for benchmarks and tests).
func (l *Local) SchedulerStats(model string) (SchedStats, error) {
	h, err := l.model(model)
	if err != nil {
		return SchedStats{}, err
	}
	return h.sched.Stats(), nil
}
