package service

import (
	"sort"
	"strings"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/telemetry"
)

// The family is the four controllers together (Service embeds it) and the one place
// their locks are taken: an operation that needs several names them in a lockSet, and
// lock takes them in one order, sessions, runs, samplers, checkpoints, so two operations
// never wait on each other in a cycle (tests/layers TestControllersKeepTheirState fails a
// controller's lock taken anywhere else). The reads that span several controllers and
// need nothing else of the service are family methods, below; callers hold the locks
// each names.

// family is the four controllers, and the one way to take their locks (lock): an
// operation that needs several names them in a lockSet. Service embeds it.
type family struct {
	sessions sessionCtl
	runs     runCtl
	samplers samplerCtl
	ckpts    ckptCtl

	// What the operations across controllers (the quota checks, quota.go) read beside
	// them: the configuration (limits), the clock and the models' shapes.
	cfg    config.Config
	now    func() time.Time
	models map[string]backend.ModelInfo
}

func newFamily(cfg config.Config, now func() time.Time) family {
	if now == nil {
		now = time.Now
	}
	return family{sessions: newSessionCtl(), runs: newRunCtl(), samplers: newSamplerCtl(), ckpts: newCkptCtl(cfg.CheckpointDir),
		cfg: cfg, now: now, models: map[string]backend.ModelInfo{}}
}

// lockSet names the controllers an operation locks.
type lockSet uint8

const (
	lkSessions lockSet = 1 << iota
	lkRuns
	lkSamplers
	lkCkpts
)

// lock takes the controllers' locks in ls, in the one order: sessions, runs, samplers,
// checkpoints.
func (s *family) lock(ls lockSet) {
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
func (s *family) unlock(ls lockSet) {
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

// view is r with its last checkpoints (callers hold the checkpoints lock, and the runs
// lock when r is this replica's).
func (s *family) view(r *Run) RunView {
	v := RunView{Run: *r}
	if c, ok := s.ckpts.get(r.ID, r.LastCheckpoint); ok {
		cc := *c
		v.LastCheckpointRec = &cc
	}
	if c, ok := s.ckpts.get(r.ID, r.LastSamplerCkpt); ok {
		cc := *c
		v.LastSamplerRec = &cc
	}
	return v
}

// ownedCheckpoint finds a tenant's checkpoint by run and checkpoint id ("weights/<name>",
// "sampler_weights/<name>", or a bare name, tried as weights then sampler_weights).
// Callers hold the runs and checkpoints locks, and settle the error after unlocking.
func (s *family) ownedCheckpoint(tenant, runID, ckptID string) (*Checkpoint, error) {
	if _, err := s.runs.owned(tenant, runID); err != nil {
		return nil, err
	}
	ids := []string{ckptID}
	if !strings.Contains(ckptID, "/") {
		ids = []string{"weights/" + ckptID, "sampler_weights/" + ckptID, "external_weights/" + ckptID}
	}
	for _, id := range ids {
		if c, ok := s.ckpts.get(runID, id); ok {
			return c, nil
		}
	}
	return nil, notFoundf("checkpoint %q not found in training run %s", ckptID, runID)
}

// ownsProject reports whether a project id is the tenant's: its name (the default
// project) or the project of one of its sessions. Callers hold the sessions lock.
func (s *family) ownsProject(tenant, project string) bool {
	if project == tenant {
		return true
	}
	for se := range s.sessions.ofTenant(tenant) {
		if se.Tenant == tenant && ProjectOf(se) == project {
			return true
		}
	}
	return false
}

// ownOptimizer reports whether tenant may load the optimizer state of the checkpoint at
// path, for a restore that repeats a load recorded before the load was checked (a record
// written by an older version that let another tenant's optimizer state through): such a
// load, or one from a checkpoint deleted since, is repeated with the weights only.
// Callers hold no controller lock.
func (s *family) ownOptimizer(tenant, path string) bool {
	runID, kind, name, err := ParseTinkerPath(path)
	if err != nil {
		return false
	}
	s.lock(lkCkpts)
	defer s.unlock(lkCkpts)
	c, ok := s.ckpts.get(runID, kind+"/"+name)
	return ok && !weightsOnly(tenant, c)
}

// holdsCopy reports whether a run made by copy_weights still holds its copy (or is
// writing it). Callers hold the runs and checkpoints locks.
func (s *family) holdsCopy(r *Run) bool {
	return r.Copy && (r.copying || s.ckpts.count(r.ID) > 0)
}

// ephemeralSamplers are run r's open sampling sessions made by
// save_weights_and_get_sampling_client (snapshot or inflight), except replacing, oldest
// first. Callers hold the samplers lock.
func (s *family) ephemeralSamplers(r *Run, replacing string) []*Sampler {
	var out []*Sampler
	for sm := range s.samplers.ofTenant(r.Tenant) {
		if sm.Ephemeral && !sm.Closed && sm.RunID == r.ID && sm.Tenant == r.Tenant && sm.ID != replacing {
			out = append(out, sm)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].SeqID < out[j].SeqID
	})
	return out
}

func (s *family) sessionInfo(tenant, id string) (SessionView, error) {
	s.lock(lkSessions | lkRuns | lkSamplers)
	defer s.unlock(lkSessions | lkRuns | lkSamplers)
	se, err := s.sessions.owned(tenant, id)
	if err != nil {
		return SessionView{}, err
	}
	v := SessionView{Session: *se}
	for r := range s.runs.ofTenant(tenant) {
		if r.SessionID == id {
			v.Runs = append(v.Runs, r.ID)
		}
	}
	for sm := range s.samplers.ofTenant(tenant) {
		if sm.SessionID == id {
			v.Samplers = append(v.Samplers, sm.ID)
		}
	}
	sort.Strings(v.Runs)
	sort.Strings(v.Samplers)
	return v, nil
}

// spanOwners resolves the session each span belongs to ("" when none, or when the
// span's tenant does not own it: a request naming another tenant's session is not part
// of that session's record).
func (s *family) spanOwners(batch []telemetry.SessionSpan) []string {
	out := make([]string, len(batch))
	s.lock(lkSessions | lkRuns | lkSamplers)
	defer s.unlock(lkSessions | lkRuns | lkSamplers)
	for i, sp := range batch {
		sess := sp.SessionID
		if sess == "" && sp.TrainingRunID != "" {
			if r := s.runs.at(sp.TrainingRunID); r != nil && r.Tenant == sp.Tenant {
				sess = r.SessionID
			}
		}
		if sess == "" && sp.SamplingSessionID != "" {
			if sm := s.samplers.at(sp.SamplingSessionID); sm != nil && sm.Tenant == sp.Tenant {
				sess = sm.SessionID
			}
		}
		if se := s.sessions.at(sess); se != nil && se.Tenant == sp.Tenant {
			out[i] = sess
		}
	}
	return out
}
