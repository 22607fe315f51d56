package backend

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/telemetry"
)

// Local hosts base models in this process and runs operations on them directly. It is the
// default executor; `tuft worker` serves the same type over gRPC.
type Local struct {
	mu       sync.Mutex
	models   map[string]*hosted
	infos    []ModelInfo
	adapters map[adapterKey]*slot
	tracer   trace.Tracer
}

type hosted struct {
	model *engine.Model
	// compute admits one heavy operation at a time per base model: the engine already
	// uses every core for one operation, so more would only thrash caches.
	compute chan struct{}
	// pending holds forward(_backward) requests waiting for compute; whoever gets compute
	// runs all of them as one multi-LoRA batch (one pass over the base weights).
	pmu     sync.Mutex
	pending []*fbCall
	batches atomic.Int64 // engine batches run (for tests and debugging)
}

// fbCall is one forward(_backward) waiting to join a batch.
type fbCall struct {
	ctx  context.Context
	a    *engine.Adapter
	req  engine.ForwardRequest
	res  engine.ForwardResult
	err  error
	size int // batch members it ran with
	done chan struct{}
}

// maxBatchTokens bounds the tokens of one multi-LoRA batch.
const maxBatchTokens = 16384

type adapterKey struct{ model, lora string }

// slot serialises the operations of one adapter.
type slot struct {
	mu sync.Mutex
	a  *engine.Adapter
}

// NewLocal hosts the given models; info supplies each model's advertised limits. Its
// spans (hf_model.*) go to the tracer provider of opts (default: the global one).
func NewLocal(models []*engine.Model, infos []ModelInfo, opts ...telemetry.Option) *Local {
	l := &Local{models: map[string]*hosted{}, adapters: map[adapterKey]*slot{}, infos: append([]ModelInfo(nil), infos...),
		tracer: telemetry.NewSettings(opts...).Tracer(telemetry.ScopeModel)}
	for _, m := range models {
		l.models[m.Name] = &hosted{model: m, compute: make(chan struct{}, 1)}
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

// Close releases nothing today; models are garbage collected.
func (l *Local) Close() error { return nil }

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

// acquire waits for the model's compute slot, honouring ctx.
func (h *hosted) acquire(ctx context.Context) error {
	select {
	case h.compute <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *hosted) release() { <-h.compute }

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
	defer l.mu.Unlock()
	delete(l.adapters, adapterKey{model, lora})
	return nil
}

// ForwardBackward runs a forward (and backward, when req.Backward) pass.
func (l *Local) ForwardBackward(ctx context.Context, model, lora string, req engine.ForwardRequest) (res engine.ForwardResult, err error) {
	name := telemetry.SpanHFForward
	if req.Backward {
		name = telemetry.SpanHFForwardBackward
	}
	ctx, sp := l.span(ctx, name, lora, attribute.Bool(telemetry.AttrBackward, req.Backward),
		attribute.Int(telemetry.AttrDataCount, len(req.Data)), attribute.Int(telemetry.AttrNumMicroBatches, 1))
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
		s.mu.Lock() // held until the batch that carries this request is done
		defer s.mu.Unlock()
		a = s.a
	}
	c := &fbCall{ctx: ctx, a: a, req: req, done: make(chan struct{})}
	h.pmu.Lock()
	h.pending = append(h.pending, c)
	h.pmu.Unlock()
	if err := h.runPending(c); err != nil {
		return res, err
	}
	if sp.IsRecording() {
		sp.SetAttributes(attribute.Int(telemetry.AttrBatchAdapters, c.size))
	}
	return c.res, c.err
}

// runPending waits until c has run: either this goroutine gets the model's compute slot
// and runs everything pending (c included) as one batch, or another one does.
func (h *hosted) runPending(c *fbCall) error {
	for {
		select {
		case <-c.done:
			return nil
		case h.compute <- struct{}{}:
		case <-c.ctx.Done():
			if h.withdraw(c) {
				return c.ctx.Err()
			}
			<-c.done // already taken into a running batch
			return nil
		}
		select {
		case <-c.done: // ran in the batch that just released compute
			h.release()
			return nil
		default:
		}
		h.runBatch()
		h.release()
	}
}

// withdraw removes c from the pending list; false if a batch already took it.
func (h *hosted) withdraw(c *fbCall) bool {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	for i, p := range h.pending {
		if p == c {
			h.pending = append(h.pending[:i], h.pending[i+1:]...)
			return true
		}
	}
	return false
}

// runBatch takes pending requests (up to maxBatchTokens, at least one) and runs them as
// one engine batch. The caller holds compute.
func (h *hosted) runBatch() {
	h.pmu.Lock()
	n, tokens := 0, 0
	for n < len(h.pending) {
		t := 0
		for _, d := range h.pending[n].req.Data {
			t += len(d.Tokens)
		}
		if n > 0 && tokens+t > maxBatchTokens {
			break
		}
		tokens += t
		n++
	}
	calls := append([]*fbCall(nil), h.pending[:n]...)
	h.pending = append(h.pending[:0:0], h.pending[n:]...)
	h.pmu.Unlock()
	var live []*fbCall
	items := make([]engine.BatchItem, 0, len(calls))
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			close(c.done)
			continue
		}
		live = append(live, c)
		items = append(items, engine.BatchItem{Adapter: c.a, Request: c.req})
	}
	if len(live) == 0 {
		return
	}
	// One context for the batch: it ends only when every member's has.
	ctx, cancel := allDone(live)
	defer cancel()
	h.batches.Add(1)
	res, errs := h.model.ForwardBackwardBatch(ctx, items)
	for i, c := range live {
		c.res, c.err, c.size = res[i], errs[i], len(live)
		close(c.done)
	}
}

// allDone returns a context cancelled once every call's context is done.
func allDone(calls []*fbCall) (context.Context, context.CancelFunc) {
	if len(calls) == 1 {
		return context.WithCancel(calls[0].ctx)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(calls[0].ctx))
	go func() {
		for _, c := range calls {
			select {
			case <-c.ctx.Done():
			case <-ctx.Done():
				return
			}
		}
		cancel()
	}()
	return ctx, cancel
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
	return h.model.Step(ctx, s.a, p)
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
	defer l.mu.Unlock()
	if s, ok := l.adapters[adapterKey{model, lora}]; ok {
		s.mu.Lock()
		s.a = a
		s.mu.Unlock()
		return nil
	}
	l.adapters[adapterKey{model, lora}] = &slot{a: a}
	return nil
}

// Sample generates continuations, tracing the request's lifecycle slices (preprocess,
// schedule, prefill, decode with a first_token event, postprocess) as children of
// hf_model.sample.
func (l *Local) Sample(ctx context.Context, model, lora string, req engine.SampleRequest) (engine.SampleResult, error) {
	return l.SampleStream(ctx, model, lora, req, Stream{})
}

// SampleStream is Sample reporting each token to st as it is drawn.
func (l *Local) SampleStream(ctx context.Context, model, lora string, req engine.SampleRequest, st Stream) (res engine.SampleResult, err error) {
	start := time.Now()
	tr := telemetry.StartRequest(ctx, l.tracer, telemetry.SpanHFSample, attribute.String(telemetry.AttrLoraID, lora),
		attribute.Bool(telemetry.AttrHasLora, lora != ""), attribute.Int(telemetry.AttrNumSamples, req.NumSamples),
		attribute.String(telemetry.AttrGenAIRequestModel, model))
	ctx = tr.Context()
	defer func() {
		if !tr.Recording() {
			tr.End(err)
			return
		}
		reasons := make([]string, 0, len(res.Sequences))
		for _, s := range res.Sequences {
			reasons = append(reasons, string(s.StopReason))
		}
		tr.End(err,
			attribute.Int(telemetry.AttrPromptTokens, res.PromptTokens),
			attribute.Int(telemetry.AttrOutputTokens, res.OutputTokens),
			attribute.Int(telemetry.AttrGenAIInputTokens, res.PromptTokens),
			attribute.Int(telemetry.AttrGenAIOutputTokens, res.OutputTokens),
			attribute.StringSlice(telemetry.AttrGenAIFinishReasons, reasons),
			attribute.Int(telemetry.AttrTokens, res.PromptTokens+res.OutputTokens))
	}()
	h, err := l.model(model)
	if err != nil {
		return res, err
	}
	var lw *engine.LoraWeights[float32]
	if lora != "" {
		s, err := l.slot(model, lora)
		if err != nil {
			return res, err
		}
		// Sampling reads the weights; hold the slot so a concurrent LoadState cannot swap
		// them halfway through a generation.
		s.mu.Lock()
		defer s.mu.Unlock()
		lw = &s.a.W
	}
	tr.StartSlice(telemetry.SpanSampleSchedule)
	if err := h.acquire(ctx); err != nil {
		return res, err
	}
	defer h.release()
	tr.EndSlice()
	return h.model.SampleWithHooks(ctx, lw, req, engine.SampleHooks{
		OnPhase: func(phase string, begin bool) {
			if begin {
				tr.StartSlice(telemetry.SampleSpan(phase))
			} else {
				tr.EndSlice()
			}
		},
		OnFirstToken: func() {
			tr.Event(telemetry.EventFirstToken,
				attribute.Float64(telemetry.AttrTimeToFirstToken, float64(time.Since(start).Microseconds())/1000))
		},
		OnToken:     st.OnToken,
		TopLogprobs: st.TopLogprobs,
	})
}
