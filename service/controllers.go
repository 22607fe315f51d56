package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"

	"github.com/tuft-go/tuft/store"
)

// The service keeps one controller per kind of record: sessions (ctl_sessions.go),
// training runs (ctl_runs.go), sampling sessions (ctl_samplers.go) and checkpoints
// (ctl_ckpts.go). Each owns its records, an index of them by tenant, the lock that guards
// both and its records' fields, its store keys and its loader; its fields are read in its
// own file alone (tests/layers TestControllersKeepTheirState). Their locks are taken
// through the family (family.go) alone, in one documented order. No store call is made
// under these locks: an ownership miss found under a lock is settled by the caller after
// unlocking (missError, settle).

// keyed is a record a table holds: its id and its tenant (the owner index's key).
type keyed interface {
	comparable
	ident() (id, tenant string)
}

func (x *Session) ident() (string, string) { return x.ID, x.Tenant }
func (x *Run) ident() (string, string)     { return x.ID, x.Tenant }
func (x *Sampler) ident() (string, string) { return x.ID, x.Tenant }

// table is a controller's records by id, with the owner index (tenant → id → record) that
// a listing of one tenant reads instead of every tenant's records. Callers hold the
// controller's lock.
type table[T keyed] struct {
	recs     map[string]T
	byTenant map[string]map[string]T
}

func newTable[T keyed]() table[T] {
	return table[T]{recs: map[string]T{}, byTenant: map[string]map[string]T{}}
}

// get finds a record by id.
func (t *table[T]) get(id string) (T, bool) {
	x, ok := t.recs[id]
	return x, ok
}

// at is the record with id, or the zero value (nil) when there is none.
func (t *table[T]) at(id string) T { return t.recs[id] }

// put adds or replaces a record under its id and indexes it by its tenant.
func (t *table[T]) put(x T) {
	id, tenant := x.ident()
	t.del(id) // a replaced record may have had another tenant
	t.recs[id] = x
	if t.byTenant[tenant] == nil {
		t.byTenant[tenant] = map[string]T{}
	}
	t.byTenant[tenant][id] = x
}

// del removes the record with id (nothing when there is none).
func (t *table[T]) del(id string) {
	old, ok := t.recs[id]
	if !ok {
		return
	}
	_, tenant := old.ident()
	delete(t.recs, id)
	delete(t.byTenant[tenant], id)
	if len(t.byTenant[tenant]) == 0 {
		delete(t.byTenant, tenant)
	}
}

// all is every record, in no order (the reaper's, the restore's and the quota's scans).
func (t *table[T]) all() iter.Seq[T] {
	return func(yield func(T) bool) {
		for _, x := range t.recs {
			if !yield(x) {
				return
			}
		}
	}
}

// ofTenant is the tenant's records alone, in no order, from the owner index: a listing
// touches no other tenant's records.
func (t *table[T]) ofTenant(tenant string) iter.Seq[T] {
	return func(yield func(T) bool) {
		for _, x := range t.byTenant[tenant] {
			if !yield(x) {
				return
			}
		}
	}
}

// len is how many records the table holds.
func (t *table[T]) len() int { return len(t.recs) }

// loadAll decodes every record under prefix and hands it to keep; an unreadable record is
// logged and skipped, so one bad record does not stop the server.
func loadAll[T any](ctx context.Context, st store.Store, prefix string, log *slog.Logger, keep func(*T)) error {
	err := st.Scan(ctx, prefix, func(key string, v []byte) error {
		x := new(T)
		if err := json.Unmarshal(v, x); err != nil {
			log.Warn("skipping unreadable record", "key", key, "error", err)
			return nil
		}
		keep(x)
		return nil
	})
	if err != nil {
		return fmt.Errorf("load %s records: %w", prefix, err)
	}
	return nil
}

// missError is an id a request named that this replica does not hold, found under a
// controller lock. It reads as its not-found error; settle, called after unlocking, asks
// the store whether another replica owns the record (a request to forward there).
type missError struct {
	key, tenant string
	err         error
}

func (e *missError) Error() string { return e.err.Error() }
func (e *missError) Unwrap() error { return e.err }

// miss is the missError for key, reading as notFound.
func miss(key, tenant string, notFound error) error {
	return &missError{key: key, tenant: tenant, err: notFound}
}

// settle turns an ownership miss into an ElsewhereError when another replica owns the
// record (a store read: callers hold no controller lock). Other errors pass unchanged.
func (s *Service) settle(err error) error {
	var me *missError
	if !errors.As(err, &me) {
		return err
	}
	if ee := s.replicas.elsewhere(me.key, me.tenant); ee != nil {
		return ee
	}
	return me.err
}
