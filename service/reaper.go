package service

import (
	"context"
	"fmt"
	"time"
)

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
// release their adapters, sessions ended more than sessions.finished_retention_seconds
// ago are pruned (prune.go), and checkpoints past their TTL are deleted; the first pass
// of an hour samples the tenants' storage (tokenusage.go). The background reaper calls
// it every few seconds.
func (s *Service) Reap(ctx context.Context) {
	now := s.now()
	s.sampleStorage(now)
	timeout := s.cfg.HeartbeatTimeout()
	var expired []*Session
	var expiredRecs []Session
	var ckpts []*Checkpoint
	s.lock(lkSessions | lkCkpts)
	for se := range s.sessions.all() {
		if !se.Expired && now.Sub(se.LastHeartbeat) > timeout {
			se.Expired = true
			expired = append(expired, se)
			expiredRecs = append(expiredRecs, *se)
		}
	}
	for c := range s.ckpts.all() {
		if c.ExpiresAt != nil && now.After(*c.ExpiresAt) {
			ckpts = append(ckpts, c)
		}
	}
	s.unlock(lkSessions | lkCkpts)
	s.polls.expire(now)
	for i, se := range expired {
		s.expireSession(ctx, se, &expiredRecs[i])
	}
	if n := s.pruneSessions(ctx, now); n > 0 {
		s.log.Info("ended sessions pruned to compact records", "count", n, "retention", s.cfg.FinishedRetention())
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
	for r := range s.runs.ofTenant(se.Tenant) {
		if r.SessionID == se.ID && r.State == RunReady {
			runs = append(runs, r)
		}
	}
	for sm := range s.samplers.ofTenant(se.Tenant) {
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
