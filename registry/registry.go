package registry

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/store"
)

// keyWorker prefixes a registration's key; the worker's address follows.
const keyWorker = "worker/"

// Workers reads and writes worker registrations in a store.
type Workers struct {
	st store.Store
}

// NewWorkers returns the registrations of st.
func NewWorkers(st store.Store) *Workers { return &Workers{st: st} }

// Publish writes reg and renews it every interval (TTL: three intervals) until ctx ends,
// then withdraws it, so a stopped worker disappears at once and a killed one within the
// TTL. A failed write goes to onErr (nil: ignored) and is retried at the next interval.
func (w *Workers) Publish(ctx context.Context, reg backend.Registration, every time.Duration, onErr func(error)) {
	b, err := json.Marshal(reg)
	if err != nil { // cannot happen: strings and a time
		if onErr != nil {
			onErr(err)
		}
		return
	}
	store.KeepAlive(ctx, w.st, keyWorker+reg.Address, b, every, onErr)
}

// Registrations lists the live registrations, by address. A record that does not decode
// is skipped: it cannot be dialled.
func (w *Workers) Registrations(ctx context.Context) ([]backend.Registration, error) {
	var out []backend.Registration
	err := w.st.Scan(ctx, keyWorker, func(_ string, v []byte) error {
		var r backend.Registration
		if json.Unmarshal(v, &r) == nil && r.Address != "" {
			out = append(out, r)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out, err
}
