package service

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/agessh"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/telemetry"
)

// Weight export (save_weights_external, SDK >= 0.28): a training operation (it takes the
// run's next seq_id) that writes the run's current adapter in Hugging Face PEFT format
// (adapter_config.json and adapter_model.safetensors, the files tinker-cookbook's
// weights.build_lora_adapter and vLLM/SGLang read) as a checkpoint of type external,
// tinker://<run>/external_weights/<name>. With age_encryption_recipients (x25519 "age1…"
// or SSH "ssh-ed25519 …"/"ssh-rsa …" public keys, at most MaxAgeRecipients) every file is
// encrypted to them and stored only encrypted, as "<file>.age": the server keeps no
// plaintext copy. Its files are downloaded through …/external_weights_urls: one signed
// link per file, served by this server, valid for the archive link lifetime. External
// checkpoints are listed, published, TTL'd and deleted like the others; an export with
// an existing name replaces it (the SDK's CLI and the cookbook export as "download").

// notAnExport refuses to train or sample from an export: it is a download (maybe
// encrypted), not a state the server reads back.
func notAnExport(c *Checkpoint, path string) error {
	if c != nil && c.Type == CkptExternal {
		return invalidf("checkpoint %s is an export (external_weights) for download; load or sample the training or sampler checkpoint it was made from", path)
	}
	return nil
}

// MaxAgeRecipients bounds age_encryption_recipients (the SDK's limit).
const MaxAgeRecipients = 10

// ExternalInput is save_weights_external.
type ExternalInput struct {
	OpMeta
	Name       string
	TTLSeconds *int64
	Recipients []string // age recipients; empty: plaintext files
}

// ExternalResult is the export's future result.
type ExternalResult struct {
	Path      string
	SizeBytes int64
}

// ParseRecipients parses age recipients: x25519 (age1…) or SSH public keys.
func ParseRecipients(list []string) ([]age.Recipient, error) {
	if len(list) > MaxAgeRecipients {
		return nil, invalidf("age_encryption_recipients has %d recipients, at most %d", len(list), MaxAgeRecipients)
	}
	out := make([]age.Recipient, 0, len(list))
	for i, r := range list {
		r = strings.TrimSpace(r)
		var rec age.Recipient
		var err error
		switch {
		case strings.HasPrefix(r, "age1"):
			rec, err = age.ParseX25519Recipient(r)
		case strings.HasPrefix(r, "ssh-ed25519 "), strings.HasPrefix(r, "ssh-rsa "):
			rec, err = agessh.ParseRecipient(r)
		default:
			err = fmt.Errorf("not an x25519 (age1…) or SSH (ssh-ed25519, ssh-rsa) public key")
		}
		if err != nil {
			return nil, invalidf("age_encryption_recipients[%d] %q: %v", i, clip(r, 80), err)
		}
		out = append(out, rec)
	}
	return out, nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// SaveExternal queues a weight export on the run (in its seq_id order).
func (s *Service) SaveExternal(ctx context.Context, tenant string, in ExternalInput) (string, error) {
	if err := validCheckpointName(in.Name); err != nil {
		return "", err
	}
	if err := validTTL(in.TTLSeconds); err != nil {
		return "", err
	}
	recipients, err := ParseRecipients(in.Recipients)
	if err != nil {
		return "", err
	}
	s.lock(lkSessions | lkRuns)
	_, err = s.usableRun(tenant, in.ModelID)
	s.unlock(lkSessions | lkRuns)
	if err != nil {
		return "", s.settle(err)
	}
	return s.submitRunOp(ctx, tenant, in.OpMeta, telemetry.OpSaveWeightsExternal, func(ctx context.Context, r *Run) (futures.Result, error) {
		ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeTrainingController), telemetry.SpanTCSaveCheckpoint,
			attribute.String(telemetry.AttrCheckpointType, CkptExternal), attribute.Int64(telemetry.AttrSeqID, in.SeqID),
			attribute.Bool(telemetry.AttrEncrypted, len(recipients) > 0))
		res, err := s.doExport(ctx, r, in, recipients)
		if err == nil && sp.IsRecording() {
			sp.SetAttributes(attribute.String(telemetry.AttrCheckpointPath, res.Path))
		}
		telemetry.End(sp, err)
		if err != nil {
			return futures.Result{}, err
		}
		return s.enc.SaveWeightsExternal(res)
	})
}

func (s *Service) doExport(ctx context.Context, r *Run, in ExternalInput, recipients []age.Recipient) (ExternalResult, error) {
	release, err := s.reserveDisk(r.Tenant, r.ID, s.saveBytes(r, false), "save_weights_external")
	if err != nil {
		return ExternalResult{}, err
	}
	defer release()
	parent := s.ckpts.layout().kindDir(r.ID, CkptExternal)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return ExternalResult{}, fmt.Errorf("export: %w", err)
	}
	dir := filepath.Join(parent, in.Name)
	plain, err := os.MkdirTemp(parent, ".tmp-"+in.Name+"-")
	if err != nil {
		return ExternalResult{}, fmt.Errorf("export: %w", err)
	}
	defer os.RemoveAll(plain)
	// The executor writes the adapter (weights only) into a directory of its own.
	adapter := filepath.Join(plain, "adapter")
	if err := s.onAdapter(ctx, r, func() error { return s.be.SaveState(ctx, r.BaseModel, r.ID, adapter, false) }); err != nil {
		return ExternalResult{}, err
	}
	out := adapter
	if len(recipients) > 0 {
		out = filepath.Join(plain, "encrypted")
		if err := encryptDir(adapter, out, recipients); err != nil {
			return ExternalResult{}, fmt.Errorf("export: encrypt: %w", err)
		}
	}
	// Replace an earlier export of the same name: new files in place, then the old ones go.
	old := dir + ".old"
	_ = os.RemoveAll(old)
	if _, err := os.Stat(dir); err == nil {
		if err := os.Rename(dir, old); err != nil {
			return ExternalResult{}, fmt.Errorf("export: %w", err)
		}
	}
	if err := os.Rename(out, dir); err != nil {
		return ExternalResult{}, fmt.Errorf("export: %w", err)
	}
	_ = os.RemoveAll(old)
	now := s.now()
	c := &Checkpoint{RunID: r.ID, Tenant: r.Tenant, Type: CkptExternal, Name: in.Name, Dir: dir, CreatedAt: now, SizeBytes: dirSize(dir),
		SeqID: in.SeqID, BaseModel: r.BaseModel, Lora: r.Lora, Optimizer: r.OptimizerOf(), Encrypted: len(recipients) > 0}
	if in.TTLSeconds != nil {
		t := now.Add(time.Duration(*in.TTLSeconds) * time.Second)
		c.ExpiresAt = &t
	}
	if err := putJSON(ctx, s.st, ckptKey(r.ID, c.Type, c.Name), c); err != nil {
		return ExternalResult{}, err
	}
	s.lock(lkCkpts)
	s.ckpts.put(c)
	s.unlock(lkCkpts)
	attrs := []attribute.KeyValue{attribute.String(telemetry.MAttrBaseModel, r.BaseModel), attribute.String(telemetry.MAttrCheckpointType, CkptExternal)}
	if s.tel.Instruments.ModelIDAttribute {
		attrs = append(attrs, attribute.String(telemetry.MAttrModelID, r.ID))
	}
	s.tel.Instruments.TrainingCheckpointsSaved.Add(ctx, 1, metric.WithAttributes(attrs...))
	s.tel.Instruments.TrainingCheckpointSize.Record(ctx, c.SizeBytes, metric.WithAttributes(attrs...))
	s.auditCheckpoint(ctx, r.Tenant, AuditCheckpointSaveExternal, c, map[string]any{"seq_id": in.SeqID, "size_bytes": c.SizeBytes,
		"encrypted": len(recipients) > 0})
	return ExternalResult{Path: c.TinkerPath(), SizeBytes: c.SizeBytes}, nil
}

// encryptDir writes every regular file of src, age-encrypted to recipients, into the new
// directory dst as "<name>.age".
func encryptDir(src, dst string, recipients []age.Recipient) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if err := encryptFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()+".age"), recipients); err != nil {
			return err
		}
	}
	return nil
}

func encryptFile(src, dst string, recipients []age.Recipient) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	w, err := age.Encrypt(out, recipients...)
	if err == nil {
		_, err = io.Copy(w, in)
	}
	if err == nil {
		err = w.Close()
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// CheckpointFiles lists the files of a checkpoint the tenant may read (its own, or a
// published one), names relative to its directory, for external_weights_urls.
func (s *Service) CheckpointFiles(tenant, runID, ckptID string) (Checkpoint, []string, error) {
	s.lock(lkRuns | lkCkpts)
	c, err := s.ownedCheckpoint(tenant, runID, ckptID)
	if KindOf(err) == KindNotFound {
		if pc, ok := s.ckpts.get(runID, ckptID); ok && pc.Public {
			c, err = pc, nil // published: every tenant may download it
		}
	}
	var cc Checkpoint
	if err == nil {
		cc = *c
		err = s.ckpts.inherited(c)
	}
	s.unlock(lkRuns | lkCkpts)
	if err != nil {
		return Checkpoint{}, nil, s.settle(err)
	}
	if cc.Type != CkptExternal {
		return Checkpoint{}, nil, invalidf("checkpoint %s is a %s checkpoint: signed file URLs are for external weights (save_weights_external); "+
			"download a training checkpoint by exporting it", cc.TinkerPath(), cc.Type)
	}
	files, err := regularFiles(cc.Dir)
	if err != nil {
		return Checkpoint{}, nil, notFoundf("checkpoint %s: its files are missing on the server", cc.TinkerPath())
	}
	return cc, files, nil
}

// fileTokenTag separates file tokens from archive tokens (whose payload is a tinker://
// path, which holds no NUL byte).
const fileTokenTag = "file\x00"

// FileToken signs a link to one file of a tenant's checkpoint, valid for ttl.
func (s *Service) FileToken(c Checkpoint, file string, ttl time.Duration) (string, time.Time) {
	exp := s.now().Add(ttl).Truncate(time.Second)
	return s.tokens.sign(exp, fileTokenTag+c.TinkerPath()+"\x00"+file), exp
}

// OpenFile verifies a file token for file and opens that file of the checkpoint; the
// caller closes it.
func (s *Service) OpenFile(tok, file string) (*CheckpointFile, error) {
	payload, err := s.tokens.verify(tok)
	if err != nil {
		return nil, err
	}
	rest, ok := strings.CutPrefix(payload, fileTokenTag)
	if !ok {
		return nil, ErrBadToken
	}
	path, signed, ok := strings.Cut(rest, "\x00")
	if !ok || signed != file {
		return nil, ErrBadToken
	}
	runID, kind, name, err := ParseTinkerPath(path)
	if err != nil {
		return nil, ErrBadToken
	}
	s.lock(lkCkpts)
	c, ok := s.ckpts.get(runID, kind+"/"+name)
	var dir string
	if ok {
		dir = c.Dir
		err = s.ckpts.inherited(c)
	}
	s.unlock(lkCkpts)
	if !ok {
		return nil, notFoundf("checkpoint %s no longer exists", path)
	}
	if err != nil {
		return nil, err
	}
	return openCheckpointFile(dir, file)
}
