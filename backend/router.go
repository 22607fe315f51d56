package backend

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/tuft-go/tuft/engine"
)

// Router is an Executor over several members: the in-process executor and remote
// workers. Each operation goes to a member hosting its model. An adapter stays on one
// member, chosen by rendezvous hashing of its id over the members that host the model,
// so every API replica picks the same worker without talking to the others, and when a
// worker leaves only its own adapters move.
type Router struct {
	mu      sync.RWMutex
	members map[string]Executor
	byModel map[string][]string // model → member keys, sorted
	infos   map[string]ModelInfo
	rr      atomic.Uint64
}

// NewRouter returns an empty router.
func NewRouter() *Router {
	return &Router{members: map[string]Executor{}, byModel: map[string][]string{}, infos: map[string]ModelInfo{}}
}

// Set adds or replaces member key (a worker address, or "local"); it returns the member
// it replaced, if any, for the caller to close.
func (r *Router) Set(key string, ex Executor) Executor {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.members[key]
	r.members[key] = ex
	r.reindex()
	return old
}

// Remove drops member key and returns it (nil if absent).
func (r *Router) Remove(key string) Executor {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.members[key]
	delete(r.members, key)
	r.reindex()
	return old
}

// Member returns member key.
func (r *Router) Member(key string) (Executor, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ex, ok := r.members[key]
	return ex, ok
}

// Keys lists the members.
func (r *Router) Keys() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	keys := make([]string, 0, len(r.members))
	for k := range r.members {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (r *Router) reindex() {
	r.byModel = map[string][]string{}
	for k, ex := range r.members {
		for _, mi := range ex.Models() {
			r.byModel[mi.Name] = append(r.byModel[mi.Name], k)
			// Infos are kept after a member leaves: a model whose workers are all down
			// stays known (operations on it fail as unavailable, not as unknown).
			r.infos[mi.Name] = mi
		}
	}
	for _, ks := range r.byModel {
		sort.Strings(ks)
	}
}

// Models implements Executor: every model any member hosts or hosted.
func (r *Router) Models() []ModelInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]ModelInfo, 0, len(r.infos))
	for _, mi := range r.infos {
		out = append(out, mi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Pick returns the member that holds (model, lora): the highest rendezvous score among
// the members hosting model. lora "" (the base model) spreads round-robin.
func (r *Router) Pick(model, lora string) (string, Executor, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	keys := r.byModel[model]
	if len(keys) == 0 {
		if _, known := r.infos[model]; known {
			return "", nil, fmt.Errorf("%w: no live worker hosts %q", ErrWorkerUnavailable, model)
		}
		return "", nil, UnknownModel(model)
	}
	if lora == "" {
		k := keys[int(r.rr.Add(1)%uint64(len(keys)))]
		return k, r.members[k], nil
	}
	best, bestScore := "", uint64(0)
	for _, k := range keys {
		h := fnv.New64a()
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write([]byte(lora))
		if s := h.Sum64(); best == "" || s > bestScore {
			best, bestScore = k, s
		}
	}
	return best, r.members[best], nil
}

func (r *Router) pick(model, lora string) (Executor, error) {
	_, ex, err := r.Pick(model, lora)
	return ex, err
}

// Close implements Executor: it closes every member.
func (r *Router) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first error
	for k, ex := range r.members {
		if err := ex.Close(); err != nil && first == nil {
			first = fmt.Errorf("%s: %w", k, err)
		}
	}
	r.members = map[string]Executor{}
	r.reindex()
	return first
}

// CreateAdapter implements Executor.
func (r *Router) CreateAdapter(ctx context.Context, model, lora string, cfg engine.LoraConfig) error {
	ex, err := r.pick(model, lora)
	if err != nil {
		return err
	}
	return ex.CreateAdapter(ctx, model, lora, cfg)
}

// RemoveAdapter implements Executor.
func (r *Router) RemoveAdapter(ctx context.Context, model, lora string) error {
	ex, err := r.pick(model, lora)
	if err != nil {
		return err
	}
	return ex.RemoveAdapter(ctx, model, lora)
}

// ForwardBackward implements Executor.
func (r *Router) ForwardBackward(ctx context.Context, model, lora string, req engine.ForwardRequest) (engine.ForwardResult, error) {
	ex, err := r.pick(model, lora)
	if err != nil {
		return engine.ForwardResult{}, err
	}
	return ex.ForwardBackward(ctx, model, lora, req)
}

// OptimStep implements Executor.
func (r *Router) OptimStep(ctx context.Context, model, lora string, p engine.StepParams) (map[string]float64, error) {
	ex, err := r.pick(model, lora)
	if err != nil {
		return nil, err
	}
	return ex.OptimStep(ctx, model, lora, p)
}

// SaveState implements Executor.
func (r *Router) SaveState(ctx context.Context, model, lora, dir string, optimizer bool) error {
	ex, err := r.pick(model, lora)
	if err != nil {
		return err
	}
	return ex.SaveState(ctx, model, lora, dir, optimizer)
}

// LoadState implements Executor.
func (r *Router) LoadState(ctx context.Context, model, lora, dir string, optimizer bool, want engine.OptimizerConfig) error {
	ex, err := r.pick(model, lora)
	if err != nil {
		return err
	}
	return ex.LoadState(ctx, model, lora, dir, optimizer, want)
}

// Sample implements Executor.
func (r *Router) Sample(ctx context.Context, model, lora string, req engine.SampleRequest) (engine.SampleResult, error) {
	ex, err := r.pick(model, lora)
	if err != nil {
		return engine.SampleResult{}, err
	}
	return ex.Sample(ctx, model, lora, req)
}

// ForwardBackwardAsync implements Executor through the member that holds the adapter.
func (r *Router) ForwardBackwardAsync(ctx context.Context, model, lora string, req engine.ForwardRequest, done func(engine.ForwardResult, error)) {
	ex, err := r.pick(model, lora)
	if err != nil {
		done(engine.ForwardResult{}, err)
		return
	}
	ex.ForwardBackwardAsync(ctx, model, lora, req, done)
}

// OptimStepAsync implements Executor through the member that holds the adapter.
func (r *Router) OptimStepAsync(ctx context.Context, model, lora string, p engine.StepParams, done func(map[string]float64, error)) {
	ex, err := r.pick(model, lora)
	if err != nil {
		done(nil, err)
		return
	}
	ex.OptimStepAsync(ctx, model, lora, p, done)
}

// SampleAsync implements Executor through a member hosting the model.
func (r *Router) SampleAsync(ctx context.Context, model, lora string, req engine.SampleRequest, done func(engine.SampleResult, error)) {
	ex, err := r.pick(model, lora)
	if err != nil {
		done(engine.SampleResult{}, err)
		return
	}
	ex.SampleAsync(ctx, model, lora, req, done)
}

// SampleStream implements Streamer for the members that do; others answer ErrNoStreaming.
func (r *Router) SampleStream(ctx context.Context, model, lora string, req engine.SampleRequest, st Stream) (engine.SampleResult, error) {
	ex, err := r.pick(model, lora)
	if err != nil {
		return engine.SampleResult{}, err
	}
	sx, ok := ex.(Streamer)
	if !ok {
		return engine.SampleResult{}, fmt.Errorf("%w for %q: it is hosted by a remote worker, which returns whole results", ErrNoStreaming, model)
	}
	return sx.SampleStream(ctx, model, lora, req, st)
}
