package service

import (
	"context"
	"log/slog"
	"sync"

	"github.com/tuft-go/tuft/store"
)

// samplerCtl holds this replica's sampling sessions (keySampler+id), by id and by tenant.
// Its lock is taken through Service.lock (lkSamplers).
type samplerCtl struct {
	mu sync.Mutex
	table[*Sampler]
}

func newSamplerCtl() samplerCtl { return samplerCtl{table: newTable[*Sampler]()} }

// load reads this replica's sampling session records.
func (c *samplerCtl) load(ctx context.Context, st store.Store, self string, log *slog.Logger) error {
	return loadAll(ctx, st, keySampler, log, func(x *Sampler) {
		if x.Owner == self {
			c.put(x)
		}
	})
}
