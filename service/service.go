package service

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/telemetry"
)

// Service is the control plane's state and operations.
type Service struct {
	cfg    config.Config
	st     store.Store
	fut    *futures.Manager
	be     *backend.Backend
	log    *slog.Logger
	now    func() time.Time
	tel    telemetry.Settings
	models map[string]backend.ModelInfo
	keys   map[config.KeyDigest]string // the API keys' digests → tenant
	secret []byte                      // signs archive URLs

	// The controllers, one per kind of record (controllers.go).
	sessions sessionCtl
	runs     runCtl
	samplers samplerCtl
	ckpts    ckptCtl
	self     string // this API replica ("" for a single server)

	stop    chan struct{}
	stopped sync.WaitGroup

	// adapters holds the checkpoints the OpenAI/Anthropic-compatible routes sample from.
	adapters adapterCache
	// polls are the sampling sessions' completion logs (retrieve_futures, futurespoll.go).
	polls *completionLogs

	dirtyMu sync.Mutex
	dirty   map[string]*Run // run records to write, coalesced by the flusher
	kick    chan struct{}
}

// Options wires a Service.
type Options struct {
	Config  config.Config
	Store   store.Store
	Futures *futures.Manager
	Backend *backend.Backend
	Logger  *slog.Logger
	Now     func() time.Time
	// TracerProvider and Instruments receive the controllers' spans and metrics
	// (default: the OTel global provider and telemetry.Metrics()).
	TracerProvider trace.TracerProvider
	Instruments    *telemetry.Instruments
}

// New builds the service, checks the store's model signature, restores every record and
// every run's adapter, and resolves futures left in flight by a previous process.
func New(ctx context.Context, o Options) (*Service, error) {
	s := &Service{
		cfg: o.Config, st: o.Store, fut: o.Futures, be: o.Backend, log: o.Logger, now: o.Now,
		models: map[string]backend.ModelInfo{}, keys: map[config.KeyDigest]string{},
		sessions: sessionCtl{m: map[string]*Session{}}, runs: runCtl{m: map[string]*Run{}}, samplers: samplerCtl{m: map[string]*Sampler{}},
		ckpts: ckptCtl{m: map[string]map[string]*Checkpoint{}, files: ckptLayout{root: o.Config.CheckpointDir}}, stop: make(chan struct{}),
		dirty: map[string]*Run{}, kick: make(chan struct{}, 1), self: o.Config.Server.ReplicaID,
		tel:   telemetry.NewSettings(telemetry.WithTracerProvider(o.TracerProvider), telemetry.WithInstruments(o.Instruments)),
		polls: newCompletionLogs(o.Config.Limits.MaxCompletionEventsPerSampler),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	for _, m := range s.be.Models() {
		s.models[m.Name] = m
	}
	for _, k := range o.Config.Auth.APIKeys {
		h, err := config.ParseKeyDigest(k.KeySHA256)
		if err != nil {
			return nil, fmt.Errorf("auth.api_keys: tenant %s: %w", k.Tenant, err)
		}
		s.keys[h] = k.Tenant
	}
	if err := os.MkdirAll(o.Config.CheckpointDir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint_dir: %w", err)
	}
	if err := s.checkSignature(ctx); err != nil {
		return nil, err
	}
	if err := s.loadSecret(ctx); err != nil {
		return nil, err
	}
	if err := s.restore(ctx); err != nil {
		return nil, err
	}
	s.stopped.Add(2)
	go s.reaper()
	go s.flusher()
	return s, nil
}

// markDirty queues a run record for writing; the flusher coalesces many updates into one
// store commit. Losing the last few updates in a crash is harmless: NextSeq is rebuilt
// from the persisted futures, and the rest is bookkeeping.
func (s *Service) markDirty(r *Run) {
	s.lock(lkRuns)
	c := *r
	s.unlock(lkRuns)
	s.dirtyMu.Lock()
	s.dirty[c.ID] = &c
	s.dirtyMu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// flushDelay is how long the flusher lets run-record updates gather before one commit.
// Per-operation bookkeeping (last request time, next seq_id) is all that waits here.
const flushDelay = 20 * time.Millisecond

func (s *Service) flusher() {
	defer s.stopped.Done()
	for {
		select {
		case <-s.stop:
			s.flush(context.Background())
			return
		case <-s.kick:
		}
		time.Sleep(flushDelay) // let more updates join this commit
		s.flush(context.Background())
	}
}

func (s *Service) flush(ctx context.Context) {
	s.dirtyMu.Lock()
	batch := s.dirty
	s.dirty = map[string]*Run{}
	s.dirtyMu.Unlock()
	if len(batch) == 0 {
		return
	}
	ops := make([]store.Op, 0, len(batch))
	for id, r := range batch {
		b, err := json.Marshal(r)
		if err != nil {
			s.log.Error("encode run record", "run", id, "error", err)
			continue
		}
		ops = append(ops, store.Op{Key: keyRun + id, Value: b})
	}
	if err := s.st.Apply(ctx, ops); err != nil {
		s.writeFailed(ctx, reasonRunFlush, err, "count", len(ops))
	}
}

// Close stops background work. It does not close the store or the futures manager.
func (s *Service) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.stopped.Wait()
	s.polls.close()
}

// Authenticate maps an API key to its tenant.
func (s *Service) Authenticate(key string) (string, bool) {
	if key == "" {
		return "", false
	}
	h := config.HashAPIKey(key)
	// Compare against every digest in constant time: the time taken says nothing of how
	// much of a key matched.
	for k, t := range s.keys {
		if k.Equal(h) {
			return t, true
		}
	}
	return "", false
}

// Models lists the served base models.
func (s *Service) Models() []backend.ModelInfo {
	out := make([]backend.ModelInfo, 0, len(s.models))
	for _, m := range s.models {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// signature is what the store remembers of the model configuration it was written under.
type signature struct {
	Models map[string]string `json:"models"` // name → weights/architecture signature
}

// checkSignature refuses a store written under an incompatible model configuration: a
// run trained on one model must never be resumed on different weights.
func (s *Service) checkSignature(ctx context.Context) error {
	cur := signature{Models: map[string]string{}}
	for n, m := range s.models {
		cur.Models[n] = m.Signature
	}
	b, err := s.st.Get(ctx, keySignature)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return fmt.Errorf("read store signature: %w", err)
	default:
		var old signature
		if err := json.Unmarshal(b, &old); err != nil {
			return fmt.Errorf("store signature is corrupt: %w", err)
		}
		var diffs []string
		for n, sig := range old.Models {
			if c, ok := cur.Models[n]; ok && c != sig {
				diffs = append(diffs, fmt.Sprintf("model %q has different weights or architecture than when the store was written", n))
			}
		}
		if len(diffs) > 0 {
			sort.Strings(diffs)
			return fmt.Errorf("the store (%s) was written under an incompatible model configuration: %s; "+
				"restore the original model files, or run `tuft clear persistence` to start afresh",
				s.st.Kind(), strings.Join(diffs, "; "))
		}
		// Keep signatures of models no longer configured: their runs are kept (as
		// corrupted) and must match if the model comes back.
		for n, sig := range old.Models {
			if _, ok := cur.Models[n]; !ok {
				cur.Models[n] = sig
			}
		}
	}
	return putJSON(ctx, s.st, keySignature, cur)
}

func (s *Service) loadSecret(ctx context.Context) error {
	b, err := s.st.Get(ctx, keySecret)
	if err == nil && len(b) >= 32 {
		s.secret = b
		return nil
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("read archive secret: %w", err)
	}
	s.secret = make([]byte, 32)
	if _, err := rand.Read(s.secret); err != nil {
		return err
	}
	ok, err := s.st.SetNX(ctx, keySecret, s.secret, 0)
	if err != nil {
		return fmt.Errorf("persist archive secret: %w", err)
	}
	if !ok { // another replica won the race
		b, err := s.st.Get(ctx, keySecret)
		if err != nil {
			return fmt.Errorf("read archive secret: %w", err)
		}
		s.secret = b
	}
	return nil
}

// restore reloads every record and each live run's adapter from its latest saved state.
func (s *Service) restore(ctx context.Context) error {
	if err := s.sessions.load(ctx, s.st, s.self, s.log); err != nil {
		return err
	}
	if err := s.runs.load(ctx, s.st, s.self, s.log); err != nil {
		return err
	}
	if err := s.ckpts.load(ctx, s.st, s.log); err != nil {
		return err
	}
	if err := s.samplers.load(ctx, s.st, s.self, s.log); err != nil {
		return err
	}
	n, err := s.fut.Recover(ctx)
	if err != nil {
		return fmt.Errorf("recover futures: %w", err)
	}
	if n > 0 {
		s.log.Warn("failed futures left in flight by the previous process", "count", n)
	}
	s.recoverSaves()
	for _, r := range s.runs.m {
		if err := s.restoreRun(ctx, r); err != nil {
			s.log.Error("could not restore training run", "run", r.ID, "error", err)
		}
	}
	restored := map[string]bool{} // inflight samplers of a run share one adapter
	for _, sm := range s.samplers.m {
		if sm.Closed || !sm.Lora || restored[sm.adapterID()] {
			continue
		}
		if _, ok := s.models[sm.BaseModel]; !ok {
			sm.Closed = true
			continue
		}
		if !s.sourceVisible(sm) {
			// Unpublished (or deleted) while the server was down, or before the write that
			// closed the sampler reached the store.
			sm.Closed, sm.ClosedWhy = true, withdrawn(sm.ModelPath)
			s.putLogged(ctx, keySampler+sm.ID, sm, reasonSamplerClosed)
			s.log.Info("sampling session closed: its checkpoint is no longer published", "sampler", sm.ID, "checkpoint", sm.ModelPath)
			continue
		}
		restored[sm.adapterID()] = true
		if err := s.be.AddSamplerAdapter(ctx, sm.BaseModel, sm.adapterID(), sm.AdapterDir); err != nil {
			s.log.Warn("sampling session could not be restored; closing it", "sampler", sm.ID, "error", err)
			sm.Closed = true
			s.putLogged(ctx, keySampler+sm.ID, sm, reasonSamplerClosed)
		}
	}
	s.log.Info("state restored", "sessions", len(s.sessions.m), "runs", len(s.runs.m), "samplers", len(s.samplers.m))
	return nil
}

// restoreRun brings a run's adapter back from the newest of its autosave and checkpoints.
func (s *Service) restoreRun(ctx context.Context, r *Run) error {
	// Run records are written lazily; the persisted futures say how far the run got.
	if n := s.fut.RecoveredNextSeq(r.ID); n > r.NextSeq {
		r.NextSeq = n
	}
	s.fut.SetNextSeq(r.ID, r.NextSeq)
	// Gradients are never saved: those accumulated before the restart are gone. The
	// next operation that would use them says so (see lostGrads).
	if err := s.restoreGrads(ctx, r); err != nil {
		return err
	}
	if r.State == RunUnloaded || r.State == RunCorrupted {
		return nil
	}
	if _, ok := s.models[r.BaseModel]; !ok {
		r.State = RunCorrupted
		r.Note = fmt.Sprintf("base model %q is no longer configured", r.BaseModel)
		return putJSON(ctx, s.st, keyRun+r.ID, r)
	}
	if r.State == RunCreating {
		// create_model (or the load that creates the run) never finished: its future was
		// failed by Recover. Create the adapter now, from the checkpoint it was loading if
		// any, so the run is usable, as the client may retry.
		var err error
		if lf := r.LoadedFrom; lf != nil {
			err = s.be.LoadState(ctx, r.BaseModel, r.ID, lf.Dir, lf.Optimizer, r.optimizer())
		} else {
			err = s.be.CreateAdapter(ctx, r.BaseModel, r.ID, r.adapterConfig())
		}
		if err != nil {
			return err
		}
		r.State = RunReady
		return putJSON(ctx, s.st, keyRun+r.ID, r)
	}
	dir, optimizer, from := s.latestState(r)
	var err error
	if dir == "" {
		err = s.be.CreateAdapter(ctx, r.BaseModel, r.ID, r.adapterConfig())
		from = "a fresh adapter (no saved state)"
	} else {
		err = s.be.LoadState(ctx, r.BaseModel, r.ID, dir, optimizer, r.optimizer())
	}
	if err != nil {
		r.State = RunCorrupted
		r.Note = fmt.Sprintf("restore from %s failed: %v", from, err)
		s.putLogged(ctx, keyRun+r.ID, r, reasonRunCorrupted)
		return err
	}
	s.log.Info("training run restored", "run", r.ID, "from", from, "next_seq", r.NextSeq)
	return putJSON(ctx, s.st, keyRun+r.ID, r)
}

// latestState picks the most recent saved state of a run: the autosave written after
// every optim_step and load, or a checkpoint if one was written later. Time decides, from
// the files themselves, so a run record written lazily cannot point at stale state.
// Callers hold no controller lock.
func (s *Service) latestState(r *Run) (dir string, optimizer bool, from string) {
	var best time.Time
	if mt, ok := adapterModTime(s.ckpts.files.autosaveDir(r.ID)); ok {
		dir, optimizer, from, best = s.ckpts.files.autosaveDir(r.ID), true, "the autosave of its last optim_step", mt
	}
	s.lock(lkCkpts)
	ckpts := s.ckpts.ofRun(r.ID)
	s.unlock(lkCkpts)
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

// reaper expires sessions that stopped heartbeating and checkpoints past their TTL.
func (s *Service) reaper() {
	defer s.stopped.Done()
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Reap(context.Background())
		}
	}
}

// Reap runs one expiry pass: sessions without a heartbeat for sessions.heartbeat_timeout_seconds
// release their adapters, and checkpoints past their TTL are deleted. The background
// reaper calls it every few seconds.
func (s *Service) Reap(ctx context.Context) {
	now := s.now()
	timeout := s.cfg.HeartbeatTimeout()
	var expired []*Session
	var expiredRecs []Session
	var ckpts []*Checkpoint
	s.lock(lkSessions | lkCkpts)
	for _, se := range s.sessions.m {
		if !se.Expired && now.Sub(se.LastHeartbeat) > timeout {
			se.Expired = true
			expired = append(expired, se)
			expiredRecs = append(expiredRecs, *se)
		}
	}
	for _, m := range s.ckpts.m {
		for _, c := range m {
			if c.ExpiresAt != nil && now.After(*c.ExpiresAt) {
				ckpts = append(ckpts, c)
			}
		}
	}
	s.unlock(lkSessions | lkCkpts)
	s.expireCompletions(now)
	for i, se := range expired {
		s.expireSession(ctx, se, &expiredRecs[i])
	}
	for _, c := range ckpts {
		if err := s.removeCheckpoint(ctx, c); err != nil {
			s.log.Warn("could not delete expired checkpoint", "checkpoint", c.TinkerPath(), "error", err)
		} else {
			s.log.Info("expired checkpoint deleted", "checkpoint", c.TinkerPath())
		}
	}
}

// expireSession releases a dead session's resources: its runs' adapters and its
// sampling sessions. Records and checkpoints stay, so the user can resume from them.
// rec is se's record as it was when it expired.
func (s *Service) expireSession(ctx context.Context, se *Session, rec *Session) {
	s.log.Info("session expired: no heartbeat", "session", rec.ID, "tenant", rec.Tenant, "last_heartbeat", rec.LastHeartbeat)
	s.putLogged(ctx, keySession+rec.ID, rec, reasonSessionExpired)
	s.lock(lkRuns | lkSamplers)
	var runs []*Run
	var samplers []*Sampler
	for _, r := range s.runs.m {
		if r.SessionID == se.ID && r.State == RunReady {
			runs = append(runs, r)
		}
	}
	for _, sm := range s.samplers.m {
		if sm.SessionID == se.ID && !sm.Closed {
			samplers = append(samplers, sm)
		}
	}
	s.unlock(lkRuns | lkSamplers)
	for _, r := range runs {
		s.unload(ctx, r, fmt.Sprintf("session %s expired (no heartbeat for %s)", se.ID, s.cfg.HeartbeatTimeout()))
	}
	for _, sm := range samplers {
		s.closeSampler(ctx, sm)
	}
}
