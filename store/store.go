package store

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned by Get for a missing or expired key.
var ErrNotFound = errors.New("store: key not found")

// Op is one write inside an atomic batch: a Set (Value non-nil) or a Del (Value nil).
type Op struct {
	Key   string
	Value []byte
	TTL   time.Duration // 0 = no expiry
}

// Store is a namespaced key-value store. Keys are plain strings chosen by the caller
// (e.g. "run/<id>"); implementations prefix them with their namespace. Values are opaque
// bytes. All methods are safe for concurrent use.
type Store interface {
	// Get returns the value of key, or ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, error)
	// Set writes key; ttl 0 keeps it until deleted.
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
	// SetNX writes key only if it does not exist; it reports whether it wrote.
	SetNX(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error)
	// Del removes keys; missing keys are not an error.
	Del(ctx context.Context, keys ...string) error
	// Scan calls fn for every live key with the prefix, in key order for the embedded and
	// memory stores (unordered for Redis). Returning an error from fn stops the scan.
	Scan(ctx context.Context, prefix string, fn func(key string, value []byte) error) error
	// Apply performs all ops atomically: all are visible, or none.
	Apply(ctx context.Context, ops []Op) error
	// Clear deletes every key of the namespace (tuft clear persistence).
	Clear(ctx context.Context) error
	// Kind names the implementation ("tuft-embedded", "redis", "memory").
	Kind() string
	// Close flushes and releases the store.
	Close() error
}

// Queuer is implemented by stores that can queue a write without waiting for it to be
// durable (the embedded store's group commit). Writes commit in the order they were
// queued or issued: a write issued after SetQueued returns is never applied before it.
type Queuer interface {
	// SetQueued queues a Set and returns at once; done is called with the outcome once the
	// write is durable. done runs on the store's commit goroutine and must not block.
	SetQueued(ctx context.Context, key string, value []byte, ttl time.Duration, done func(error))
}

// SetQueued queues a write on s if it is a Queuer, and otherwise performs it at once; in
// both cases done receives the outcome, and a later write is never applied before it.
func SetQueued(ctx context.Context, s Store, key string, value []byte, ttl time.Duration, done func(error)) {
	if q, ok := s.(Queuer); ok {
		q.SetQueued(ctx, key, value, ttl, done)
		return
	}
	done(s.Set(ctx, key, value, ttl))
}

// KeepAlive writes key with a TTL of three intervals, renews it every interval until ctx
// ends, then deletes it: a presence record (a worker's or a replica's registration) that
// disappears at once on a clean stop and within the TTL after a crash. A failed write is
// reported to onErr and retried at the next interval.
func KeepAlive(ctx context.Context, s Store, key string, value []byte, every time.Duration, onErr func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := s.Set(context.WithoutCancel(ctx), key, value, 3*every); err != nil && onErr != nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.Del(c, key)
			cancel()
			return
		case <-t.C:
		}
	}
}
