package service

import (
	"context"
	"iter"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/tuft-go/tuft/store"
)

// ckptCtl holds the checkpoint records (ckptKey(run, type, name)), by run and checkpoint
// id, with the owner index (tenant → run → how many of the run's checkpoints are the
// tenant's), and owns their layout on disk. Its lock is taken through Service.lock
// (lkCkpts).
type ckptCtl struct {
	mu       sync.Mutex
	byRun    map[string]map[string]*Checkpoint // run → checkpoint id → record
	byTenant map[string]map[string]int         // tenant → run → its checkpoints of that tenant
	files    ckptLayout
}

func newCkptCtl(root string) ckptCtl {
	return ckptCtl{byRun: map[string]map[string]*Checkpoint{}, byTenant: map[string]map[string]int{}, files: ckptLayout{root: root}}
}

// load reads every checkpoint record: checkpoints have no owner, and those of other
// replicas' runs serve path resolution and listings.
func (c *ckptCtl) load(ctx context.Context, st store.Store, log *slog.Logger) error {
	return loadAll(ctx, st, keyCkpt, log, c.put)
}

// layout is where the checkpoints' files live (ckptfs.go); it needs no lock.
func (c *ckptCtl) layout() ckptLayout { return c.files }

// put adds or replaces a checkpoint record (callers hold the checkpoints lock).
func (c *ckptCtl) put(ck *Checkpoint) {
	c.del(ck.RunID, ck.ID())
	if c.byRun[ck.RunID] == nil {
		c.byRun[ck.RunID] = map[string]*Checkpoint{}
	}
	c.byRun[ck.RunID][ck.ID()] = ck
	if c.byTenant[ck.Tenant] == nil {
		c.byTenant[ck.Tenant] = map[string]int{}
	}
	c.byTenant[ck.Tenant][ck.RunID]++
}

// del removes a run's checkpoint by its id (nothing when there is none; callers hold the
// lock).
func (c *ckptCtl) del(runID, id string) {
	old, ok := c.byRun[runID][id]
	if !ok {
		return
	}
	delete(c.byRun[runID], id)
	if len(c.byRun[runID]) == 0 {
		delete(c.byRun, runID)
	}
	if c.byTenant[old.Tenant][runID]--; c.byTenant[old.Tenant][runID] <= 0 {
		delete(c.byTenant[old.Tenant], runID)
		if len(c.byTenant[old.Tenant]) == 0 {
			delete(c.byTenant, old.Tenant)
		}
	}
}

// replaceRun makes cks a run's only checkpoints (callers hold the lock).
func (c *ckptCtl) replaceRun(runID string, cks ...*Checkpoint) {
	for id := range c.byRun[runID] {
		c.del(runID, id)
	}
	for _, ck := range cks {
		c.put(ck)
	}
}

// get finds a run's checkpoint by its id ("weights/<name>"…; callers hold the lock).
func (c *ckptCtl) get(runID, id string) (*Checkpoint, bool) {
	ck, ok := c.byRun[runID][id]
	return ck, ok
}

// count is how many checkpoints a run has (callers hold the lock).
func (c *ckptCtl) count(runID string) int { return len(c.byRun[runID]) }

// inRun is a run's checkpoint records, in no order (callers hold the lock).
func (c *ckptCtl) inRun(runID string) iter.Seq[*Checkpoint] {
	return func(yield func(*Checkpoint) bool) {
		for _, ck := range c.byRun[runID] {
			if !yield(ck) {
				return
			}
		}
	}
}

// ofRun copies a run's checkpoint records (callers hold the lock).
func (c *ckptCtl) ofRun(runID string) []Checkpoint {
	out := make([]Checkpoint, 0, len(c.byRun[runID]))
	for _, ck := range c.byRun[runID] {
		out = append(out, *ck)
	}
	return out
}

// all is every checkpoint record, in no order (callers hold the lock).
func (c *ckptCtl) all() iter.Seq[*Checkpoint] {
	return func(yield func(*Checkpoint) bool) {
		for _, m := range c.byRun {
			for _, ck := range m {
				if !yield(ck) {
					return
				}
			}
		}
	}
}

// ofTenant is the tenant's checkpoint records alone, from the owner index (callers hold
// the lock): a listing touches the runs that hold the tenant's checkpoints and no others.
func (c *ckptCtl) ofTenant(tenant string) iter.Seq[*Checkpoint] {
	return func(yield func(*Checkpoint) bool) {
		for runID := range c.byTenant[tenant] {
			for _, ck := range c.byRun[runID] {
				if ck.Tenant == tenant && !yield(ck) {
					return
				}
			}
		}
	}
}

// latestState picks the most recent saved state of a run: the autosave written after
// every optim_step and load, or a checkpoint if one was written later. Time decides, from
// the files themselves, so a run record written lazily cannot point at stale state.
// Callers do not hold the checkpoints lock.
func (c *ckptCtl) latestState(runID string) (dir string, optimizer bool, from string) {
	var best time.Time
	if mt, ok := adapterModTime(c.files.autosaveDir(runID)); ok {
		dir, optimizer, from, best = c.files.autosaveDir(runID), true, "the autosave of its last optim_step", mt
	}
	c.mu.Lock()
	ckpts := c.ofRun(runID)
	c.mu.Unlock()
	for _, ck := range ckpts {
		if ck.Type == CkptExternal {
			continue // an export (maybe encrypted), not a state to train from
		}
		t := ck.CreatedAt
		if mt, ok := adapterModTime(ck.Dir); ok && mt.After(t) {
			t = mt
		}
		if dir == "" || t.After(best) {
			dir, optimizer, from, best = ck.Dir, ck.Type == CkptTraining, ck.TinkerPath(), t
		}
	}
	return dir, optimizer, from
}

// resolve finds the checkpoint a tinker:// path names, visible to tenant (its own or a
// published one): this replica's record, else fetched (fetchCheckpoint's answer, read
// before the lock). Callers hold the checkpoints lock.
func (cc *ckptCtl) resolve(tenant, path string, fetched *Checkpoint) (*Checkpoint, error) {
	runID, kind, name, err := ParseTinkerPath(path)
	if err != nil {
		return nil, err
	}
	c, ok := cc.get(runID, kind+"/"+name)
	if !ok && fetched != nil && fetched.RunID == runID && fetched.ID() == kind+"/"+name {
		c, ok = fetched, true
	}
	if !ok || (c.Tenant != tenant && !c.Public) {
		return nil, notFoundf("checkpoint %s not found", path)
	}
	if err := cc.inherited(c); err != nil {
		return nil, err
	}
	if _, err := os.Stat(c.Dir); err != nil {
		return nil, notFoundf("checkpoint %s: its files are missing on the server", path)
	}
	return c, nil
}

// inherited is the 404 for a copy whose original is no longer published (nil for any
// other checkpoint). Callers hold the checkpoints lock.
func (cc *ckptCtl) inherited(c *Checkpoint) error {
	if c.CopyOf == "" {
		return nil
	}
	if runID, kind, name, err := ParseTinkerPath(c.CopyOf); err == nil {
		if src, ok := cc.get(runID, kind+"/"+name); ok && src.Public {
			return nil
		}
	}
	return notFoundf("checkpoint %s is a copy of %s, which is %s", c.TinkerPath(), c.CopyOf, withdrawnWhat)
}
