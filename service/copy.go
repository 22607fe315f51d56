package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/telemetry"
)

// copy_weights (SDK >= 0.26.2; reshaped in 0.34): a synchronous copy of a checkpoint
// (the tenant's own, or a published one) into a training run slot of the caller's.
//
// Where the copy goes: TuFT has tenants, not organisations of projects, and a tenant can
// never write into another's space. With session_id and model_seq_id, the copy belongs
// to the new run "{session}:train:{model_seq_id}" of that session (the slot the SDK's
// counter reserved). With destination_project_id, the project must be one of the
// caller's: its tenant name, or the project of one of its sessions; another tenant's
// project is answered like a missing one (404), so copies never cross tenants (publish
// a checkpoint to share it). The copy belongs to a new run "copy_<id>" with that
// project. Either way the run only holds the copied weights: it has no adapter loaded,
// and training resumes from its checkpoint (create_training_client_from_state).
//
// X-Idempotency-Key: a retry with the same key and body returns the first copy's path;
// the same key with another body is a 409. Keys are remembered for
// persistence.future_ttl_seconds.

// CopyInput is copy_weights.
type CopyInput struct {
	SourcePath     string
	SessionID      string // with ModelSeqID: the destination run slot
	ModelSeqID     *int64
	ProjectID      string // the destination project (without a session)
	TTLSeconds     *int64
	IdempotencyKey string
	PayloadHash    string
}

const keyCopy = "copy/"

// copyNote starts the note of a run made by copy_weights (older records are recognised
// by it).
const copyNote = "holds a copy of "

type copyRecord struct {
	PayloadHash string `json:"payload_hash"`
	Path        string `json:"path"`
}

// CopyWeights copies a checkpoint and returns the copy's tinker:// path.
func (s *Service) CopyWeights(ctx context.Context, tenant string, in CopyInput) (path string, err error) {
	ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeTrainingController), telemetry.SpanTCCopyCheckpoint,
		attribute.String(telemetry.AttrOperationType, telemetry.OpCopyWeights))
	defer func() {
		if sp.IsRecording() && path != "" {
			sp.SetAttributes(attribute.String(telemetry.AttrCheckpointPath, path))
		}
		telemetry.End(sp, err)
	}()
	session := in.SessionID != "" || in.ModelSeqID != nil
	switch {
	case session && in.ProjectID != "":
		return "", invalidf("copy_weights takes destination_project_id, or session_id with model_seq_id, not both")
	case session && (in.SessionID == "" || in.ModelSeqID == nil):
		return "", invalidf("copy_weights needs both session_id and model_seq_id (or destination_project_id)")
	case !session && in.ProjectID == "":
		return "", invalidf("copy_weights needs destination_project_id, or session_id with model_seq_id")
	case in.ModelSeqID != nil && *in.ModelSeqID < 0:
		return "", invalidf("model_seq_id %d must not be negative", *in.ModelSeqID)
	}
	if err := validTTL(in.TTLSeconds); err != nil {
		return "", err
	}
	idemKey := ""
	if in.IdempotencyKey != "" {
		h := sha256.Sum256([]byte(tenant + "\x00" + in.IdempotencyKey))
		idemKey = keyCopy + hex.EncodeToString(h[:])
		b, err := s.st.Get(ctx, idemKey)
		switch {
		case err == nil:
			var rec copyRecord
			if json.Unmarshal(b, &rec) == nil {
				if rec.PayloadHash != in.PayloadHash {
					return "", conflictf("X-Idempotency-Key %q was used for another copy_weights request; use a new key for a new copy", in.IdempotencyKey)
				}
				return rec.Path, nil
			}
		case !errors.Is(err, store.ErrNotFound):
			return "", classify(fmt.Errorf("read copy_weights idempotency record: %w", err))
		}
	}

	fetched := s.fetchCheckpoint(in.SourcePath)
	s.lock(lkSessions | lkRuns | lkCkpts)
	src, err := s.ckpts.resolve(tenant, in.SourcePath, fetched)
	var runID, project string
	if err == nil {
		if session {
			_, err = s.liveSession(tenant, in.SessionID)
			runID = RunID(in.SessionID, *in.ModelSeqID)
			if _, taken := s.runs.get(runID); err == nil && taken {
				err = conflictf("training run %s already exists (model_seq_id %d is taken)", runID, *in.ModelSeqID)
			}
		} else {
			project = in.ProjectID
			if !s.ownsProject(tenant, project) {
				err = notFoundf("project %q not found (a copy goes to one of your projects: %q or the project of one of your sessions)", project, tenant)
			}
			runID = newID("copy_")
		}
	}
	if err == nil {
		err = s.checkCopyQuota(tenant)
	}
	var c Checkpoint
	if err == nil {
		c = *src
		// Reserve the slot while the files are copied (counted by the run quota at once).
		now := s.now()
		s.runs.put(&Run{ID: runID, Owner: s.self, Tenant: tenant, SessionID: in.SessionID, BaseModel: c.BaseModel, Lora: c.Lora,
			Optimizer: c.OptimizerOf(), CreatedAt: now, LastRequestTime: now, State: RunUnloaded, ProjectID: project, Copy: true, copying: true,
			Note: fmt.Sprintf("%s%s (copy_weights); train from its checkpoint with create_training_client_from_state", copyNote, in.SourcePath)})
		if in.ModelSeqID != nil {
			s.runs.at(runID).ModelSeqID = *in.ModelSeqID
		}
	}
	s.unlock(lkSessions | lkRuns | lkCkpts)
	if err != nil {
		return "", s.settle(err)
	}
	// Another tenant's published checkpoint is shared as weights only, and the copy
	// inherits its publication (publish.go); a copy of such a copy names the original.
	copyOf := c.CopyOf
	if copyOf == "" && c.Tenant != tenant {
		copyOf = c.TinkerPath()
	}
	size := c.SizeBytes
	if size <= 0 {
		size = dirSize(c.Dir)
	}
	release, err := s.reserveDisk(tenant, runID, size, "copy_weights")
	if err != nil {
		s.lock(lkRuns)
		s.runs.del(runID)
		s.unlock(lkRuns)
		return "", err
	}
	defer release()
	undo := func() {
		s.lock(lkRuns)
		s.runs.del(runID)
		s.unlock(lkRuns)
		_ = os.RemoveAll(s.ckpts.layout().runDir(runID))
	}
	dst := s.ckpts.layout().ckptDir(runID, c.Type, c.Name)
	if err := copyDir(c.Dir, dst, copyOf != ""); err != nil {
		undo()
		return "", classify(fmt.Errorf("copy checkpoint files: %w", err))
	}
	now := s.now()
	cp := &Checkpoint{RunID: runID, Tenant: tenant, Type: c.Type, Name: c.Name, Dir: dst, CreatedAt: now, SizeBytes: dirSize(dst),
		BaseModel: c.BaseModel, Lora: c.Lora, UserMetadata: c.UserMetadata, Optimizer: c.Optimizer, Encrypted: c.Encrypted, CopyOf: copyOf}
	if in.TTLSeconds != nil {
		t := now.Add(time.Duration(*in.TTLSeconds) * time.Second)
		cp.ExpiresAt = &t
	}
	s.lock(lkRuns)
	r := *s.runs.at(runID)
	s.unlock(lkRuns)
	if err := putJSON(ctx, s.st, keyRun+runID, &r); err != nil {
		undo()
		return "", classify(err)
	}
	if err := putJSON(ctx, s.st, ckptKey(runID, cp.Type, cp.Name), cp); err != nil {
		if err := s.st.Del(ctx, keyRun+runID); err != nil {
			s.writeFailed(ctx, reasonCopyRollback, err, "key", keyRun+runID)
		}
		s.dropMetrics(ctx, runID)
		undo()
		return "", classify(err)
	}
	s.lock(lkRuns | lkCkpts)
	s.ckpts.replaceRun(runID, cp)
	if r := s.runs.at(runID); r != nil {
		r.copying = false // counted by its checkpoint from now on
	}
	s.unlock(lkRuns | lkCkpts)
	path = cp.TinkerPath()
	if idemKey != "" {
		b, _ := json.Marshal(copyRecord{PayloadHash: in.PayloadHash, Path: path})
		if err := s.st.Set(ctx, idemKey, b, s.cfg.FutureTTL()); err != nil {
			s.log.WarnContext(ctx, "copy_weights: the idempotency record was not stored; a retry would copy again", "error", err)
		}
	}
	s.log.InfoContext(ctx, "checkpoint copied", "tenant", tenant, "source", in.SourcePath, "copy", path)
	d := map[string]any{"source_path": in.SourcePath}
	if c.Tenant != tenant {
		d["source_owner"] = c.Tenant
	}
	s.auditCheckpoint(ctx, tenant, AuditCheckpointCopy, cp, d)
	return path, nil
}

// copyDir copies the regular files of src into a new directory dst (through a temporary
// directory, renamed into place, so dst appears whole or not at all). A copy shares
// the source's storage: deleting either leaves the other whole. weightsOnly leaves the
// optimizer state out.
func copyDir(src, dst string, weightsOnly bool) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dst), ".tmp-"+filepath.Base(dst)+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, e := range ents {
		if !e.Type().IsRegular() || (weightsOnly && e.Name() == engine.OptimizerWeightsFile) {
			continue
		}
		// Storage is shared with the source where the file system allows (a hard link:
		// saves replace files, never rewrite them in place); else the bytes are copied.
		if err := os.Link(filepath.Join(src, e.Name()), filepath.Join(tmp, e.Name())); err == nil {
			continue
		}
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(tmp, e.Name())); err != nil {
			return err
		}
	}
	return os.Rename(tmp, dst)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
