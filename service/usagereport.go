package service

import (
	"context"
	"sort"
	"time"
)

// The reports built on the token usage (tokenusage.go) and the quotas (quota.go): a
// tenant's daily usage with what it holds against each quota (GET /api/v1/usage), its
// billing events (GET /api/v1/billing/usage/events), and the operator's overview of
// every tenant (GET /api/v1/admin/overview).

// DayUsage is one UTC day's tokens.
type DayUsage struct {
	Day             string // 2006-01-02
	TokensTrained   int64
	TokensSampled   int64
	TokensPrefilled int64 // full-rate and cached
}

// Quota is what a tenant holds against one per-tenant limit.
type Quota struct {
	Key   string // the config key, e.g. limits.max_runs_per_tenant
	Used  int64
	Limit int64
	Unit  string
}

// UsageReport is a tenant's usage over its last days.
type UsageReport struct {
	Days               []DayUsage // oldest first, today last
	AdapterMemoryBytes int64
	DiskBytes          int64
	Quotas             []Quota
}

// TenantUsage reports tenant's tokens per UTC day over the last days (today included; 0:
// the default),
// the memory its live adapters take, its bytes on disk and its use of every per-tenant
// quota the service counts (the HTTP layer adds its own: requests, bodies, streams).
func (s *Service) TenantUsage(ctx context.Context, tenant string, days int) (UsageReport, error) {
	if days == 0 { // not asked: a month, or the whole retention when shorter
		days = min(30, s.cfg.Billing.UsageRetentionDays)
	}
	if max := s.cfg.Billing.UsageRetentionDays; days < 1 || days > max {
		return UsageReport{}, invalidf("days %d must be in [1, %d] (billing.usage_retention_days)", days, max)
	}
	now := s.now().UTC()
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	from := today.AddDate(0, 0, -(days - 1))
	buckets, err := s.UsageBuckets(ctx, tenant, from, today.AddDate(0, 0, 1))
	if err != nil {
		return UsageReport{}, err
	}
	rep := UsageReport{Days: make([]DayUsage, days)}
	for i := range rep.Days {
		rep.Days[i].Day = from.AddDate(0, 0, i).Format(time.DateOnly)
	}
	for _, b := range buckets {
		d := &rep.Days[int(b.Hour.Sub(from)/(24*time.Hour))]
		switch b.Kind {
		case UsageTraining:
			d.TokensTrained += b.Tokens
		case UsageSample:
			d.TokensSampled += b.Tokens
		case UsagePrefill, UsagePrefillCached:
			d.TokensPrefilled += b.Tokens
		}
	}
	rep.AdapterMemoryBytes, rep.Quotas = s.quotaUse(tenant)
	rep.DiskBytes = s.DiskUsage(tenant)
	lim := s.cfg.Limits
	rep.Quotas = append(rep.Quotas, Quota{"limits.max_disk_bytes_per_tenant", rep.DiskBytes, lim.MaxDiskBytesPerTenant, "bytes"},
		Quota{"limits.max_queued_per_tenant", int64(s.fut.OpenOperations()[tenant]), int64(lim.MaxQueuedPerTenant), "operations"},
		Quota{"limits.max_exports_per_tenant", int64(s.exports.running(tenant)), int64(lim.MaxExportsPerTenant), "exports"})
	return rep, nil
}

// quotaUse is the adapter memory of tenant's live runs and its use of the quotas on
// what it holds in memory (quota.go).
func (s *Service) quotaUse(tenant string) (adapterBytes int64, qs []Quota) {
	lim := s.cfg.Limits
	now := s.now()
	s.lock(quotaLocks | lkSamplers)
	runs, _ := s.countRuns(tenant, now)
	for r := range s.runs.ofTenant(tenant) {
		if r.Tenant == tenant && holdsAdapter(r) {
			adapterBytes += s.adapterBytes(r.BaseModel, r.Lora.engine())
		}
	}
	var sessions, samplers int64
	for se := range s.sessions.ofTenant(tenant) {
		if se.Tenant == tenant && se.Finished == nil && !se.Expired {
			sessions++
		}
	}
	for sm := range s.samplers.ofTenant(tenant) {
		if sm.Tenant == tenant && !sm.Closed {
			samplers++
		}
	}
	md, _ := s.tenantMetadata(tenant, now)
	s.unlock(quotaLocks | lkSamplers)
	return adapterBytes, []Quota{
		{"limits.max_runs_per_tenant", runs, int64(lim.MaxRunsPerTenant), "runs"},
		{"limits.max_adapter_bytes_per_tenant", adapterBytes, lim.MaxAdapterBytesPerTenant, "bytes"},
		{"limits.max_sessions_per_tenant", sessions, int64(lim.MaxSessionsPerTenant), "sessions"},
		{"limits.max_samplers_per_tenant", samplers, int64(lim.MaxSamplersPerTenant), "sampling sessions"},
		{"limits.max_metadata_bytes_per_tenant", md, lim.MaxMetadataBytesPerTenant, "bytes"},
	}
}

// BillingSession is what the billing events say of a session.
type BillingSession struct {
	ProjectID    string
	UserMetadata Metadata // nil when it has none, or it was pruned
}

// BillingEvents is tenant's usage buckets whose hour starts in [from, to), ordered by
// hour then descending tokens, with the sessions they name.
func (s *Service) BillingEvents(ctx context.Context, tenant string, from, to time.Time) ([]UsageBucket, map[string]BillingSession, error) {
	buckets, err := s.UsageBuckets(ctx, tenant, from, to)
	if err != nil {
		return nil, nil, err
	}
	sessions := map[string]BillingSession{}
	s.lock(lkSessions)
	for _, b := range buckets {
		if b.SessionID == "" {
			continue
		}
		bs := BillingSession{}
		if se, ok := s.sessions.get(b.SessionID); ok && se.Tenant == tenant {
			bs = BillingSession{ProjectID: ProjectOf(se), UserMetadata: se.UserMetadata}
		}
		sessions[b.SessionID] = bs
	}
	s.unlock(lkSessions)
	return buckets, sessions, nil
}

// TenantOverview is one tenant in the operator's overview.
type TenantOverview struct {
	Tenant string
	// QueuedOperations is its unfinished operations (queued or running).
	QueuedOperations int
	// RunsReady, RunsCorrupted count its runs by state; SessionsOpen its open sessions.
	RunsReady, RunsCorrupted, SessionsOpen int
}

// Overview is the operator's view: every tenant, and each base model's sampling backlog.
type Overview struct {
	Tenants []TenantOverview
	// Backlog is each base model's unfinished sampling weight, all tenants.
	Backlog map[string]int
}

// Overview reports every tenant's queue depth and records by state (the caller adds
// each one's usage, TenantUsage): the tenants of the configured keys, and any other that
// holds a record on this replica.
func (s *Service) Overview() Overview {
	seen := map[string]*TenantOverview{}
	tenant := func(t string) *TenantOverview {
		o := seen[t]
		if o == nil {
			o = &TenantOverview{Tenant: t}
			seen[t] = o
		}
		return o
	}
	for _, t := range s.keys {
		tenant(t)
	}
	s.lock(lkSessions | lkRuns)
	for se := range s.sessions.all() {
		o := tenant(se.Tenant)
		if se.Finished == nil && !se.Expired {
			o.SessionsOpen++
		}
	}
	for r := range s.runs.all() {
		o := tenant(r.Tenant)
		switch r.State {
		case RunReady:
			o.RunsReady++
		case RunCorrupted:
			o.RunsCorrupted++
		}
	}
	s.unlock(lkSessions | lkRuns)
	open := s.fut.OpenOperations()
	for t := range open {
		tenant(t)
	}
	out := Overview{Backlog: map[string]int{}}
	for _, o := range seen {
		o.QueuedOperations = open[o.Tenant]
		out.Tenants = append(out.Tenants, *o)
	}
	sort.Slice(out.Tenants, func(i, j int) bool { return out.Tenants[i].Tenant < out.Tenants[j].Tenant })
	for name := range s.models {
		total, _ := s.fut.Backlog(name)
		out.Backlog[name] = total
	}
	return out
}

// TokenRate is the price in US dollars per million tokens of a usage kind (the
// billing.usd_per_million_* keys).
func (s *Service) TokenRate(kind string) float64 {
	b := s.cfg.Billing
	switch kind {
	case UsagePrefill:
		return b.USDPerMillionPrefillTokens
	case UsagePrefillCached:
		return b.USDPerMillionCachedPrefillTokens
	case UsageSample:
		return b.USDPerMillionSampleTokens
	}
	return b.USDPerMillionTrainingTokens
}

// StorageRate is the price in US dollars of a gigabyte held for a month of 720 hours
// (billing.usd_per_gb_month_storage).
func (s *Service) StorageRate() float64 { return s.cfg.Billing.USDPerGBMonthStorage }
