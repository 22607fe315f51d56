package service

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Session search (POST /sessions/search, SDK >= 0.36, experimental), over the tenant's
// own sessions: a tenant is the only owner TuFT knows of, and no tenant may list another's.
// So the owner "own" and "accessible" are the caller's sessions, and "user" matches
// those of the listed owners that are the caller (its tenant name); a project the caller
// has no session in is an error (the SDK's "a project the caller cannot list").

// SearchQuery is a session search.
type SearchQuery struct {
	SessionID    string            // exact; with DisplayName, either matches
	DisplayName  string            // case-insensitive; every word must appear
	ProjectIDs   []string          // nil: every project
	UserMetadata map[string]string // every pair must match
	OwnerType    string            // own | accessible | user
	OwnerURNs    []string          // for user
	Statuses     []StatusQuery     // nil: every status
	Limit        int               // 1-200
	After        *SearchCursor     // the previous page's last session
}

// StatusQuery matches a session status (SDK's SessionStatusQuery).
type StatusQuery struct {
	Type    string   // active | cancelled | failed | client_finished
	Reasons []string // client_finished only; empty: any
}

// SearchCursor is the last session of a page: (created_at, id), newest first.
type SearchCursor struct {
	CreatedAt time.Time
	SessionID string
}

// SessionSummary is one search result.
type SessionSummary struct {
	Session
	CheckpointsCount int
	CheckpointBytes  int64
}

// Session status types of the SDK's SessionStatus.
const (
	StatusActive         = "active"
	StatusCancelled      = "cancelled"
	StatusFailed         = "failed"
	StatusClientFinished = "client_finished"
)

// StatusOf is a session's status type: client_finished, cancelled (expired without
// heartbeats) or active. TuFT fails no session on its own, so none is failed.
func StatusOf(se *Session) string {
	switch {
	case se.Finished != nil:
		return StatusClientFinished
	case se.Expired:
		return StatusCancelled
	}
	return StatusActive
}

// SearchSessions returns one page of the tenant's sessions matching q, newest first, and
// the cursor of the next page (nil on the last).
func (s *Service) SearchSessions(ctx context.Context, tenant string, q SearchQuery) ([]SessionSummary, *SearchCursor, error) {
	if q.Limit < 1 || q.Limit > 200 {
		return nil, nil, invalidf("limit %d must be in [1, 200]", q.Limit)
	}
	switch q.OwnerType {
	case "", "own", "accessible":
	case "user":
		if len(q.OwnerURNs) < 1 || len(q.OwnerURNs) > 10 {
			return nil, nil, invalidf("owner.owner_urns has %d entries: give 1 to 10", len(q.OwnerURNs))
		}
	default:
		return nil, nil, invalidf("owner.type %q must be own, accessible or user", q.OwnerType)
	}
	for i, st := range q.Statuses {
		switch st.Type {
		case StatusActive, StatusCancelled, StatusFailed:
			if len(st.Reasons) > 0 {
				return nil, nil, invalidf("statuses[%d].reasons apply to client_finished only", i)
			}
		case StatusClientFinished:
			for _, r := range st.Reasons {
				if r != FinishSuccess && r != FinishErrored && r != FinishInterrupted {
					return nil, nil, invalidf("statuses[%d].reasons: %q must be success, errored or interrupted", i, r)
				}
			}
		default:
			return nil, nil, invalidf("statuses[%d].type %q must be active, cancelled, failed or client_finished", i, st.Type)
		}
	}
	words := strings.Fields(strings.ToLower(q.DisplayName))
	var foreign []*Session
	foreignRecords(ctx, &s.replicas, keySession, tenant, func(se *Session) { foreign = append(foreign, se) }) // store reads: before the controllers' locks (s.lock)
	s.lock(lkSessions | lkRuns | lkCkpts)
	defer s.unlock(lkSessions | lkRuns | lkCkpts)
	all := append([]*Session(nil), foreign...)
	projects := map[string]bool{tenant: true}
	for se := range s.sessions.ofTenant(tenant) {
		if se.Tenant == tenant {
			all = append(all, se)
		}
	}
	for _, se := range all {
		projects[ProjectOf(se)] = true
	}
	for _, p := range q.ProjectIDs {
		if !projects[p] {
			return nil, nil, notFoundf("project %q not found among your sessions' projects", p)
		}
	}
	match := func(se *Session) bool {
		if q.OwnerType == "user" && !contains(q.OwnerURNs, tenant) {
			return false
		}
		if q.SessionID != "" || len(words) > 0 {
			byID := q.SessionID != "" && se.ID == q.SessionID
			byName := len(words) > 0 && allWords(strings.ToLower(se.DisplayName), words)
			if !byID && !byName {
				return false
			}
		}
		if q.ProjectIDs != nil && !contains(q.ProjectIDs, ProjectOf(se)) {
			return false
		}
		var md map[string]any
		if len(q.UserMetadata) > 0 {
			md = se.UserMetadata.Map()
		}
		for k, v := range q.UserMetadata {
			got, ok := md[k]
			if !ok || metadataString(got) != v {
				return false
			}
		}
		if q.Statuses != nil {
			ok := false
			for _, st := range q.Statuses {
				if st.Type == StatusOf(se) && (st.Type != StatusClientFinished || len(st.Reasons) == 0 || contains(st.Reasons, se.Finished.Reason)) {
					ok = true
				}
			}
			if !ok {
				return false
			}
		}
		return true
	}
	var hits []*Session
	for _, se := range all {
		if match(se) {
			hits = append(hits, se)
		}
	}
	newer := func(a, b *Session) bool {
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.After(b.CreatedAt)
		}
		return a.ID > b.ID
	}
	sort.Slice(hits, func(i, j int) bool { return newer(hits[i], hits[j]) })
	if q.After != nil {
		pivot := &Session{ID: q.After.SessionID, CreatedAt: q.After.CreatedAt}
		i := sort.Search(len(hits), func(i int) bool { return newer(pivot, hits[i]) })
		hits = hits[i:]
	}
	var next *SearchCursor
	if len(hits) > q.Limit {
		hits = hits[:q.Limit]
		last := hits[len(hits)-1]
		next = &SearchCursor{CreatedAt: last.CreatedAt, SessionID: last.ID}
	}
	out := make([]SessionSummary, 0, len(hits))
	for _, se := range hits {
		sum := SessionSummary{Session: *se}
		for r := range s.runs.ofTenant(se.Tenant) {
			if r.SessionID != se.ID {
				continue
			}
			for c := range s.ckpts.inRun(r.ID) {
				sum.CheckpointsCount++
				sum.CheckpointBytes += c.SizeBytes
			}
		}
		out = append(out, sum)
	}
	return out, next, nil
}

// ProjectOf is a session's project: the one it was given, else the tenant's default.
func ProjectOf(se *Session) string {
	if se.ProjectID != "" {
		return se.ProjectID
	}
	return se.Tenant
}

// metadataString is a user_metadata value as the SDK's dict[str, str] shows it: a
// string as it is, another JSON value in its JSON form.
func metadataString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func allWords(name string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(name, w) {
			return false
		}
	}
	return true
}
