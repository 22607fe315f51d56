package wire

import "time"

// The console's data (issue 27, docs/compatibility.md "Console data"): a run's metric
// history, the tenant's usage and quotas, the billing events the SDK's AdminClient
// reads, and the operator's overview.

// MetricPoint is one forward_backward's or optim_step's metrics in a run's history
// (GET /training_runs/{id}/metrics and its stream).
type MetricPoint struct {
	Seq     int64              `json:"seq"`
	Step    int64              `json:"step"`
	Op      string             `json:"op"`
	Time    string             `json:"time"` // RFC 3339 with nanoseconds, UTC
	Metrics map[string]float64 `json:"metrics"`
	// NonFinite names metrics that were NaN or infinite (JSON has no such number).
	NonFinite []string `json:"non_finite,omitempty"`
	SeqID     int64    `json:"seq_id"`
}

// RunMetricsResponse answers GET /training_runs/{id}/metrics.
type RunMetricsResponse struct {
	RunID     string        `json:"run_id"`
	Points    []MetricPoint `json:"points"`
	NextAfter int64         `json:"next_after"`
	Dropped   int64         `json:"dropped"`
	// Ended: the run is unloaded or corrupted; no point will follow.
	Ended bool `json:"ended"`
}

// UsageResponse answers GET /api/v1/usage: the tenant's tokens per UTC day, what it holds,
// and its use of every per-tenant quota (by config key).
type UsageResponse struct {
	Days               []UsageDay   `json:"days"`
	AdapterMemoryBytes int64        `json:"adapter_memory_bytes"`
	DiskBytes          int64        `json:"disk_bytes"`
	Quotas             []QuotaUsage `json:"quotas"`
}

// UsageDay is one UTC day's tokens.
type UsageDay struct {
	Day             string `json:"day"`
	TokensTrained   int64  `json:"tokens_trained"`
	TokensSampled   int64  `json:"tokens_sampled"`
	TokensPrefilled int64  `json:"tokens_prefilled"`
}

// QuotaUsage is one per-tenant limit: its config key, what the tenant uses, the limit.
type QuotaUsage struct {
	Key   string `json:"key"`
	Used  int64  `json:"used"`
	Limit int64  `json:"limit"`
	Unit  string `json:"unit"`
}

// BillingUsageResponse answers GET /api/v1/billing/usage/events (the SDK's
// BillingUsageResponse, read by AdminClient.get_billing_usage).
type BillingUsageResponse struct {
	Data            []BillingUsageEvent            `json:"data"`
	Sessions        map[string]BillingUsageSession `json:"sessions"`
	CostDataThrough *time.Time                     `json:"cost_data_through"`
}

// BillingUsageEvent is one hourly bucket of one kind of usage.
type BillingUsageEvent struct {
	BucketStart                      time.Time        `json:"bucket_start"`
	BucketEnd                        time.Time        `json:"bucket_end"`
	BaseModel                        *string          `json:"base_model"`
	UserID                           *string          `json:"user_id"`
	UserName                         *string          `json:"user_name"`
	SessionID                        *string          `json:"session_id"`
	ProjectID                        *string          `json:"project_id"`
	EstimatedCostUSD                 *float64         `json:"estimated_cost_usd"`
	EffectiveRateUSDPerMillionTokens *float64         `json:"effective_rate_usd_per_million_tokens"`
	EffectiveRateUSDPerGigabyteMonth *float64         `json:"effective_rate_usd_per_gigabyte_month"`
	EventInfo                        BillingEventInfo `json:"event_info"`
}

// BillingEventInfo is the SDK's BillingEventInfo union, discriminated on type:
// "training", "sampling_prefill" (with cached), "sampling_sample" carry token_count.
type BillingEventInfo struct {
	Type       string `json:"type"`
	Cached     *bool  `json:"cached,omitempty"`
	TokenCount int64  `json:"token_count"`
}

// BillingUsageSession is a session's attributes in a billing response.
type BillingUsageSession struct {
	UserMetadata map[string]string `json:"user_metadata"`
}

// AdminOverviewResponse answers GET /api/v1/admin/overview (the operator key only):
// every tenant's usage today, queue depth and health, and the server's.
type AdminOverviewResponse struct {
	Tenants []TenantOverview `json:"tenants"`
	Server  ServerOverview   `json:"server"`
}

// TenantOverview is one tenant in the operator's overview.
type TenantOverview struct {
	Tenant string `json:"tenant"`
	// Health is "ok", or "degraded" when a run is corrupted or a quota is 90% used
	// (Problems says which).
	Health           string        `json:"health"`
	Problems         []string      `json:"problems"`
	QueuedOperations int           `json:"queued_operations"`
	RequestsInFlight int           `json:"requests_in_flight"`
	MetricStreams    int           `json:"metric_streams"`
	RunsReady        int           `json:"runs_ready"`
	RunsCorrupted    int           `json:"runs_corrupted"`
	SessionsOpen     int           `json:"sessions_open"`
	Usage            UsageResponse `json:"usage"`
}

// ServerOverview is the server's side of the overview.
type ServerOverview struct {
	Status string `json:"status"`
	// SamplingBacklog is each base model's unfinished sampling weight (prompt plus
	// max_tokens positions), all tenants.
	SamplingBacklog map[string]int `json:"sampling_backlog"`
	Replica         string         `json:"replica,omitempty"`
}
