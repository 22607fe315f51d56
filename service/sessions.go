package service

import (
	"context"
	"sort"

	"github.com/tuft-go/tuft/telemetry"
)

// CreateSessionInput is what create_session carries.
type CreateSessionInput struct {
	Tags         []string
	UserMetadata map[string]any
	SDKVersion   string
	ProjectID    string
}

// CreateSession opens a client session for tenant.
func (s *Service) CreateSession(ctx context.Context, tenant string, in CreateSessionInput) (*Session, error) {
	now := s.now()
	se := &Session{
		ID: newID("sess_"), Owner: s.self, Tenant: tenant, Tags: in.Tags, UserMetadata: in.UserMetadata,
		SDKVersion: in.SDKVersion, ProjectID: in.ProjectID, CreatedAt: now, LastHeartbeat: now,
	}
	if err := putJSON(ctx, s.st, keySession+se.ID, se); err != nil {
		return nil, classify(err)
	}
	s.mu.Lock()
	s.sessions[se.ID] = se
	s.mu.Unlock()
	s.log.InfoContext(telemetry.WithKeys(ctx, telemetry.Keys{SessionID: se.ID}), "session created",
		"tenant", tenant, "sdk_version", in.SDKVersion)
	c := *se
	return &c, nil
}

// ownedSession returns the tenant's session (callers hold s.mu).
func (s *Service) ownedSession(tenant, id string) (*Session, error) {
	se, ok := s.sessions[id]
	if !ok || se.Tenant != tenant {
		if err := s.elsewhere(keySession+id, tenant); err != nil {
			return nil, err
		}
		return nil, notFoundf("session %q not found", id)
	}
	return se, nil
}

// liveSession is ownedSession that also refuses expired sessions.
func (s *Service) liveSession(tenant, id string) (*Session, error) {
	se, err := s.ownedSession(tenant, id)
	if err != nil {
		return nil, err
	}
	if se.Expired {
		return nil, notFoundf("session %q expired: no heartbeat for more than %s; create a new client", id, s.cfg.HeartbeatTimeout())
	}
	return se, nil
}

// Heartbeat keeps a session alive.
func (s *Service) Heartbeat(ctx context.Context, tenant, id string) error {
	s.mu.Lock()
	se, err := s.liveSession(tenant, id)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	se.LastHeartbeat = s.now()
	c := *se
	s.mu.Unlock()
	return classify(putJSON(ctx, s.st, keySession+c.ID, &c))
}

// ListSessions returns the tenant's session ids, newest first.
func (s *Service) ListSessions(tenant string, limit, offset int) []string {
	s.mu.Lock()
	var all []*Session
	for _, se := range s.sessions {
		if se.Tenant == tenant {
			all = append(all, se)
		}
	}
	foreignRecords(s, keySession, tenant, func(se *Session) { all = append(all, se) })
	s.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].CreatedAt.After(all[j].CreatedAt) })
	ids := make([]string, 0, len(all))
	for _, se := range page(all, limit, offset) {
		ids = append(ids, se.ID)
	}
	return ids
}

// SessionInfo lists a session's training runs and sampling sessions.
func (s *Service) SessionInfo(tenant, id string) (runs, samplers []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.ownedSession(tenant, id); err != nil {
		return nil, nil, err
	}
	for _, r := range s.runs {
		if r.SessionID == id {
			runs = append(runs, r.ID)
		}
	}
	for _, sm := range s.samplers {
		if sm.SessionID == id {
			samplers = append(samplers, sm.ID)
		}
	}
	sort.Strings(runs)
	sort.Strings(samplers)
	return runs, samplers, nil
}

// SetSessionProject records a session's project id.
func (s *Service) SetSessionProject(ctx context.Context, tenant, id, project string) error {
	s.mu.Lock()
	se, err := s.ownedSession(tenant, id)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	se.ProjectID = project
	c := *se
	s.mu.Unlock()
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
