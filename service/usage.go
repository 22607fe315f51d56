package service

import (
	"sort"
)

// The storage report (GET /billing/usage/checkpoints/current, SDK >= 0.32): the
// tenant's checkpoints (training, sampler and external, copies included) counted and
// measured on disk at the time of the request, grouped by project (a run's session's
// project, or a copy's project; the tenant's name when none was set). TuFT bills
// nothing: no rate and no cost are reported. Autosaves, inflight targets and the
// weights of ephemeral sampling sessions are not checkpoints and are not counted.

// UsageGroup is one project's checkpoint storage.
type UsageGroup struct {
	ProjectID string
	Count     int
	Bytes     int64
}

// CheckpointUsage reports the tenant's checkpoint storage per project; project, when
// set, keeps that project's only.
func (s *Service) CheckpointUsage(tenant, project string) []UsageGroup {
	type item struct {
		project string
		dir     string
	}
	var items []item
	s.lock(lkSessions | lkRuns | lkCkpts)
	for c := range s.ckpts.ofTenant(tenant) {
		p := tenant
		if r, ok := s.runs.get(c.RunID); ok {
			if r.ProjectID != "" {
				p = r.ProjectID
			} else if se, ok := s.sessions.get(r.SessionID); ok {
				p = ProjectOf(se)
			}
		}
		if project == "" || p == project {
			items = append(items, item{p, c.Dir})
		}
	}
	s.unlock(lkSessions | lkRuns | lkCkpts)
	groups := map[string]*UsageGroup{}
	for _, it := range items { // disk reads outside the lock
		g := groups[it.project]
		if g == nil {
			g = &UsageGroup{ProjectID: it.project}
			groups[it.project] = g
		}
		g.Count++
		g.Bytes += dirSize(it.dir)
	}
	out := make([]UsageGroup, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ProjectID < out[j].ProjectID })
	return out
}
