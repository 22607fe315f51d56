package service

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/tuft-go/tuft/backend"
)

// The inference LRU: the checkpoints the OpenAI/Anthropic-compatible routes sample from,
// loaded on the executor on first use (inference.go's Infer acquires and releases them).

// adapterCache keeps the checkpoints named by compatible requests loaded on the
// executor, keyed by tinker path, up to inference.max_adapters (least recently used
// first out; adapters in use never).
type adapterCache struct {
	be    *backend.Backend
	log   *slog.Logger
	max   int // inference.max_adapters
	mu    sync.Mutex
	byKey map[string]*cachedAdapter
	clock int64
}

func newAdapterCache(be *backend.Backend, log *slog.Logger, max int) *adapterCache {
	return &adapterCache{be: be, log: log, max: max, byKey: map[string]*cachedAdapter{}}
}

type cachedAdapter struct {
	key, id, base string
	mod           time.Time
	refs          int
	used          int64
	stale         bool          // a newer version of the checkpoint replaced it
	ready         chan struct{} // closed once loaded (err says how)
	err           error
}

// acquire returns the executor's adapter id for t's checkpoint, loading it on
// first use, and a release function to call when the generation is over.
func (c *adapterCache) acquire(ctx context.Context, t *InferenceTarget) (string, func(), error) {
	c.mu.Lock()
	e := c.byKey[t.Checkpoint]
	var drop []*cachedAdapter
	if e != nil && !e.mod.Equal(t.mod) {
		// The checkpoint was written again: serve the new weights under a new id.
		e.stale = true
		delete(c.byKey, e.key)
		if e.refs == 0 {
			drop = append(drop, e)
		}
		e = nil
	}
	load := e == nil
	if load {
		e = &cachedAdapter{key: t.Checkpoint, base: t.BaseModel, mod: t.mod, ready: make(chan struct{}),
			id: fmt.Sprintf("oai:%s@%d", t.Checkpoint, t.mod.UnixNano())}
		c.byKey[e.key] = e
	}
	e.refs++
	c.clock++
	e.used = c.clock
	c.mu.Unlock()
	c.drop(ctx, drop)

	var once sync.Once
	release := func() { once.Do(func() { c.release(e) }) }
	if load {
		// Loaded for whoever waits: one caller going away must not fail the others.
		e.err = c.be.AddSamplerAdapter(context.WithoutCancel(ctx), e.base, e.id, t.dir)
		if e.err != nil {
			c.mu.Lock()
			if c.byKey[e.key] == e {
				delete(c.byKey, e.key)
			}
			c.mu.Unlock()
		}
		close(e.ready)
	} else {
		select {
		case <-e.ready:
		case <-ctx.Done():
			release()
			return "", nil, ctx.Err()
		}
	}
	if e.err != nil {
		release()
		return "", nil, &Error{Kind: KindInternal, Msg: fmt.Sprintf("could not load checkpoint %s: %v", t.Checkpoint, e.err), Err: e.err}
	}
	c.evict(ctx)
	return e.id, release, nil
}

// release ends one use of e: a stale one no longer used is dropped, and the cache
// evicts down to its bound.
func (c *adapterCache) release(e *cachedAdapter) {
	c.mu.Lock()
	e.refs--
	stale := e.stale && e.refs == 0 && e.err == nil
	c.mu.Unlock()
	ctx := context.Background()
	if stale {
		c.drop(ctx, []*cachedAdapter{e})
	}
	c.evict(ctx)
}

// evict drops the least recently used idle adapters beyond inference.max_adapters.
func (c *adapterCache) evict(ctx context.Context) {
	c.mu.Lock()
	var idle []*cachedAdapter
	for _, e := range c.byKey {
		select {
		case <-e.ready:
			if e.refs == 0 && e.err == nil {
				idle = append(idle, e)
			}
		default:
		}
	}
	over := len(c.byKey) - c.max
	var drop []*cachedAdapter
	if over > 0 {
		sort.Slice(idle, func(i, j int) bool { return idle[i].used < idle[j].used })
		if over > len(idle) {
			over = len(idle)
		}
		drop = idle[:over]
		for _, e := range drop {
			delete(c.byKey, e.key)
		}
	}
	c.mu.Unlock()
	c.drop(ctx, drop)
}

// drop unloads adapters from the executor (a failure is logged: the cache has let go).
func (c *adapterCache) drop(ctx context.Context, drop []*cachedAdapter) {
	for _, e := range drop {
		if err := c.be.RemoveSamplerAdapter(context.WithoutCancel(ctx), e.base, e.id); err != nil {
			c.log.Warn("could not drop an inference adapter", "adapter", e.id, "error", err)
		}
	}
}

// loaded is how many checkpoints the cache holds.
func (c *adapterCache) loaded() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey)
}
