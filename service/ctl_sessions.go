package service

import (
	"context"
	"log/slog"
	"sync"

	"github.com/tuft-go/tuft/store"
)

// sessionCtl holds this replica's client sessions (store keys keySession+id, and
// keyHeartbeat+id for the heartbeat time alone), by id and by tenant. Its lock is taken
// through Service.lock (lkSessions).
type sessionCtl struct {
	mu sync.Mutex
	table[*Session]
}

func newSessionCtl() sessionCtl { return sessionCtl{table: newTable[*Session]()} }

// load reads this replica's session records (another replica's are its own).
func (c *sessionCtl) load(ctx context.Context, st store.Store, self string, log *slog.Logger) error {
	return loadAll(ctx, st, keySession, log, func(x *Session) {
		if x.Owner == self {
			c.put(x)
		}
	})
}

// owned returns the tenant's session (callers hold the sessions lock, and settle the
// error after unlocking).
func (c *sessionCtl) owned(tenant, id string) (*Session, error) {
	se, ok := c.get(id)
	if !ok || se.Tenant != tenant {
		return nil, miss(keySession+id, tenant, notFoundf("session %q not found", id))
	}
	return se, nil
}
