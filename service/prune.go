package service

import (
	"context"
	"encoding/json"
	"time"

	"github.com/tuft-go/tuft/store"
)

// Finished and expired sessions (issue 22, finding 5). A session's record kept its
// metadata after its client finished it or it expired, in memory and in the store, and
// nothing counted it: 1,000 create/finish loops with 60 KB of metadata grew the heap by
// 95 MB and the store by 87 MB, all restored at every start. Now a session's metadata
// (tags, user_metadata, display name, project, SDK version, finish detail) counts
// against limits.max_metadata_bytes_per_tenant for as long as it is held, finished or
// not, and sessions.finished_retention_seconds after the session ended the reaper prunes
// it to a compact record: id, tenant, owner, times and finish reason, which is all the
// 410 (or the expiry 404) for a later operation on it needs. The pruned record replaces
// the full one in the store in one write, with the session's heartbeat key deleted.

// reasonSessionPruned labels a failed write of a pruned session's compact record.
const reasonSessionPruned = "session_pruned"

// endedAt is when a session finished or expired (ok false: it is open).
func (s *family) endedAt(se *Session) (time.Time, bool) {
	switch {
	case se.Finished != nil:
		return se.Finished.At, true
	case se.Expired:
		return se.LastHeartbeat.Add(s.cfg.HeartbeatTimeout()), true
	}
	return time.Time{}, false
}

// pruneSessions prunes the sessions that ended more than
// sessions.finished_retention_seconds before now and returns how many it pruned.
func (s *Service) pruneSessions(ctx context.Context, now time.Time) int {
	retention := s.cfg.FinishedRetention()
	var recs []Session
	s.lock(lkSessions)
	for se := range s.sessions.all() {
		if ended, ok := s.endedAt(se); ok && !se.Pruned && now.Sub(ended) > retention {
			compact(se)
			recs = append(recs, *se)
		}
	}
	s.unlock(lkSessions)
	for i := range recs {
		b, err := json.Marshal(&recs[i])
		if err == nil {
			err = s.st.Apply(ctx, []store.Op{{Key: keySession + recs[i].ID, Value: b}, {Key: keyHeartbeat + recs[i].ID}})
		}
		if err != nil {
			// Memory is pruned already; the store keeps the full record until the
			// next start prunes it again.
			s.writeFailed(ctx, reasonSessionPruned, err, "key", keySession+recs[i].ID)
		}
	}
	return len(recs)
}

// compact drops what a session holds beyond what the API answers for an ended one.
// Callers hold the sessions lock.
func compact(se *Session) {
	se.Tags, se.UserMetadata, se.Extra = nil, nil, nil
	se.DisplayName, se.ProjectID, se.SDKVersion = "", "", ""
	if se.Finished != nil {
		se.Finished = &SessionFinish{Reason: se.Finished.Reason, At: se.Finished.At}
	}
	se.Pruned = true
}
