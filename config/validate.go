package config

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
)

var (
	hexSHA256  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	namespace  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	deviceName = regexp.MustCompile(`^(auto|cpu|cuda(:[0-9]+)?)$`)
)

// Validate reports every bad value, each by its key path. Each section checks its own
// keys (its validate method, given the section's path); the checks that join sections
// (remote models and workers, Redis for replicas and discovery) are here.
func (c Config) Validate() error {
	v := &validator{errs: new([]error)}
	c.Server.validate(v.at("server"))
	if len(c.Models) == 0 {
		v.at("models").bad("", "at least one model is required")
	}
	seen := map[string]bool{}
	for i, m := range c.Models {
		mv := v.at(fmt.Sprintf("models[%d]", i))
		if m.Name != "" && seen[m.Name] {
			mv.bad("name", "%q is listed twice", m.Name)
		}
		seen[m.Name] = true
		m.validate(mv)
	}
	c.Workers.validate(v.at("workers"))
	c.Worker.validate(v.at("worker"))
	c.Auth.validate(v.at("auth"))
	c.Persistence.validate(v.at("persistence"))
	c.Sessions.validate(v.at("sessions"))
	c.Console.validate(v.at("console"))
	c.Limits.validate(v.at("limits"))
	c.Engine.validate(v.at("engine"))
	c.Inference.validate(v.at("inference"))
	c.Billing.validate(v.at("billing"))
	c.validateAcross(v)
	if err := c.Telemetry.Validate(); err != nil {
		*v.errs = append(*v.errs, err)
	}
	return errors.Join(*v.errs...)
}

// validator collects the errors of one Validate, each prefixed by its section's path.
type validator struct {
	path string
	errs *[]error
}

// at is the validator of the section under key.
func (v *validator) at(key string) *validator {
	return &validator{path: v.key(key), errs: v.errs}
}

func (v *validator) key(k string) string {
	switch {
	case k == "":
		return v.path
	case v.path == "":
		return k
	}
	return v.path + "." + k
}

// bad records key (relative to the section; "" for the section itself) and its problem.
func (v *validator) bad(key, format string, args ...any) {
	*v.errs = append(*v.errs, fmt.Errorf("%s: %s", v.key(key), fmt.Sprintf(format, args...)))
}

// secs checks a Seconds key. Every one becomes a time.Duration, which holds at most ~292
// years: each is bounded so none can overflow into the past (NaN fails too).
func (v *validator) secs(key string, s Seconds, lo, hi float64) {
	if f := float64(s); !(f >= lo && f <= hi) {
		v.bad(key, "%g must be in [%g, %g] seconds", f, lo, hi)
	}
}

// atLeast checks an integer key's lower bound.
func (v *validator) atLeast(key string, n, lo int64) {
	if n < lo {
		v.bad(key, "%d must be at least %d", n, lo)
	}
}

// notNegative checks an integer key that may be zero.
func (v *validator) notNegative(key string, n int64) {
	if n < 0 {
		v.bad(key, "%d must not be negative", n)
	}
}

// validateAcross checks what joins sections.
func (c Config) validateAcross(v *validator) {
	if len(c.RemoteModels()) > 0 && len(c.Workers.Pinned) == 0 && !c.Workers.Discover {
		v.bad("workers", "models marked remote need workers.pinned addresses or workers.discover: true")
	}
	if c.Server.ReplicaID != "" && c.Persistence.Mode != "redis" {
		v.bad("server.replica_id", "replicas share state through Redis: set persistence.mode: redis")
	}
	if c.Workers.Discover && c.Persistence.Mode != "redis" {
		v.bad("workers.discover", "needs persistence.mode: redis (workers register in the shared store)")
	}
	if c.Worker.Register && c.Persistence.Mode != "redis" {
		v.bad("worker.register", "needs persistence.mode: redis (replicas read registrations from the shared store)")
	}
	for i, w := range c.Workers.Pinned {
		for _, m := range w.Models {
			if mc, ok := c.Model(m); !ok || !mc.Remote {
				v.bad(fmt.Sprintf("workers.pinned[%d].models", i), "%q is not a model with remote: true", m)
			}
		}
	}
}

func (s Server) validate(v *validator) {
	if s.Port < 0 || s.Port > 65535 {
		v.bad("port", "%d is not a TCP port", s.Port)
	}
	switch s.LogLevel {
	case "debug", "info", "warn", "warning", "error":
	default:
		v.bad("log_level", "%q is not one of debug, info, warn, error", s.LogLevel)
	}
	if s.LongPollSeconds <= 0 || s.LongPollSeconds > 40 {
		v.bad("long_poll_seconds", "%g must be in (0, 40]: the Tinker SDK times out a poll after 45 s", float64(s.LongPollSeconds))
	}
	v.secs("shutdown_timeout_seconds", s.ShutdownTimeoutSeconds, 0.001, 86400)
	v.secs("read_header_timeout_seconds", s.ReadHeaderTimeoutSeconds, 0.1, 3600)
	v.secs("read_body_timeout_seconds", s.ReadBodyTimeoutSeconds, 0.1, 86400)
	v.secs("idle_timeout_seconds", s.IdleTimeoutSeconds, 0.1, 86400)
	if s.MaxConnections < 16 {
		v.bad("max_connections", "%d must be at least 16", s.MaxConnections)
	}
	v.atLeast("max_connections_per_address", int64(s.MaxConnectionsPerAddress), 1)
	if s.OperationWorkers < 1 || s.OperationWorkers > 1024 {
		v.bad("operation_workers", "%d must be in [1, 1024]", s.OperationWorkers)
	}
	if u := s.UnauthenticatedIdleTimeoutSeconds; !(u >= 0.1 && u <= s.IdleTimeoutSeconds) {
		v.bad("unauthenticated_idle_timeout_seconds", "%g must be in [0.1, server.idle_timeout_seconds = %g] seconds", float64(u), float64(s.IdleTimeoutSeconds))
	}
	if s.ReplicaID != "" && !namespace.MatchString(s.ReplicaID) {
		v.bad("replica_id", "%q must be 1-64 letters, digits, '.', '_' or '-'", s.ReplicaID)
	}
}

func (m Model) validate(v *validator) {
	if m.Name == "" {
		v.bad("name", "is required")
	}
	switch {
	case m.Remote && (m.Path != "" || m.Preset != ""):
		v.bad("", "is remote (hosted by workers); path and preset belong in the workers' configuration")
	case m.Remote:
	case m.Path == "" && m.Preset == "":
		v.bad("", "needs either path (a HuggingFace-layout directory or a .gguf file) or preset")
	case m.Path != "" && m.Preset != "":
		v.bad("", "has both path and preset; choose one")
	}
	v.notNegative("max_context_length", int64(m.MaxContextLength))
	if m.MaxLoraRank < 1 || m.MaxLoraRank > 1024 {
		v.bad("max_lora_rank", "%d must be in [1, 1024]", m.MaxLoraRank)
	}
	if m.LoraAlphaRatio <= 0 {
		v.bad("lora_alpha_ratio", "%g must be positive", m.LoraAlphaRatio)
	}
}

func (w Workers) validate(v *validator) {
	for i, p := range w.Pinned {
		if !strings.Contains(p.Address, ":") {
			v.bad(fmt.Sprintf("pinned[%d].address", i), "%q must be host:port", p.Address)
		}
	}
	v.secs("call_timeout_seconds", w.CallTimeoutSeconds, 0, 30*86400)
	v.secs("start_timeout_seconds", w.StartTimeoutSeconds, 0, 30*86400)
	v.secs("check_seconds", w.CheckSeconds, 0, 30*86400)
	if (w.TLS.CertFile == "") != (w.TLS.KeyFile == "") {
		v.bad("tls", "cert_file and key_file go together")
	}
}

func (w Worker) validate(v *validator) {
	v.secs("heartbeat_seconds", w.HeartbeatSeconds, 0, 30*86400)
	if (w.TLS.CertFile == "") != (w.TLS.KeyFile == "") {
		v.bad("tls", "cert_file and key_file go together")
	}
	if w.TLS.ClientCAFile != "" && w.TLS.CertFile == "" {
		v.bad("tls.client_ca_file", "mutual TLS needs the worker's own cert_file and key_file")
	}
}

func (a Auth) validate(v *validator) {
	for i, k := range a.APIKeys {
		kv := v.at(fmt.Sprintf("api_keys[%d]", i))
		if !tenantName.MatchString(k.Tenant) {
			kv.bad("tenant", "%q must be 1-64 letters, digits, '.', '_' or '-'", k.Tenant)
		}
		if !hexSHA256.MatchString(k.KeySHA256) {
			kv.bad("key_sha256", "must be 64 lower-case hex digits (sha256 of the key; `tuft key hash` prints it)")
		}
		if a.OperatorKeySHA256 != "" && k.KeySHA256 == a.OperatorKeySHA256 {
			kv.bad("key_sha256", "is also auth.operator_key_sha256: the operator key must not be a tenant's key")
		}
	}
	if a.OperatorKeySHA256 != "" && !hexSHA256.MatchString(a.OperatorKeySHA256) {
		v.bad("operator_key_sha256", "must be empty or 64 lower-case hex digits (sha256 of the key; `tuft key hash` prints it)")
	}
}

func (b Billing) validate(v *validator) {
	if b.UsageRetentionDays < 1 || b.UsageRetentionDays > 3660 {
		v.bad("usage_retention_days", "%d must be in [1, 3660]", b.UsageRetentionDays)
	}
	for _, p := range []struct {
		key string
		usd float64
	}{{"usd_per_million_training_tokens", b.USDPerMillionTrainingTokens}, {"usd_per_million_prefill_tokens", b.USDPerMillionPrefillTokens},
		{"usd_per_million_cached_prefill_tokens", b.USDPerMillionCachedPrefillTokens},
		{"usd_per_million_sample_tokens", b.USDPerMillionSampleTokens}, {"usd_per_gb_month_storage", b.USDPerGBMonthStorage}} {
		if !(p.usd >= 0) || math.IsInf(p.usd, 0) {
			v.bad(p.key, "%g must be a finite price ≥ 0 (US dollars)", p.usd)
		}
	}
}

func (p Persistence) validate(v *validator) {
	switch p.Mode {
	case "embedded":
		if p.Path == "" {
			v.bad("path", "is required in embedded mode")
		}
	case "redis":
		if !strings.HasPrefix(p.RedisURL, "redis://") && !strings.HasPrefix(p.RedisURL, "rediss://") && !strings.HasPrefix(p.RedisURL, "unix://") {
			v.bad("redis_url", "%q must be a redis://, rediss:// or unix:// URL", redact(p.RedisURL))
		}
	case "memory":
	default:
		v.bad("mode", "%q is not one of embedded, redis, memory", p.Mode)
	}
	if !namespace.MatchString(p.Namespace) {
		v.bad("namespace", "%q must be 1-64 letters, digits, '.', '_' or '-'", p.Namespace)
	}
	if p.FutureTTLSeconds < 60 || p.FutureTTLSeconds > MaxTTLSeconds {
		v.bad("future_ttl_seconds", "%d must be in [60, %d]", p.FutureTTLSeconds, MaxTTLSeconds)
	}
}

func (s Sessions) validate(v *validator) {
	if h := float64(s.HeartbeatTimeoutSeconds); !(h >= 15 && h <= MaxTTLSeconds) {
		v.bad("heartbeat_timeout_seconds", "%g must be in [15, %d] (the SDK heartbeats every 10 s)", h, MaxTTLSeconds)
	}
	if r := float64(s.FinishedRetentionSeconds); !(r > 0 && r <= MaxTTLSeconds) {
		v.bad("finished_retention_seconds", "%g must be in (0, %d]", r, MaxTTLSeconds)
	}
	if s.SeqGapTimeoutSeconds <= 0 {
		v.bad("seq_gap_timeout_seconds", "%g must be positive", float64(s.SeqGapTimeoutSeconds))
	}
}

func (l Limits) validate(v *validator) {
	v.atLeast("max_queued_per_tenant", int64(l.MaxQueuedPerTenant), 1)
	if l.MaxRequestBytes < 1<<10 {
		v.bad("max_request_bytes", "%d must be at least 1024", l.MaxRequestBytes)
	}
	for _, q := range []struct {
		key string
		n   int64
	}{{"max_tokens_per_batch", int64(l.MaxTokensPerBatch)}, {"max_sample_tokens", int64(l.MaxSampleTokens)}, {"max_num_samples", int64(l.MaxNumSamples)},
		{"max_concurrent_requests_per_tenant", int64(l.MaxConcurrentRequestsPerTenant)},
		{"max_sessions_per_tenant", int64(l.MaxSessionsPerTenant)}, {"max_runs_per_tenant", int64(l.MaxRunsPerTenant)}, {"max_adapter_bytes_per_tenant", l.MaxAdapterBytesPerTenant},
		{"max_samplers_per_tenant", int64(l.MaxSamplersPerTenant)}, {"max_ephemeral_samplers_per_run", int64(l.MaxEphemeralSamplersPerRun)},
		{"max_exports_per_tenant", int64(l.MaxExportsPerTenant)}, {"max_metadata_bytes", int64(l.MaxMetadataBytes)},
		{"max_metadata_bytes_per_tenant", l.MaxMetadataBytesPerTenant}, {"max_disk_bytes_per_tenant", l.MaxDiskBytesPerTenant},
		{"max_chat_messages", int64(l.MaxChatMessages)}, {"max_chat_bytes", l.MaxChatBytes},
		{"max_sample_output_cells", l.MaxSampleOutputCells}, {"max_sample_output_bytes", l.MaxSampleOutputBytes},
		{"max_running_per_tenant", int64(l.MaxRunningPerTenant)}, {"max_client_events", int64(l.MaxClientEvents)},
		{"max_completion_events_per_sampler", int64(l.MaxCompletionEventsPerSampler)}, {"max_retrieved_request_ids", int64(l.MaxRetrievedRequestIDs)},
		{"max_metric_points_per_run", int64(l.MaxMetricPointsPerRun)}, {"max_metric_streams_per_tenant", int64(l.MaxMetricStreamsPerTenant)},
		{"max_spans_per_session", int64(l.MaxSpansPerSession)}, {"max_traced_sessions_per_tenant", int64(l.MaxTracedSessionsPerTenant)},
		{"max_audit_events_per_tenant_per_day", int64(l.MaxAuditEventsPerTenantPerDay)}} {
		v.atLeast(q.key, q.n, 1)
	}
	if l.MaxConcurrentRequests < l.MaxConcurrentRequestsPerTenant {
		v.bad("max_concurrent_requests", "%d must be at least limits.max_concurrent_requests_per_tenant (%d)", l.MaxConcurrentRequests, l.MaxConcurrentRequestsPerTenant)
	}
	if l.MaxBodyBytesInFlightPerTenant < l.MaxRequestBytes {
		v.bad("max_body_bytes_in_flight_per_tenant", "%d must be at least limits.max_request_bytes (%d): one request must fit", l.MaxBodyBytesInFlightPerTenant, l.MaxRequestBytes)
	}
	if l.MaxBodyBytesInFlight < l.MaxBodyBytesInFlightPerTenant {
		v.bad("max_body_bytes_in_flight", "%d must be at least limits.max_body_bytes_in_flight_per_tenant (%d)", l.MaxBodyBytesInFlight, l.MaxBodyBytesInFlightPerTenant)
	}
	v.atLeast("max_decompression_ratio", int64(l.MaxDecompressionRatio), 2)
	if int64(l.MaxMetadataBytes) > l.MaxMetadataBytesPerTenant {
		v.bad("max_metadata_bytes_per_tenant", "%d must be at least limits.max_metadata_bytes (%d)", l.MaxMetadataBytesPerTenant, l.MaxMetadataBytes)
	}
	v.notNegative("max_stop_strings", int64(l.MaxStopStrings))
	v.notNegative("max_stop_string_bytes", int64(l.MaxStopStringBytes))
	if l.MaxTopKSampleLogprobs < 0 || l.MaxTopKSampleLogprobs > 100 {
		v.bad("max_topk_sample_logprobs", "%d must be in [0, 100]", l.MaxTopKSampleLogprobs)
	}
	v.notNegative("max_prompt_alt_tokens_k", int64(l.MaxPromptAltTokensK))
	v.notNegative("max_prompt_output_cells", int64(l.MaxPromptOutputCells))
	if t := float64(l.SampleTimeoutSeconds); !(t >= 1 && t <= MaxTTLSeconds) {
		v.bad("sample_timeout_seconds", "%g must be in [1, %d]", t, MaxTTLSeconds)
	}
	if t := float64(l.AuditRetentionSeconds); !(t >= 86400 && t <= MaxTTLSeconds) {
		v.bad("audit_retention_seconds", "%g must be in [86400, %d] (at least the one UTC day an audit query reads)", t, MaxTTLSeconds)
	}
	if t := float64(l.FutureTimeoutSeconds); !(t >= 1 && t <= MaxTTLSeconds) {
		v.bad("future_timeout_seconds", "%g must be in [1, %d]", t, MaxTTLSeconds)
	}
	if !(l.SampleBacklogFactor >= 1) || math.IsInf(l.SampleBacklogFactor, 0) {
		v.bad("sample_backlog_factor", "%g must be a finite number ≥ 1", l.SampleBacklogFactor)
	}
	v.atLeast("max_client_event_bytes", int64(l.MaxClientEventBytes), 64)
}

func (e Engine) validate(v *validator) {
	if !deviceName.MatchString(e.Device) {
		v.bad("device", "%q is not one of auto, cpu, cuda, cuda:N", e.Device)
	}
	v.notNegative("cuda_memory_limit_bytes", e.CUDAMemoryLimitBytes)
	v.notNegative("cpu_prepack_bytes", e.CPUPrepackBytes)
	if e.CUDAGraphs {
		v.atLeast("cuda_graphs_max", int64(e.CUDAGraphsMax), 1)
	}
	switch e.CPUWeightFormat {
	case "f32", "bf16", "q8_0", "q4_1", "q4_k": // engine.ParseWeightFormat's names
	default:
		v.bad("cpu_weight_format", "%q is not one of f32, bf16, q8_0, q4_1, q4_k", e.CPUWeightFormat)
	}
	e.Scheduler.validate(v.at("scheduler"))
}

func (s Scheduler) validate(v *validator) {
	v.atLeast("max_batch_size", int64(s.MaxBatchSize), 1)
	v.atLeast("step_token_budget", int64(s.StepTokenBudget), 1)
	v.atLeast("prefill_chunk_tokens", int64(s.PrefillChunkTokens), 1)
	if s.KVCacheBytes < 1<<20 {
		v.bad("kv_cache_bytes", "%d must be at least 1 MiB", s.KVCacheBytes)
	}
	v.notNegative("prefix_cache_entries", int64(s.PrefixCacheEntries))
	v.atLeast("train_pack_tokens", int64(s.TrainPackTokens), 1)
	if !(s.TrainShare > 0 && s.TrainShare < 1) {
		v.bad("train_share", "%g must be in (0, 1)", s.TrainShare)
	}
}

func (i Inference) validate(v *validator) {
	v.atLeast("max_adapters", int64(i.MaxAdapters), 1)
}

func redact(u string) string {
	if i := strings.Index(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j > 0 && j < i {
			return u[:j+3] + "***" + u[i:]
		}
	}
	return u
}
