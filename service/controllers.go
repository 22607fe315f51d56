package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tuft-go/tuft/store"
)

// The service keeps one controller per kind of record: sessions, training runs, sampling
// sessions and checkpoints. Each owns its map, the lock that guards the map and its
// records' fields, its store keys and its loader. An operation that needs several takes
// their locks through Service.lock, which always takes them in one order (sessions, runs,
// samplers, checkpoints), so two operations never wait on each other in a cycle. No store
// call is made under these locks: an ownership miss found under a lock is settled by the
// caller after unlocking (missError, settle).

// sessionCtl holds this replica's client sessions (store keys keySession+id, and
// keyHeartbeat+id for the heartbeat time alone).
type sessionCtl struct {
	mu sync.Mutex
	m  map[string]*Session
}

// runCtl holds this replica's training runs (keyRun+id; keyGrads+id for pending gradients).
type runCtl struct {
	mu sync.Mutex
	m  map[string]*Run
}

// samplerCtl holds this replica's sampling sessions (keySampler+id).
type samplerCtl struct {
	mu sync.Mutex
	m  map[string]*Sampler
}

// ckptCtl holds the checkpoints of this replica's runs (ckptKey(run, type, name)), by run
// and checkpoint id, and owns their layout on disk.
type ckptCtl struct {
	mu    sync.Mutex
	m     map[string]map[string]*Checkpoint // run → checkpoint id → record
	files ckptLayout
}

func (c *sessionCtl) load(ctx context.Context, st store.Store, self string, log *slog.Logger) error {
	return loadAll(ctx, st, keySession, log, func(x *Session) {
		if x.Owner == self { // else another replica's
			c.m[x.ID] = x
		}
	})
}

func (c *runCtl) load(ctx context.Context, st store.Store, self string, log *slog.Logger) error {
	return loadAll(ctx, st, keyRun, log, func(x *Run) {
		if x.Owner == self {
			c.m[x.ID] = x
		}
	})
}

func (c *samplerCtl) load(ctx context.Context, st store.Store, self string, log *slog.Logger) error {
	return loadAll(ctx, st, keySampler, log, func(x *Sampler) {
		if x.Owner == self {
			c.m[x.ID] = x
		}
	})
}

// load reads every checkpoint record: checkpoints have no owner, and those of other
// replicas' runs serve path resolution and listings.
func (c *ckptCtl) load(ctx context.Context, st store.Store, log *slog.Logger) error {
	return loadAll(ctx, st, keyCkpt, log, func(x *Checkpoint) {
		if c.m[x.RunID] == nil {
			c.m[x.RunID] = map[string]*Checkpoint{}
		}
		c.m[x.RunID][x.ID()] = x
	})
}

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

// lockSet names the controllers an operation locks.
type lockSet uint8

const (
	lkSessions lockSet = 1 << iota
	lkRuns
	lkSamplers
	lkCkpts
)

// lock takes the controllers' locks in ls, in the one order.
func (s *Service) lock(ls lockSet) {
	if ls&lkSessions != 0 {
		s.sessions.mu.Lock()
	}
	if ls&lkRuns != 0 {
		s.runs.mu.Lock()
	}
	if ls&lkSamplers != 0 {
		s.samplers.mu.Lock()
	}
	if ls&lkCkpts != 0 {
		s.ckpts.mu.Lock()
	}
}

// unlock releases the locks lock(ls) took.
func (s *Service) unlock(ls lockSet) {
	if ls&lkCkpts != 0 {
		s.ckpts.mu.Unlock()
	}
	if ls&lkSamplers != 0 {
		s.samplers.mu.Unlock()
	}
	if ls&lkRuns != 0 {
		s.runs.mu.Unlock()
	}
	if ls&lkSessions != 0 {
		s.sessions.mu.Unlock()
	}
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
	if ee := s.elsewhere(me.key, me.tenant); ee != nil {
		return ee
	}
	return me.err
}

// put adds or replaces a checkpoint record (callers hold the checkpoints lock).
func (c *ckptCtl) put(ck *Checkpoint) {
	if c.m[ck.RunID] == nil {
		c.m[ck.RunID] = map[string]*Checkpoint{}
	}
	c.m[ck.RunID][ck.ID()] = ck
}

// get finds a run's checkpoint by its id ("weights/<name>"…; callers hold the lock).
func (c *ckptCtl) get(runID, id string) (*Checkpoint, bool) {
	ck, ok := c.m[runID][id]
	return ck, ok
}

// ofRun copies a run's checkpoint records (callers hold the lock).
func (c *ckptCtl) ofRun(runID string) []Checkpoint {
	out := make([]Checkpoint, 0, len(c.m[runID]))
	for _, ck := range c.m[runID] {
		out = append(out, *ck)
	}
	return out
}

// latestState picks the most recent saved state of a run: the autosave written after
// every optim_step and load, or a checkpoint if one was written later. Time decides, from
// the files themselves, so a run record written lazily cannot point at stale state.
// Callers do not hold the checkpoints lock.
func (cc *ckptCtl) latestState(runID string) (dir string, optimizer bool, from string) {
	var best time.Time
	if mt, ok := adapterModTime(cc.files.autosaveDir(runID)); ok {
		dir, optimizer, from, best = cc.files.autosaveDir(runID), true, "the autosave of its last optim_step", mt
	}
	cc.mu.Lock()
	ckpts := cc.ofRun(runID)
	cc.mu.Unlock()
	for _, c := range ckpts {
		if c.Type == CkptExternal {
			continue // an export (maybe encrypted), not a state to train from
		}
		t := c.CreatedAt
		if mt, ok := adapterModTime(c.Dir); ok && mt.After(t) {
			t = mt
		}
		if dir == "" || t.After(best) {
			dir, optimizer, from, best = c.Dir, c.Type == CkptTraining, c.TinkerPath(), t
		}
	}
	return dir, optimizer, from
}
