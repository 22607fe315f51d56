package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/store"
)

// Workers find API replicas through the shared store (Redis): each writes a registration
// with a short TTL and renews it; replicas read them. This is the one place outside the
// controllers that touches the store, for these records only.
const keyWorker = "worker/"

// Registration is what a worker publishes about itself.
type Registration struct {
	Address  string    `json:"address"`  // where replicas dial it (worker.advertise)
	Instance string    `json:"instance"` // changes on every start
	Models   []string  `json:"models"`
	Started  time.Time `json:"started"`
}

// Register publishes reg every interval (TTL: three intervals) until ctx ends, then
// withdraws it, so a stopped worker disappears at once and a killed one within the TTL.
func Register(ctx context.Context, st store.Store, reg Registration, every time.Duration, log *slog.Logger) {
	b, _ := json.Marshal(reg)
	store.KeepAlive(ctx, st, keyWorker+reg.Address, b, every, func(err error) {
		log.Warn("worker registration failed; retrying", "address", reg.Address, "error", err)
	})
}

// Registrations lists the live worker registrations.
func Registrations(ctx context.Context, st store.Store) ([]Registration, error) {
	var out []Registration
	err := st.Scan(ctx, keyWorker, func(_ string, v []byte) error {
		var r Registration
		if json.Unmarshal(v, &r) == nil && r.Address != "" {
			out = append(out, r)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out, err
}

// Directory keeps a Router's remote members in step with the pinned worker addresses and
// the registrations in the store: it dials new workers, re-dials one whose instance
// changed (it restarted and lost its adapters), and drops one that stopped answering.
type Directory struct {
	Router *backend.Router
	Store  store.Store // nil: pinned workers only
	Pinned []string
	Remote backend.RemoteOptions
	// FailuresToDrop is how many failed checks in a row remove a worker (default 2).
	FailuresToDrop int
	Log            *slog.Logger

	mu       sync.Mutex
	failures map[string]int
}

// Sync runs one pass.
func (d *Directory) Sync(ctx context.Context) {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.FailuresToDrop <= 0 {
		d.FailuresToDrop = 2
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failures == nil {
		d.failures = map[string]int{}
	}
	want := map[string]string{} // address → instance ("" when unknown: pinned)
	for _, a := range d.Pinned {
		want[a] = ""
	}
	if d.Store != nil {
		regs, err := Registrations(ctx, d.Store)
		if err != nil {
			d.Log.Warn("reading worker registrations", "error", err)
		}
		for _, r := range regs {
			want[r.Address] = r.Instance
		}
	}
	for addr := range want {
		if ex, ok := d.Router.Member(addr); ok {
			rem := ex.(*backend.Remote)
			inst, err := rem.Ping(ctx)
			if err != nil {
				d.failures[addr]++
				if d.failures[addr] >= d.FailuresToDrop {
					d.Log.Warn("worker unreachable; its adapters move to other workers", "address", addr, "error", err)
					d.Router.Remove(addr)
					rem.Close()
					delete(d.failures, addr)
				}
				continue
			}
			d.failures[addr] = 0
			if inst != rem.Instance() {
				fresh, err := backend.DialRemote(ctx, addr, d.Remote)
				if err != nil {
					continue
				}
				d.Log.Warn("worker restarted; its adapters will be restored from their latest saved state", "address", addr)
				d.Router.Set(addr, fresh)
				rem.Close()
			}
			continue
		}
		rem, err := backend.DialRemote(ctx, addr, d.Remote)
		if err != nil {
			d.Log.Warn("worker not reachable yet", "address", addr, "error", err)
			continue
		}
		d.Router.Set(addr, rem)
		var names []string
		for _, m := range rem.Models() {
			names = append(names, m.Name)
		}
		d.Log.Info("worker joined", "address", addr, "models", names)
	}
	for _, k := range d.Router.Keys() {
		if _, ok := want[k]; ok || k == LocalMember {
			continue
		}
		if ex := d.Router.Remove(k); ex != nil {
			ex.Close()
			d.Log.Info("worker left", "address", k)
		}
	}
}

// LocalMember is the Router key of the in-process executor.
const LocalMember = "local"

// WaitFor syncs until every model in models is hosted by some member, or ctx ends.
func (d *Directory) WaitFor(ctx context.Context, models []string, every time.Duration) error {
	for {
		d.Sync(ctx)
		missing := missingModels(d.Router, models)
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no worker hosts %q (check workers.pinned, worker registration and the worker token)", missing)
		case <-time.After(every):
		}
	}
}

// Run syncs every interval until ctx ends.
func (d *Directory) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.Sync(ctx)
		}
	}
}

func missingModels(r *backend.Router, models []string) []string {
	var missing []string
	for _, m := range models {
		if _, _, err := r.Pick(m, ""); err != nil {
			missing = append(missing, m)
		}
	}
	return missing
}
