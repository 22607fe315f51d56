package service

import (
	"context"
	"log/slog"
	"sync"

	"github.com/tuft-go/tuft/store"
)

// runCtl holds this replica's training runs (keyRun+id; keyGrads+id for pending
// gradients), by id and by tenant. Its lock is taken through Service.lock (lkRuns).
type runCtl struct {
	mu sync.Mutex
	table[*Run]
}

func newRunCtl() runCtl { return runCtl{table: newTable[*Run]()} }

// load reads this replica's run records.
func (c *runCtl) load(ctx context.Context, st store.Store, self string, log *slog.Logger) error {
	return loadAll(ctx, st, keyRun, log, func(x *Run) {
		if x.Owner == self {
			c.put(x)
		}
	})
}

// owned returns the tenant's run (callers hold the runs lock, and settle the error after
// unlocking).
func (c *runCtl) owned(tenant, id string) (*Run, error) {
	r, ok := c.get(id)
	if !ok || r.Tenant != tenant {
		return nil, miss(keyRun+id, tenant, notFoundf("training run %q not found", id))
	}
	return r, nil
}
