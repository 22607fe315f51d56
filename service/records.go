package service

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Store keys. Every record is JSON; ids are global and records carry their tenant.
const (
	keySession   = "session/"
	keyRun       = "run/"
	keyCkpt      = "ckpt/"
	keySampler   = "sampler/"
	keySignature = "meta/signature"
	keySecret    = "meta/archive_secret"
	keyReplica   = "replica/"
	// keyGrads + run id: "pending" while the run holds unapplied gradients, "lost" once
	// a restart lost them and until that is reported; absent otherwise.
	keyGrads = "grads/"
)

// Session is a client session (one ServiceClient).
type Session struct {
	ID            string            `json:"id"`
	Tenant        string            `json:"tenant"`
	Tags          []string          `json:"tags,omitempty"`
	UserMetadata  Metadata          `json:"user_metadata,omitempty"`
	SDKVersion    string            `json:"sdk_version,omitempty"`
	ProjectID     string            `json:"project_id,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	LastHeartbeat time.Time         `json:"last_heartbeat"`
	Expired       bool              `json:"expired,omitempty"`
	Extra         map[string]string `json:"extra,omitempty"`
	// Owner is the API replica that holds the session and everything created in it
	// ("" for a single server).
	Owner       string `json:"owner,omitempty"`
	DisplayName string `json:"display_name,omitempty"`
	// Finished is set by the client's finish call (ServiceClient.close): the first reason
	// wins, and the session accepts no more operations.
	Finished *SessionFinish `json:"finished,omitempty"`
	// Pruned: the session ended more than sessions.finished_retention_seconds ago and
	// holds no metadata any more (prune.go).
	Pruned bool `json:"pruned,omitempty"`
}

// Finish reasons a client may give (the SDK's ClientSessionFinishReason).
const (
	FinishSuccess     = "success"
	FinishErrored     = "errored"
	FinishInterrupted = "interrupted"
)

// SessionFinish is how and when a client finished its session.
type SessionFinish struct {
	Reason string    `json:"reason"` // FinishSuccess, FinishErrored or FinishInterrupted
	Detail *string   `json:"detail,omitempty"`
	At     time.Time `json:"at"`
}

// Run is a training run: one LoRA adapter on a base model.
type Run struct {
	ID              string     `json:"id"`
	Owner           string     `json:"owner,omitempty"` // the API replica that runs it
	Tenant          string     `json:"tenant"`
	SessionID       string     `json:"session_id"`
	ModelSeqID      int64      `json:"model_seq_id"`
	BaseModel       string     `json:"base_model"`
	Lora            LoraRecord `json:"lora"`
	UserMetadata    Metadata   `json:"user_metadata,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
	LastRequestTime time.Time  `json:"last_request_time"`
	// NextSeq is the next seq_id the run expects; persisted after every operation.
	NextSeq int64 `json:"next_seq"`
	// State is where the run is in its life (see RunState); records written before it
	// existed are migrated when read (UnmarshalJSON).
	State RunState `json:"state"`
	Note  string   `json:"note,omitempty"` // why the run is unloaded or corrupted
	// AutosaveSeq is the seq_id after which the autosaved state was written (0: none).
	AutosaveSeq     int64     `json:"autosave_seq,omitempty"`
	AutosaveAt      time.Time `json:"autosave_at,omitempty"`
	EphemeralCount  int64     `json:"ephemeral_count,omitempty"`
	RequestID       string    `json:"create_request_id,omitempty"`
	CreatePayload   string    `json:"create_payload_hash,omitempty"`
	LastCheckpoint  string    `json:"last_checkpoint,omitempty"`   // checkpoint id "weights/<name>"
	LastSamplerCkpt string    `json:"last_sampler_ckpt,omitempty"` // "sampler_weights/<name>"
	// Optimizer is the optimizer family fixed at creation ("" reads as OptimizerAdamW).
	Optimizer string `json:"optimizer,omitempty"`
	// ProjectID is the project of a run made by copy_weights without a session.
	ProjectID string `json:"project_id,omitempty"`
	// Inflight: the run has published weights to its shared inflight target.
	Inflight bool `json:"inflight,omitempty"`
	// LoadedFrom is the checkpoint a run created by load_weights starts from (its seq 0);
	// a restart that finds the load unfinished starts it again from there.
	LoadedFrom *LoadSource `json:"loaded_from,omitempty"`
	// Copy: the run was made by copy_weights to hold a copy; it counts against
	// limits.max_runs_per_tenant while it holds a checkpoint (holdsCopy).
	Copy bool `json:"copy,omitempty"`
	// copying: the copy's files are being written (it counts before its checkpoint exists).
	copying bool
	// Steps counts the optim_steps the run completed; LastLoss is the loss:sum of its
	// last forward_backward (nil before the first, or when it was not finite). Both are
	// kept with the metric history (metrics.go).
	Steps    int64    `json:"steps,omitempty"`
	LastLoss *float64 `json:"last_loss,omitempty"`

	// PendingGrads is true while forward_backward has accumulated gradients that no
	// optim_step has used. They live only in the executor's memory (never in a
	// checkpoint), so a restart loses them. It is persisted on its own key (keyGrads),
	// written synchronously at each change, never by the lazy run-record flush.
	PendingGrads bool `json:"-"`
	// GradsLost: a restart lost pending gradients; the next forward_backward or
	// optim_step fails with an error that says so, then training goes on.
	GradsLost bool `json:"-"`
}

// The optimizer families a run may train with (engine.OptimizerAdamW and
// engine.OptimizerDimuon): AdamW is the SDK's default.
const (
	OptimizerAdamW  = engine.OptimizerAdamW
	OptimizerDimuon = engine.OptimizerDimuon
)

// OptimizerOf is a run's optimizer family.
func (r *Run) OptimizerOf() string {
	if r.Optimizer == "" {
		return OptimizerAdamW
	}
	return r.Optimizer
}

// LoadSource is the checkpoint a run was created from.
type LoadSource struct {
	Path      string `json:"path"` // tinker://
	Dir       string `json:"dir"`
	Optimizer bool   `json:"optimizer"` // its optimizer state was restored too
}

// Checkpoint types as the REST API names them.
const (
	CkptTraining = "training"
	CkptSampler  = "sampler"
	// CkptExternal is an export (save_weights_external): the adapter in Hugging Face
	// PEFT format, optionally age-encrypted, downloaded through signed links.
	CkptExternal = "external"
)

// Checkpoint is the metadata of a saved adapter on disk.
type Checkpoint struct {
	RunID     string     `json:"run_id"`
	Tenant    string     `json:"tenant"`
	Type      string     `json:"type"` // training | sampler
	Name      string     `json:"name"`
	Dir       string     `json:"dir"`
	CreatedAt time.Time  `json:"created_at"`
	SizeBytes int64      `json:"size_bytes"`
	Public    bool       `json:"public"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	SeqID     int64      `json:"seq_id"`
	BaseModel string     `json:"base_model"`
	Lora      LoraRecord `json:"lora"`
	// UserMetadata is the client's, given at save time (replaced whole on overwrite).
	UserMetadata map[string]string `json:"user_metadata,omitempty"`
	// Optimizer is the run's optimizer family ("" reads as OptimizerAdamW).
	Optimizer string `json:"optimizer,omitempty"`
	// Encrypted: an external checkpoint whose files are age-encrypted ("<file>.age").
	Encrypted bool `json:"encrypted,omitempty"`
	// CopyOf is the tinker:// path of another tenant's published checkpoint this one is a
	// copy of (copy_weights; weights only). It inherits that publication: readable only
	// while the original stays published, and never published itself (publish.go).
	CopyOf string `json:"copy_of,omitempty"`
}

// OptimizerOf is the checkpoint's optimizer family.
func (c *Checkpoint) OptimizerOf() string {
	if c.Optimizer == "" {
		return OptimizerAdamW
	}
	return c.Optimizer
}

// ID is the checkpoint id of the REST API: "weights/<name>" or "sampler_weights/<name>".
func (c *Checkpoint) ID() string { return ckptKindDir(c.Type) + "/" + c.Name }

// TinkerPath is tinker://<run>/<weights|sampler_weights>/<name>.
func (c *Checkpoint) TinkerPath() string { return "tinker://" + c.RunID + "/" + c.ID() }

func ckptKindDir(typ string) string {
	switch typ {
	case CkptSampler:
		return "sampler_weights"
	case CkptExternal:
		return "external_weights"
	}
	return "weights"
}

// ckptType is the checkpoint type of a tinker:// path's kind segment.
func ckptType(kind string) string {
	switch kind {
	case "sampler_weights":
		return CkptSampler
	case "external_weights":
		return CkptExternal
	}
	return CkptTraining
}

// Sampler is a sampling session: a base model, optionally with an adapter loaded from a
// sampler checkpoint.
type Sampler struct {
	ID         string    `json:"id"`
	Owner      string    `json:"owner,omitempty"` // the API replica that serves it
	Tenant     string    `json:"tenant"`
	SessionID  string    `json:"session_id"`
	SeqID      int64     `json:"seq_id"`
	BaseModel  string    `json:"base_model"`
	ModelPath  string    `json:"model_path,omitempty"` // tinker:// path, "" for the base model
	AdapterDir string    `json:"adapter_dir,omitempty"`
	Lora       bool      `json:"lora"`
	Ephemeral  bool      `json:"ephemeral,omitempty"` // created by save_weights_and_get_sampling_client
	RunID      string    `json:"run_id,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	Closed     bool      `json:"closed,omitempty"`
	// ClosedWhy says why a sampler was closed, when it is not the usual (its session
	// expired or its run was unloaded).
	ClosedWhy string `json:"closed_why,omitempty"`
	// Inflight: created by an inflight save, it samples its run's shared inflight
	// adapter (AdapterID), which follows the run's newest inflight save.
	Inflight  bool   `json:"inflight,omitempty"`
	AdapterID string `json:"adapter_id,omitempty"`
	// Clients counts the clones that joined (join_sampling_session); the original is 0.
	Clients int64 `json:"clients,omitempty"`
}

// adapterID is the executor's id of the adapter the sampler samples.
func (sm *Sampler) adapterID() string {
	if sm.AdapterID != "" {
		return sm.AdapterID
	}
	return sm.ID
}

var checkpointName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// validCheckpointName rejects names that could escape the run's directory or break
// tinker:// parsing (which allows no '/').
func validCheckpointName(name string) error {
	if !checkpointName.MatchString(name) {
		return invalidf("checkpoint name %q is invalid: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit (no '/')", name)
	}
	return nil
}

func putJSON(ctx context.Context, st store.Store, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	if err := st.Set(ctx, key, b, 0); err != nil {
		return fmt.Errorf("persist %s: %w", key, err)
	}
	return nil
}

func ckptKey(runID, typ, name string) string { return keyCkpt + runID + "/" + typ + "/" + name }

// RunState is a training run's state. A run is created in RunCreating; create_model (or
// the load or copy that creates it) makes it RunReady, whose adapter the executor holds;
// unload_model or its session's expiry makes it RunUnloaded, and a restore that fails
// makes it RunCorrupted, both for good (Run.Note says why).
type RunState string

// The run states.
const (
	RunCreating  RunState = "creating"
	RunReady     RunState = "ready"
	RunUnloaded  RunState = "unloaded"
	RunCorrupted RunState = "corrupted"
)

// legacyRunFlags are the booleans that stood for RunState in records written before it.
type legacyRunFlags struct {
	Ready     bool `json:"ready"`
	Unloaded  bool `json:"unloaded"`
	Corrupted bool `json:"corrupted"`
}

// state is the RunState the flags meant.
func (f legacyRunFlags) state() RunState {
	switch {
	case f.Corrupted:
		return RunCorrupted
	case f.Unloaded:
		return RunUnloaded
	case !f.Ready:
		return RunCreating
	}
	return RunReady
}

// UnmarshalJSON reads a run record, migrating one written before RunState (its state is
// then derived from the "ready", "unloaded" and "corrupted" flags, and "loaded", which
// only ever described the previous process, is ignored).
func (r *Run) UnmarshalJSON(b []byte) error {
	type plain Run // without this method
	var x struct {
		*plain
		legacyRunFlags
	}
	x.plain = (*plain)(r)
	if err := json.Unmarshal(b, &x); err != nil {
		return err
	}
	if r.State == RunUnloaded && strings.HasPrefix(r.Note, copyNote) {
		r.Copy = true // a copy made before the flag existed
	}
	switch r.State {
	case "":
		r.State = x.legacyRunFlags.state()
	case RunCreating, RunReady, RunUnloaded, RunCorrupted:
	default:
		return fmt.Errorf("run %s: unknown state %q", r.ID, r.State)
	}
	return nil
}

// LoraRecord is a run's or checkpoint's LoRA configuration as stored. It is its own type,
// apart from engine.LoraConfig, so that renaming an engine field cannot change the stored
// schema; its JSON names are those the records have always had.
type LoraRecord struct {
	Rank         int             `json:"Rank"`
	Alpha        float64         `json:"Alpha"`
	Seed         int64           `json:"Seed"`
	TrainAttn    bool            `json:"TrainAttn"`
	TrainMLP     bool            `json:"TrainMLP"`
	TrainUnembed bool            `json:"TrainUnembed"`
	Optimizer    OptimizerRecord `json:"Optimizer"`
}

// OptimizerRecord is engine.OptimizerConfig as stored.
type OptimizerRecord struct {
	Type    string `json:"Type"`
	Version int    `json:"Version"`
}

// loraRecord is the stored form of c.
func loraRecord(c engine.LoraConfig) LoraRecord {
	return LoraRecord{Rank: c.Rank, Alpha: c.Alpha, Seed: c.Seed, TrainAttn: c.TrainAttn, TrainMLP: c.TrainMLP, TrainUnembed: c.TrainUnembed,
		Optimizer: OptimizerRecord{Type: c.Optimizer.Type, Version: c.Optimizer.Version}}
}

// engine is the engine's form of the stored configuration.
func (l LoraRecord) engine() engine.LoraConfig {
	return engine.LoraConfig{Rank: l.Rank, Alpha: l.Alpha, Seed: l.Seed, TrainAttn: l.TrainAttn, TrainMLP: l.TrainMLP, TrainUnembed: l.TrainUnembed,
		Optimizer: engine.OptimizerConfig{Type: l.Optimizer.Type, Version: l.Optimizer.Version}}
}

// sameShape says whether two adapters have the same trained matrices (a checkpoint of one
// loads into the other).
func (l LoraRecord) sameShape(o LoraRecord) bool {
	return l.Rank == o.Rank && l.TrainAttn == o.TrainAttn && l.TrainMLP == o.TrainMLP && l.TrainUnembed == o.TrainUnembed
}

// Reasons for tuft.store.write_failures: what a write that no caller could hear about was for.
const (
	reasonSessionExpired = "session_expired"
	reasonSamplerClosed  = "sampler_closed"
	reasonRunCorrupted   = "run_corrupted"
	reasonRunUnloaded    = "run_unloaded"
	reasonRunFlush       = "run_flush"
	reasonSessionSpans   = "session_spans"
	reasonAudit          = "audit"
	reasonCopyRollback   = "copy_rollback"
)

// putLogged writes a record where a failure cannot be returned to anyone (a background
// pass, or a path already failing with a better error): the failure is logged and counted.
func (s *Service) putLogged(ctx context.Context, key string, v any, reason string) {
	if err := putJSON(ctx, s.st, key, v); err != nil {
		s.writeFailed(ctx, reason, err, "key", key)
	}
}

// writeFailed logs and counts a store write that failed with no caller to tell.
func (s *Service) writeFailed(ctx context.Context, reason string, err error, args ...any) {
	s.log.ErrorContext(ctx, "store write failed", append([]any{"reason", reason, "error", err}, args...)...)
	s.tel.Instruments.StoreWriteFailures.Add(ctx, 1, metric.WithAttributes(attribute.String(telemetry.MAttrReason, reason)))
}
