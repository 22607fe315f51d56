package service

import (
	"fmt"
)

// Disk accounting (limits.max_disk_bytes_per_tenant). Walking every run directory of a
// tenant for each save made a copy_weights cost grow with the tenant's copies (issue 22,
// finding 7: 5 ms → 187 ms at 4,000). A run's directory size is walked once and then
// kept (quotaState.sizes) while nothing writes there; every path that writes or removes
// under a run directory says so (diskChanged), and the next check walks that directory
// alone again. A run that holds an adapter (creating or ready) is walked at each check,
// since its autosave and inflight target change under it; there are at most
// limits.max_runs_per_tenant of those. A copy's size is recorded as it is made, so a
// copy costs one walk of its source and none of the tenant's other runs.

// DiskUsage is the bytes tenant's runs hold under checkpoint_dir: checkpoints (exports
// and copies included), sampler weights, autosaves and inflight targets.
func (s *Service) DiskUsage(tenant string) int64 {
	type dir struct {
		run  string
		live bool
	}
	var dirs []dir
	s.lock(lkRuns)
	for r := range s.runs.ofTenant(tenant) {
		if r.Tenant == tenant {
			dirs = append(dirs, dir{r.ID, holdsAdapter(r)})
		}
	}
	s.unlock(lkRuns)
	var n int64
	for _, d := range dirs {
		if !d.live {
			s.quota.mu.Lock()
			size, ok := s.quota.sizes[d.run]
			gen := s.quota.gen[d.run]
			s.quota.mu.Unlock()
			if ok {
				n += size
				continue
			}
			size = dirSize(s.ckpts.layout().runDir(d.run)) // outside the locks
			s.knownSize(d.run, gen, size)
			n += size
			continue
		}
		n += dirSize(s.ckpts.layout().runDir(d.run))
	}
	return n
}

// knownSize keeps size as run's directory size, unless the directory changed since gen
// was read (a walk that may have missed the change).
func (s *Service) knownSize(run string, gen, size int64) {
	s.quota.mu.Lock()
	defer s.quota.mu.Unlock()
	if s.quota.gen[run] != gen {
		return
	}
	if s.quota.sizes == nil {
		s.quota.sizes = map[string]int64{}
	}
	s.quota.sizes[run] = size
}

// diskChanged forgets run's known directory size: something was written or removed there.
func (s *Service) diskChanged(run string) {
	s.quota.mu.Lock()
	defer s.quota.mu.Unlock()
	delete(s.quota.sizes, run)
	if s.quota.gen == nil {
		s.quota.gen = map[string]int64{}
	}
	s.quota.gen[run]++
}

// reserveDisk reserves est bytes of tenant's limits.max_disk_bytes_per_tenant for a
// save (what names it) about to be written under run's directory, or refuses it (403)
// before anything is written. release returns the reservation once the files are
// written (or not), and marks run's directory as changed.
func (s *Service) reserveDisk(tenant, run string, est int64, what string) (release func(), err error) {
	used := s.DiskUsage(tenant)
	max := s.cfg.Limits.MaxDiskBytesPerTenant
	s.quota.mu.Lock()
	defer s.quota.mu.Unlock()
	res := s.quota.reserved[tenant]
	if used+res+est > max {
		return nil, &Error{Kind: KindForbidden, Limit: "limits.max_disk_bytes_per_tenant", Msg: fmt.Sprintf("%s needs up to %d bytes on disk; tenant %s holds %d (%d more being written) of limits.max_disk_bytes_per_tenant (%d): "+
			"delete checkpoints you no longer need (nothing was written)", what, est, tenant, used, res, max)}
	}
	if s.quota.reserved == nil {
		s.quota.reserved = map[string]int64{}
	}
	s.quota.reserved[tenant] = res + est
	return func() {
		if run != "" {
			s.diskChanged(run)
		}
		s.quota.mu.Lock()
		defer s.quota.mu.Unlock()
		if s.quota.reserved[tenant] -= est; s.quota.reserved[tenant] <= 0 {
			delete(s.quota.reserved, tenant)
		}
	}, nil
}

// checkDisk is reserveDisk's check alone, for refusing a save when it is submitted
// rather than when it runs.
func (s *Service) checkDisk(tenant string, est int64, what string) error {
	release, err := s.reserveDisk(tenant, "", est, what)
	if err == nil {
		release()
	}
	return err
}
