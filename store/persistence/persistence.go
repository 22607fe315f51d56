package persistence

import (
	"context"
	"fmt"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/store/logstore"
	"github.com/tuft-go/tuft/store/memory"
	redisstore "github.com/tuft-go/tuft/store/redis"
	"github.com/tuft-go/tuft/telemetry"
)

// Open opens the configured store. The embedded and Redis stores are instrumented, their
// spans and measurements going to the providers of opts (default: the globals).
func Open(ctx context.Context, p config.Persistence, opts ...telemetry.Option) (store.Store, error) {
	switch p.Mode {
	case "embedded":
		s, err := logstore.Open(p.Path, p.Namespace)
		if err != nil {
			return nil, err
		}
		return store.Instrument(s, opts...), nil
	case "redis":
		return redisstore.Open(ctx, p.RedisURL, p.Namespace, opts...)
	case "memory":
		// Not instrumented: a span around a map write costs more than the write and tells
		// nothing (the memory store is for tests and throwaway servers).
		return memory.New(), nil
	}
	return nil, fmt.Errorf("persistence.mode %q is not supported", p.Mode)
}
