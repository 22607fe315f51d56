package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
	keys   map[[32]byte]string // sha256(key) → tenant
	secret []byte              // signs archive URLs

	mu       sync.Mutex
	sessions map[string]*Session
	runs     map[string]*Run
	samplers map[string]*Sampler
	ckpts    map[string]map[string]*Checkpoint // run → checkpoint id → record
	self     string                            // this API replica ("" for a single server)

	stop    chan struct{}
	stopped sync.WaitGroup

	// adapters holds the checkpoints the OpenAI/Anthropic-compatible routes sample from.
	adapters adapterCache
	// polls are the sampling sessions' completion logs (retrieve_futures, futurespoll.go).
	polls *completionLogs

	// quota holds disk space reserved by saves being written (quota.go).
	quota quotaState

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
		models: map[string]backend.ModelInfo{}, keys: map[[32]byte]string{},
		sessions: map[string]*Session{}, runs: map[string]*Run{}, samplers: map[string]*Sampler{},
		ckpts: map[string]map[string]*Checkpoint{}, stop: make(chan struct{}),
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
		var h [32]byte
		b, err := hex.DecodeString(k.KeySHA256)
		if err != nil || len(b) != 32 {
			return nil, fmt.Errorf("auth.api_keys: tenant %s: bad key_sha256", k.Tenant)
		}
		copy(h[:], b)
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
	s.mu.Lock()
	c := *r
	s.mu.Unlock()
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
		s.log.Error("persist run records", "count", len(ops), "error", err)
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
	h := sha256.Sum256([]byte(key))
	// Map lookup by hash: the hash is not secret, and comparing fixed-size digests keeps
	// the lookup independent of how much of the key matches.
	for k, t := range s.keys {
		if subtle.ConstantTimeCompare(k[:], h[:]) == 1 {
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
	load := func(prefix string, fn func([]byte) error) error {
		return s.st.Scan(ctx, prefix, func(key string, v []byte) error {
			if err := fn(v); err != nil {
				s.log.Warn("skipping unreadable record", "key", key, "error", err)
			}
			return nil
		})
	}
	if err := load(keySession, func(b []byte) error {
		var x Session
		if err := json.Unmarshal(b, &x); err != nil {
			return err
		}
		if x.Owner != s.self {
			return nil // another replica's
		}
		s.sessions[x.ID] = &x
		return nil
	}); err != nil {
		return fmt.Errorf("restore sessions: %w", err)
	}
	if err := s.restoreHeartbeats(ctx); err != nil {
		return fmt.Errorf("restore heartbeats: %w", err)
	}
	if err := load(keyRun, func(b []byte) error {
		var x Run
		if err := json.Unmarshal(b, &x); err != nil {
			return err
		}
		if x.Owner != s.self {
			return nil
		}
		s.runs[x.ID] = &x
		return nil
	}); err != nil {
		return fmt.Errorf("restore runs: %w", err)
	}
	if err := load(keyCkpt, func(b []byte) error {
		var x Checkpoint
		if err := json.Unmarshal(b, &x); err != nil {
			return err
		}
		if s.ckpts[x.RunID] == nil {
			s.ckpts[x.RunID] = map[string]*Checkpoint{}
		}
		s.ckpts[x.RunID][x.ID()] = &x
		return nil
	}); err != nil {
		return fmt.Errorf("restore checkpoints: %w", err)
	}
	if err := load(keySampler, func(b []byte) error {
		var x Sampler
		if err := json.Unmarshal(b, &x); err != nil {
			return err
		}
		if x.Owner != s.self {
			return nil
		}
		s.samplers[x.ID] = &x
		return nil
	}); err != nil {
		return fmt.Errorf("restore samplers: %w", err)
	}
	n, err := s.fut.Recover(ctx)
	if err != nil {
		return fmt.Errorf("recover futures: %w", err)
	}
	if n > 0 {
		s.log.Warn("failed futures left in flight by the previous process", "count", n)
	}
	s.recoverSaves()
	for _, r := range s.runs {
		if err := s.restoreRun(ctx, r); err != nil {
			s.log.Error("could not restore training run", "run", r.ID, "error", err)
		}
	}
	restored := map[string]bool{} // inflight samplers of a run share one adapter
	for _, sm := range s.samplers {
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
			_ = putJSON(ctx, s.st, keySampler+sm.ID, sm)
			s.log.Info("sampling session closed: its checkpoint is no longer published", "sampler", sm.ID, "checkpoint", sm.ModelPath)
			continue
		}
		restored[sm.adapterID()] = true
		if err := s.be.AddSamplerAdapter(ctx, sm.BaseModel, sm.adapterID(), sm.AdapterDir); err != nil {
			s.log.Warn("sampling session could not be restored; closing it", "sampler", sm.ID, "error", err)
			sm.Closed = true
			_ = putJSON(ctx, s.st, keySampler+sm.ID, sm)
		}
	}
	s.sweepEphemeral()
	s.log.Info("state restored", "sessions", len(s.sessions), "runs", len(s.runs), "samplers", len(s.samplers))
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
	if r.Unloaded || r.Corrupted {
		r.Loaded = false
		return nil
	}
	if _, ok := s.models[r.BaseModel]; !ok {
		r.Corrupted, r.Loaded = true, false
		r.Note = fmt.Sprintf("base model %q is no longer configured", r.BaseModel)
		return putJSON(ctx, s.st, keyRun+r.ID, r)
	}
	if !r.Ready {
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
		r.Ready, r.Loaded = true, true
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
		r.Corrupted, r.Loaded = true, false
		r.Note = fmt.Sprintf("restore from %s failed: %v", from, err)
		_ = putJSON(ctx, s.st, keyRun+r.ID, r)
		return err
	}
	r.Loaded = true
	s.log.Info("training run restored", "run", r.ID, "from", from, "next_seq", r.NextSeq)
	return putJSON(ctx, s.st, keyRun+r.ID, r)
}

// latestState picks the most recent saved state of a run: the autosave written after
// every optim_step and load, or a checkpoint if one was written later. Time decides, from
// the files themselves, so a run record written lazily cannot point at stale state.
func (s *Service) latestState(r *Run) (dir string, optimizer bool, from string) {
	var best time.Time
	if fi, err := os.Stat(filepath.Join(s.autosaveDir(r.ID), "adapter_model.safetensors")); err == nil {
		dir, optimizer, from, best = s.autosaveDir(r.ID), true, "the autosave of its last optim_step", fi.ModTime()
	}
	for _, c := range s.ckpts[r.ID] {
		if c.Type == CkptExternal {
			continue // an export (maybe encrypted), not a state to train from
		}
		t := c.CreatedAt
		if fi, err := os.Stat(filepath.Join(c.Dir, "adapter_model.safetensors")); err == nil && fi.ModTime().After(t) {
			t = fi.ModTime()
		}
		if dir == "" || t.After(best) {
			dir, optimizer, from, best = c.Dir, c.Type == CkptTraining, c.TinkerPath(), t
		}
	}
	return dir, optimizer, from
}

func (s *Service) runDir(runID string) string {
	return filepath.Join(s.cfg.CheckpointDir, safeDirName(runID))
}

func (s *Service) autosaveDir(runID string) string {
	return filepath.Join(s.runDir(runID), "_autosave")
}

// safeDirName maps an id onto one path element (ids are generated by us, but a store
// shared with another version must still never place files outside checkpoint_dir).
func safeDirName(id string) string { return dirNameReplacer.Replace(id) }

var dirNameReplacer = strings.NewReplacer("/", "_", "\\", "_", "..", "__")

func newID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
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
	var ckpts []*Checkpoint
	s.mu.Lock()
	for _, se := range s.sessions {
		if !se.Expired && now.Sub(se.LastHeartbeat) > timeout {
			se.Expired = true
			expired = append(expired, se)
		}
	}
	for _, m := range s.ckpts {
		for _, c := range m {
			if c.ExpiresAt != nil && now.After(*c.ExpiresAt) {
				ckpts = append(ckpts, c)
			}
		}
	}
	s.mu.Unlock()
	s.expireCompletions(now)
	for _, se := range expired {
		s.expireSession(ctx, se)
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
func (s *Service) expireSession(ctx context.Context, se *Session) {
	s.log.Info("session expired: no heartbeat", "session", se.ID, "tenant", se.Tenant, "last_heartbeat", se.LastHeartbeat)
	_ = putJSON(ctx, s.st, keySession+se.ID, se)
	s.mu.Lock()
	var runs []*Run
	var samplers []*Sampler
	for _, r := range s.runs {
		if r.SessionID == se.ID && r.Loaded {
			runs = append(runs, r)
		}
	}
	for _, sm := range s.samplers {
		if sm.SessionID == se.ID && !sm.Closed {
			samplers = append(samplers, sm)
		}
	}
	s.mu.Unlock()
	for _, r := range runs {
		s.unload(ctx, r, fmt.Sprintf("session %s expired (no heartbeat for %s)", se.ID, s.cfg.HeartbeatTimeout()))
	}
	for _, sm := range samplers {
		s.closeSampler(ctx, sm)
	}
}
