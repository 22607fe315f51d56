package service

import (
	"context"
	"fmt"
	"sort"

	"github.com/tuft-go/tuft/telemetry"
)

// CreateSessionInput is what create_session carries.
type CreateSessionInput struct {
	Tags         []string
	UserMetadata map[string]any
	SDKVersion   string
	ProjectID    string
	DisplayName  string
}

// CreateSession opens a client session for tenant.
func (s *Service) CreateSession(ctx context.Context, tenant string, in CreateSessionInput) (*Session, error) {
	md, err := NewMetadata(in.UserMetadata)
	if err != nil {
		return nil, err
	}
	now := s.now()
	se := &Session{
		ID: newID("sess_"), Owner: s.self, Tenant: tenant, Tags: in.Tags, UserMetadata: md,
		SDKVersion: in.SDKVersion, ProjectID: in.ProjectID, DisplayName: in.DisplayName, CreatedAt: now, LastHeartbeat: now,
	}
	rec := *se
	s.lock(quotaLocks)
	err = s.checkSessionQuota(tenant)
	if err == nil {
		err = s.checkMetadata(tenant, "create_session", sessionMetadataBytes(se), 0)
	}
	if err == nil {
		s.sessions.put(se) // counted by the next check at once
	}
	s.unlock(quotaLocks)
	if err != nil {
		return nil, err
	}
	if err := putJSON(ctx, s.st, keySession+rec.ID, &rec); err != nil {
		s.lock(lkSessions)
		s.sessions.del(se.ID)
		s.unlock(lkSessions)
		return nil, classify(err)
	}
	s.log.InfoContext(telemetry.WithKeys(ctx, telemetry.Keys{SessionID: se.ID}), "session created",
		"tenant", tenant, "sdk_version", in.SDKVersion)
	return &rec, nil
}

// liveSession is sessions.owned that also refuses finished (410) and expired sessions.
func (s *family) liveSession(tenant, id string) (*Session, error) {
	se, err := s.sessions.owned(tenant, id)
	if err != nil {
		return nil, err
	}
	if err := finishedErr(se); err != nil {
		return nil, err
	}
	if se.Expired {
		return nil, notFoundf("session %q expired: no heartbeat for more than %s; create a new client", id, s.cfg.HeartbeatTimeout())
	}
	return se, nil
}

// Heartbeat keeps a session alive. It writes the time alone (persistHeartbeat), never
// the session record with its metadata.
func (s *Service) Heartbeat(ctx context.Context, tenant, id string) error {
	s.lock(lkSessions)
	se, err := s.liveSession(tenant, id)
	if err != nil {
		s.unlock(lkSessions)
		return s.settle(err)
	}
	now := s.now()
	se.LastHeartbeat = now
	s.unlock(lkSessions)
	return classify(s.persistHeartbeat(ctx, id, now))
}

// ListSessions returns the tenant's session ids, newest first.
func (s *Service) ListSessions(ctx context.Context, tenant string, limit, offset int) []string {
	s.lock(lkSessions)
	var all []*Session
	for se := range s.sessions.ofTenant(tenant) {
		if se.Tenant == tenant {
			c := *se
			all = append(all, &c)
		}
	}
	s.unlock(lkSessions)
	foreignRecords(ctx, &s.replicas, keySession, tenant, func(se *Session) { all = append(all, se) })
	sort.Slice(all, func(i, j int) bool { return all[i].CreatedAt.After(all[j].CreatedAt) })
	ids := make([]string, 0, len(all))
	for _, se := range page(all, limit, offset) {
		ids = append(ids, se.ID)
	}
	return ids
}

// finishedErr is the 410 for operations on a finished session (nil while it is open).
func finishedErr(se *Session) error {
	if se == nil || se.Finished == nil {
		return nil
	}
	return gonef("session %s was finished by its client (reason %s); it accepts no more operations: create a new ServiceClient", se.ID, se.Finished.Reason)
}

// SessionView is a session as GET /sessions/{id} shows it.
type SessionView struct {
	Session
	Runs, Samplers []string
}

// SessionInfo describes a session: its training runs, sampling sessions and status.
func (s *Service) SessionInfo(tenant, id string) (SessionView, error) {
	v, err := s.sessionInfo(tenant, id)
	return v, s.settle(err)
}

// FinishSession records the client's finish reason (first wins: a later call changes
// nothing and reports the recorded one) and releases the session's resources: operations
// queued on its training runs and sampling sessions fail with a message naming the
// finish (one already running completes), the runs' adapters and the samplers are
// released. Records, results and checkpoints stay. Afterwards every operation on the
// session, its runs and samplers, and its heartbeats get 410.
func (s *Service) FinishSession(ctx context.Context, tenant, id, reason string, detail *string) (SessionFinish, error) {
	switch reason {
	case FinishSuccess, FinishErrored, FinishInterrupted:
	default:
		return SessionFinish{}, invalidf("reason.type %q must be one of %s, %s, %s", reason, FinishSuccess, FinishErrored, FinishInterrupted)
	}
	if max := s.cfg.Limits.MaxMetadataBytes; detail != nil && len(*detail) > max {
		return SessionFinish{}, &Error{Kind: KindTooLarge, Limit: "limits.max_metadata_bytes", Msg: fmt.Sprintf("reason.detail is %d bytes, more than limits.max_metadata_bytes (%d)", len(*detail), max)}
	}
	s.lock(lkSessions | lkRuns | lkSamplers)
	se, err := s.sessions.owned(tenant, id)
	if err != nil {
		s.unlock(lkSessions | lkRuns | lkSamplers)
		return SessionFinish{}, s.settle(err)
	}
	if se.Finished != nil {
		f := *se.Finished
		s.unlock(lkSessions | lkRuns | lkSamplers)
		return f, nil
	}
	se.Finished = &SessionFinish{Reason: reason, Detail: detail, At: s.now()}
	f := *se.Finished
	c := *se
	var runs []*Run
	var samplers []*Sampler
	for r := range s.runs.ofTenant(tenant) {
		if r.SessionID == id && r.State != RunUnloaded {
			runs = append(runs, r)
		}
	}
	for sm := range s.samplers.ofTenant(tenant) {
		if sm.SessionID == id && !sm.Closed {
			samplers = append(samplers, sm)
		}
	}
	s.unlock(lkSessions | lkRuns | lkSamplers)
	if err := putJSON(ctx, s.st, keySession+id, &c); err != nil {
		return SessionFinish{}, classify(err)
	}
	why := fmt.Sprintf("session %s was finished by its client (reason %s)", id, reason)
	for _, r := range runs {
		s.unload(ctx, r, why)
	}
	for _, sm := range samplers {
		s.fut.DropQueue(sm.ID, fmt.Sprintf("sampling session %s was closed: %s", sm.ID, why))
		s.closeSampler(ctx, sm)
	}
	s.log.InfoContext(telemetry.WithKeys(ctx, telemetry.Keys{SessionID: id}), "session finished by its client",
		"tenant", tenant, "reason", reason, "runs_released", len(runs), "samplers_released", len(samplers))
	return f, nil
}

// SetSessionProject records a session's project id.
func (s *Service) SetSessionProject(ctx context.Context, tenant, id, project string) error {
	s.lock(quotaLocks)
	se, err := s.sessions.owned(tenant, id)
	if err == nil {
		// The project is held with the session's metadata (sessionMetadataBytes).
		old := sessionMetadataBytes(se)
		err = s.checkMetadata(tenant, "project_id", old-int64(len(se.ProjectID))+int64(len(project)), old)
	}
	if err != nil {
		s.unlock(quotaLocks)
		return s.settle(err)
	}
	se.ProjectID = project
	c := *se
	s.unlock(quotaLocks)
	return classify(putJSON(ctx, s.st, keySession+id, &c))
}

func page[T any](xs []T, limit, offset int) []T {
	if offset < 0 {
		offset = 0
	}
	if offset >= len(xs) {
		return nil
	}
	xs = xs[offset:]
	if limit > 0 && limit < len(xs) {
		xs = xs[:limit]
	}
	return xs
}
