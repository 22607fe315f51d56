package backend

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tuft-go/tuft/config"
)

// Workers make themselves known to API replicas through the shared store (Redis): each
// publishes a Registration with a short TTL and renews it (package registry holds the
// store records); the API side's Directory reads them through a RegistrationSource and
// keeps a Router's members in step.

// Registration is what a worker publishes about itself.
type Registration struct {
	Address  string    `json:"address"`  // where replicas dial it (worker.advertise)
	Instance string    `json:"instance"` // changes on every start
	Models   []string  `json:"models"`
	Started  time.Time `json:"started"`
}

// RegistrationSource lists the live worker registrations.
type RegistrationSource interface {
	Registrations(ctx context.Context) ([]Registration, error)
}

// Directory keeps a Router's remote members in step with the pinned worker addresses and
// the registrations of Source: it dials new workers, re-dials one whose instance changed
// (it restarted and lost its adapters), and drops one that stopped answering.
type Directory struct {
	router         *Router
	source         RegistrationSource
	pinned         []string
	remote         RemoteOptions
	failuresToDrop int
	log            *slog.Logger

	mu       sync.Mutex
	failures map[string]int
}

// DirectoryOptions configure a Directory.
type DirectoryOptions struct {
	// Source lists registered workers (nil: pinned workers only).
	Source RegistrationSource
	// Pinned are worker addresses dialled whether or not they registered.
	Pinned []string
	// Remote configures each connection.
	Remote RemoteOptions
	// FailuresToDrop is how many failed checks in a row remove a worker (default 2).
	FailuresToDrop int
	Logger         *slog.Logger
}

// NewDirectory returns a Directory that keeps router's remote members in step.
func NewDirectory(router *Router, o DirectoryOptions) *Directory {
	// Checked here too, so a missing value stops start-up rather than the first dial.
	config.MustPositive("workers.call_timeout_seconds", o.Remote.CallTimeout)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.FailuresToDrop <= 0 {
		o.FailuresToDrop = 2
	}
	return &Directory{router: router, source: o.Source, pinned: o.Pinned, remote: o.Remote,
		failuresToDrop: o.FailuresToDrop, log: o.Logger, failures: map[string]int{}}
}

// LocalMember is the Router key of the in-process executor.
const LocalMember = "local"

// Sync runs one pass.
func (d *Directory) Sync(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	want := map[string]string{} // address → instance ("" when unknown: pinned)
	for _, a := range d.pinned {
		want[a] = ""
	}
	if d.source != nil {
		regs, err := d.source.Registrations(ctx)
		if err != nil {
			d.log.Warn("reading worker registrations", "error", err)
		}
		for _, r := range regs {
			want[r.Address] = r.Instance
		}
	}
	for addr := range want {
		if ex, ok := d.router.Member(addr); ok {
			d.check(ctx, addr, ex.(*Remote))
			continue
		}
		rem, err := DialRemote(ctx, addr, d.remote)
		if err != nil {
			d.log.Warn("worker not reachable yet", "address", addr, "error", err)
			continue
		}
		d.router.Set(addr, rem)
		var names []string
		for _, m := range rem.Models() {
			names = append(names, m.Name)
		}
		d.log.Info("worker joined", "address", addr, "models", names)
	}
	for _, k := range d.router.Keys() {
		if _, ok := want[k]; ok || k == LocalMember {
			continue
		}
		if ex := d.router.Remove(k); ex != nil {
			ex.Close()
			d.log.Info("worker left", "address", k)
		}
	}
}

// check pings a known worker: one that stopped answering is dropped after
// failuresToDrop checks, one that restarted is re-dialled. The caller holds d.mu.
func (d *Directory) check(ctx context.Context, addr string, rem *Remote) {
	inst, err := rem.Ping(ctx)
	if err != nil {
		d.failures[addr]++
		if d.failures[addr] >= d.failuresToDrop {
			d.log.Warn("worker unreachable; its adapters move to other workers", "address", addr, "error", err)
			d.router.Remove(addr)
			rem.Close()
			delete(d.failures, addr)
		}
		return
	}
	d.failures[addr] = 0
	if inst == rem.Instance() {
		return
	}
	fresh, err := DialRemote(ctx, addr, d.remote)
	if err != nil {
		return
	}
	d.log.Warn("worker restarted; its adapters will be restored from their latest saved state", "address", addr)
	d.router.Set(addr, fresh)
	rem.Close()
}

// WaitFor syncs until every model in models is hosted by some member, or ctx ends.
func (d *Directory) WaitFor(ctx context.Context, models []string, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		d.Sync(ctx)
		missing := d.missing(models)
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no worker hosts %q (check workers.pinned, worker registration and the worker token)", missing)
		case <-t.C:
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

func (d *Directory) missing(models []string) []string {
	var missing []string
	for _, m := range models {
		if _, _, err := d.router.Pick(m, ""); err != nil {
			missing = append(missing, m)
		}
	}
	return missing
}
