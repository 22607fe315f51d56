package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/futures"
)

// ParseTinkerPath splits tinker://<run>/<weights|sampler_weights|external_weights>/<name>.
func ParseTinkerPath(p string) (runID, kind, name string, err error) {
	rest, ok := strings.CutPrefix(p, "tinker://")
	if !ok {
		return "", "", "", invalidf("path %q must start with tinker://", p)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
		return "", "", "", invalidf("path %q must look like tinker://<training_run_id>/weights/<name> or .../sampler_weights/<name>", p)
	}
	if parts[1] != "weights" && parts[1] != "sampler_weights" && parts[1] != "external_weights" {
		return "", "", "", invalidf("path %q: the second part must be weights, sampler_weights or external_weights, not %q", p, parts[1])
	}
	if err := validCheckpointName(parts[2]); err != nil {
		return "", "", "", err
	}
	return parts[0], parts[1], parts[2], nil
}

// RunView is a training run as the REST API shows it.
type RunView struct {
	Run
	LastCheckpointRec *Checkpoint
	LastSamplerRec    *Checkpoint
}

// ListRuns lists the tenant's training runs, most recently used first.
func (s *Service) ListRuns(ctx context.Context, tenant string, limit, offset int) ([]RunView, int) {
	s.lock(lkRuns)
	var all []*Run
	for r := range s.runs.ofTenant(tenant) {
		if r.Tenant == tenant {
			c := *r
			all = append(all, &c)
		}
	}
	s.unlock(lkRuns)
	foreignRecords(ctx, &s.replicas, keyRun, tenant, func(r *Run) { all = append(all, r) })
	sort.Slice(all, func(i, j int) bool {
		if !all[i].LastRequestTime.Equal(all[j].LastRequestTime) {
			return all[i].LastRequestTime.After(all[j].LastRequestTime)
		}
		return all[i].ID < all[j].ID
	})
	var out []RunView
	s.lock(lkCkpts)
	for _, r := range page(all, limit, offset) {
		out = append(out, s.view(r))
	}
	s.unlock(lkCkpts)
	return out, len(all)
}

// GetRun describes one training run.
func (s *Service) GetRun(tenant, id string) (RunView, error) {
	s.lock(lkRuns | lkCkpts)
	r, err := s.runs.owned(tenant, id)
	var v RunView
	if err == nil {
		v = s.view(r)
	}
	s.unlock(lkRuns | lkCkpts)
	return v, s.settle(err)
}

// ListCheckpoints lists one run's checkpoints, oldest first.
func (s *Service) ListCheckpoints(tenant, runID string) ([]Checkpoint, error) {
	s.lock(lkRuns | lkCkpts)
	if _, err := s.runs.owned(tenant, runID); err != nil {
		s.unlock(lkRuns | lkCkpts)
		return nil, s.settle(err)
	}
	out := s.ckpts.ofRun(runID)
	s.unlock(lkRuns | lkCkpts)
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID() < out[j].ID()
	})
	return out, nil
}

// ListAllCheckpoints lists every checkpoint of the tenant, newest first.
func (s *Service) ListAllCheckpoints(ctx context.Context, tenant string, limit, offset int) ([]Checkpoint, int) {
	s.lock(lkCkpts)
	var all []Checkpoint
	seen := map[string]bool{}
	for c := range s.ckpts.ofTenant(tenant) {
		all = append(all, *c)
		seen[c.TinkerPath()] = true
	}
	s.unlock(lkCkpts)
	if s.self != "" {
		// Other replicas' runs write checkpoints this one has not loaded.
		err := s.st.Scan(ctx, keyCkpt, func(_ string, v []byte) error {
			var c Checkpoint
			if json.Unmarshal(v, &c) == nil && c.Tenant == tenant && !seen[c.TinkerPath()] {
				all = append(all, c)
			}
			return nil
		})
		if err != nil { // the listing shows this replica's checkpoints at least
			s.log.Warn("could not list other replicas' checkpoints", "tenant", tenant, "error", err)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].CreatedAt.Equal(all[j].CreatedAt) {
			return all[i].CreatedAt.After(all[j].CreatedAt)
		}
		return all[i].TinkerPath() < all[j].TinkerPath()
	})
	return page(all, limit, offset), len(all)
}

// DeleteCheckpoint removes a checkpoint's files and record.
func (s *Service) DeleteCheckpoint(ctx context.Context, tenant, runID, ckptID string) error {
	s.lock(lkRuns | lkCkpts)
	c, err := s.ownedCheckpoint(tenant, runID, ckptID)
	s.unlock(lkRuns | lkCkpts)
	if err != nil {
		return s.settle(err)
	}
	if err := s.removeCheckpoint(ctx, c); err != nil {
		return classify(err)
	}
	s.auditCheckpoint(ctx, tenant, AuditCheckpointDelete, c, nil)
	s.stopForeignSamplers(ctx, tenant, c.TinkerPath())
	return nil
}

func (s *Service) removeCheckpoint(ctx context.Context, c *Checkpoint) error {
	// Record first: a crash between the two leaves orphan files, never a record that
	// points at nothing.
	if err := s.st.Del(ctx, ckptKey(c.RunID, c.Type, c.Name)); err != nil {
		return fmt.Errorf("delete checkpoint record: %w", err)
	}
	s.lock(lkRuns | lkCkpts)
	s.ckpts.del(c.RunID, c.ID())
	if r, ok := s.runs.get(c.RunID); ok {
		if r.LastCheckpoint == c.ID() {
			r.LastCheckpoint = ""
		}
		if r.LastSamplerCkpt == c.ID() {
			r.LastSamplerCkpt = ""
		}
	}
	s.unlock(lkRuns | lkCkpts)
	defer s.diskChanged(c.RunID)
	if err := os.RemoveAll(c.Dir); err != nil {
		return fmt.Errorf("delete checkpoint files: %w", err)
	}
	return nil
}

// SetPublic publishes or unpublishes a checkpoint (published ones are readable by every
// tenant: loadable and samplable). Unpublishing stops the samplers other tenants opened
// from it (see stopForeignSamplers).
func (s *Service) SetPublic(ctx context.Context, tenant, runID, ckptID string, public bool) error {
	if public {
		s.lock(lkRuns | lkCkpts)
		c, err := s.ownedCheckpoint(tenant, runID, ckptID)
		if err == nil && c.CopyOf != "" {
			err = &Error{Kind: KindForbidden, Msg: fmt.Sprintf("checkpoint %s is a copy of %s, another tenant's published checkpoint: it shares that publication and only its owner publishes it",
				c.TinkerPath(), c.CopyOf)}
		}
		s.unlock(lkRuns | lkCkpts)
		if err != nil {
			return s.settle(err)
		}
	}
	var cc Checkpoint
	err := s.updateCheckpoint(ctx, tenant, runID, ckptID, func(c *Checkpoint) { c.Public, cc = public, *c })
	if err != nil {
		return err
	}
	event := AuditCheckpointPublish
	if !public {
		event = AuditCheckpointUnpublish
	}
	s.auditCheckpoint(ctx, tenant, event, &cc, nil)
	if !public {
		s.stopForeignSamplers(ctx, tenant, cc.TinkerPath())
	}
	return nil
}

// SetTTL sets (ttl > 0) or clears (nil) a checkpoint's expiry.
func (s *Service) SetTTL(ctx context.Context, tenant, runID, ckptID string, ttl *int64) error {
	if err := validTTL(ttl); err != nil {
		return err
	}
	now := s.now()
	var cc Checkpoint
	err := s.updateCheckpoint(ctx, tenant, runID, ckptID, func(c *Checkpoint) {
		defer func() { cc = *c }()
		if ttl == nil {
			c.ExpiresAt = nil
			return
		}
		t := now.Add(time.Duration(*ttl) * time.Second)
		c.ExpiresAt = &t
	})
	if err == nil {
		var v any // null: the TTL was removed
		if ttl != nil {
			v = *ttl
		}
		s.auditCheckpoint(ctx, tenant, AuditCheckpointSetTTL, &cc, map[string]any{"ttl_seconds": v})
	}
	return err
}

// validTTL checks a ttl_seconds at the edge: it becomes a time.Duration, which cannot
// hold more than ~292 years (a larger value would wrap into the past, and the reaper
// would delete the checkpoint at once).
func validTTL(ttl *int64) error {
	if ttl != nil && (*ttl <= 0 || *ttl > config.MaxTTLSeconds) {
		return invalidf("ttl_seconds %d must be in [1, %d] (or null to keep the checkpoint)", *ttl, int64(config.MaxTTLSeconds))
	}
	return nil
}

func (s *Service) updateCheckpoint(ctx context.Context, tenant, runID, ckptID string, f func(*Checkpoint)) error {
	s.lock(lkRuns | lkCkpts)
	c, err := s.ownedCheckpoint(tenant, runID, ckptID)
	if err != nil {
		s.unlock(lkRuns | lkCkpts)
		return s.settle(err)
	}
	f(c)
	cc := *c
	s.unlock(lkRuns | lkCkpts)
	return classify(putJSON(ctx, s.st, ckptKey(cc.RunID, cc.Type, cc.Name), &cc))
}

// ArchiveToken returns a signed, expiring token for downloading a checkpoint's archive.
func (s *Service) ArchiveToken(ctx context.Context, tenant, runID, ckptID, format string, ttl time.Duration) (string, time.Time, error) {
	s.lock(lkRuns | lkCkpts)
	c, err := s.ownedCheckpoint(tenant, runID, ckptID)
	var cc Checkpoint
	if err == nil {
		cc = *c
		err = s.ckpts.inherited(c)
	}
	s.unlock(lkRuns | lkCkpts)
	if err != nil {
		return "", time.Time{}, s.settle(err)
	}
	exp := s.now().Add(ttl).Truncate(time.Second)
	d := map[string]any{"expires_at": exp.UTC().Format(time.RFC3339)}
	if format != "" {
		d["format"] = format
	}
	s.auditCheckpoint(ctx, tenant, AuditCheckpointDownloadLink, &cc, d)
	return s.tokens.sign(exp, cc.TinkerPath()), exp, nil
}

// ErrBadToken is returned for an archive token that is malformed, forged or expired.
var ErrBadToken = errors.New("archive link is invalid or expired")

// OpenArchive verifies a token and opens the archive of the checkpoint it grants.
func (s *Service) OpenArchive(tok string) (*Archive, error) {
	c, err := s.archiveCheckpoint(tok)
	if err != nil {
		return nil, err
	}
	return openArchive(c)
}

// archiveCheckpoint is the checkpoint a valid archive token grants.
func (s *Service) archiveCheckpoint(tok string) (Checkpoint, error) {
	payload, err := s.tokens.verify(tok)
	if err != nil {
		return Checkpoint{}, err
	}
	runID, kind, name, err := ParseTinkerPath(payload) // a file token's payload is no path
	if err != nil {
		return Checkpoint{}, ErrBadToken
	}
	s.lock(lkCkpts)
	c, ok := s.ckpts.get(runID, kind+"/"+name)
	var cc Checkpoint
	if ok {
		cc = *c
		err = s.ckpts.inherited(c)
	}
	s.unlock(lkCkpts)
	if !ok {
		return Checkpoint{}, notFoundf("checkpoint %s no longer exists", payload)
	}
	if err != nil {
		return Checkpoint{}, err
	}
	return cc, nil
}

// WeightsInfo describes the checkpoint a tinker:// path names.
func (s *Service) WeightsInfo(tenant, path string) (Checkpoint, error) {
	fetched := s.fetchCheckpoint(path)
	s.lock(lkCkpts)
	defer s.unlock(lkCkpts)
	c, err := s.ckpts.resolve(tenant, path, fetched)
	if err != nil {
		return Checkpoint{}, err
	}
	return *c, nil
}

// Retrieve long-polls a future of tenant.
func (s *Service) Retrieve(ctx context.Context, tenant, id string, wait time.Duration) (futures.Record, error) {
	rec, err := s.fut.Wait(ctx, tenant, id, wait)
	if err == nil && !rec.Done() && rec.Owner != s.self {
		// Another replica runs it: only it can wait for the result.
		return rec, &ElsewhereError{Owner: rec.Owner, What: "future " + id}
	}
	if errors.Is(err, futures.ErrNotFound) {
		return rec, notFoundf("future %q not found (unknown, expired after %s, or not yours)", id, s.cfg.FutureTTL())
	}
	if err != nil {
		return rec, classify(err)
	}
	return rec, nil
}
