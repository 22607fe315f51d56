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

// Validate reports every bad value, each by its key path.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if c.Server.Port < 0 || c.Server.Port > 65535 {
		bad("server.port", "%d is not a TCP port", c.Server.Port)
	}
	switch c.Server.LogLevel {
	case "debug", "info", "warn", "warning", "error":
	default:
		bad("server.log_level", "%q is not one of debug, info, warn, error", c.Server.LogLevel)
	}
	if c.Server.LongPollSeconds <= 0 || c.Server.LongPollSeconds > 40 {
		bad("server.long_poll_seconds", "%g must be in (0, 40]: the Tinker SDK times out a poll after 45 s", c.Server.LongPollSeconds)
	}
	// Every seconds value becomes a time.Duration, which holds at most ~292 years: each
	// is bounded here so none can overflow into the past.
	secs := func(key string, v, lo, hi float64) {
		if !(v >= lo && v <= hi) { // also catches NaN
			bad(key, "%g must be in [%g, %g] seconds", v, lo, hi)
		}
	}
	secs("server.shutdown_timeout_seconds", c.Server.ShutdownTimeoutSeconds, 0.001, 86400)
	secs("server.read_header_timeout_seconds", c.Server.ReadHeaderTimeoutSeconds, 0.1, 3600)
	secs("server.read_body_timeout_seconds", c.Server.ReadBodyTimeoutSeconds, 0.1, 86400)
	secs("server.idle_timeout_seconds", c.Server.IdleTimeoutSeconds, 0.1, 86400)
	if c.Server.MaxConnections < 16 {
		bad("server.max_connections", "%d must be at least 16", c.Server.MaxConnections)
	}
	if c.Server.MaxConnectionsPerAddress < 1 {
		bad("server.max_connections_per_address", "%d must be at least 1", c.Server.MaxConnectionsPerAddress)
	}
	if v := c.Server.UnauthenticatedIdleTimeoutSeconds; !(v >= 0.1 && v <= c.Server.IdleTimeoutSeconds) {
		bad("server.unauthenticated_idle_timeout_seconds", "%g must be in [0.1, server.idle_timeout_seconds = %g] seconds", v, c.Server.IdleTimeoutSeconds)
	}
	if len(c.Models) == 0 {
		bad("models", "at least one model is required")
	}
	seen := map[string]bool{}
	for i, m := range c.Models {
		k := fmt.Sprintf("models[%d]", i)
		if m.Name == "" {
			bad(k+".name", "is required")
		} else if seen[m.Name] {
			bad(k+".name", "%q is listed twice", m.Name)
		}
		seen[m.Name] = true
		switch {
		case m.Remote && (m.Path != "" || m.Preset != ""):
			bad(k, "is remote (hosted by workers); path and preset belong in the workers' configuration")
		case m.Remote:
		case m.Path == "" && m.Preset == "":
			bad(k, "needs either path (a HuggingFace-layout directory or a .gguf file) or preset")
		case m.Path != "" && m.Preset != "":
			bad(k, "has both path and preset; choose one")
		}
		if m.MaxContextLength < 0 {
			bad(k+".max_context_length", "%d must not be negative", m.MaxContextLength)
		}
		if m.MaxLoraRank < 1 || m.MaxLoraRank > 1024 {
			bad(k+".max_lora_rank", "%d must be in [1, 1024]", m.MaxLoraRank)
		}
		if m.LoraAlphaRatio <= 0 {
			bad(k+".lora_alpha_ratio", "%g must be positive", m.LoraAlphaRatio)
		}
	}
	if len(c.RemoteModels()) > 0 && len(c.Workers.Pinned) == 0 && !c.Workers.Discover {
		bad("workers", "models marked remote need workers.pinned addresses or workers.discover: true")
	}
	if c.Server.ReplicaID != "" && c.Persistence.Mode != "redis" {
		bad("server.replica_id", "replicas share state through Redis: set persistence.mode: redis")
	}
	if c.Server.ReplicaID != "" && !namespace.MatchString(c.Server.ReplicaID) {
		bad("server.replica_id", "%q must be 1-64 letters, digits, '.', '_' or '-'", c.Server.ReplicaID)
	}
	if c.Workers.Discover && c.Persistence.Mode != "redis" {
		bad("workers.discover", "needs persistence.mode: redis (workers register in the shared store)")
	}
	if c.Worker.Register && c.Persistence.Mode != "redis" {
		bad("worker.register", "needs persistence.mode: redis (replicas read registrations from the shared store)")
	}
	for i, w := range c.Workers.Pinned {
		if !strings.Contains(w.Address, ":") {
			bad(fmt.Sprintf("workers.pinned[%d].address", i), "%q must be host:port", w.Address)
		}
		for _, m := range w.Models {
			if mc, ok := c.Model(m); !ok || !mc.Remote {
				bad(fmt.Sprintf("workers.pinned[%d].models", i), "%q is not a model with remote: true", m)
			}
		}
	}
	for _, f := range []struct {
		key string
		v   float64
	}{{"workers.call_timeout_seconds", c.Workers.CallTimeoutSeconds}, {"workers.start_timeout_seconds", c.Workers.StartTimeoutSeconds},
		{"workers.check_seconds", c.Workers.CheckSeconds}, {"worker.heartbeat_seconds", c.Worker.HeartbeatSeconds}} {
		secs(f.key, f.v, 0, 30*86400)
	}
	if (c.Worker.TLS.CertFile == "") != (c.Worker.TLS.KeyFile == "") {
		bad("worker.tls", "cert_file and key_file go together")
	}
	if c.Worker.TLS.ClientCAFile != "" && c.Worker.TLS.CertFile == "" {
		bad("worker.tls.client_ca_file", "mutual TLS needs the worker's own cert_file and key_file")
	}
	if (c.Workers.TLS.CertFile == "") != (c.Workers.TLS.KeyFile == "") {
		bad("workers.tls", "cert_file and key_file go together")
	}
	for i, a := range c.Auth.APIKeys {
		k := fmt.Sprintf("auth.api_keys[%d]", i)
		if !tenantName.MatchString(a.Tenant) {
			bad(k+".tenant", "%q must be 1-64 letters, digits, '.', '_' or '-'", a.Tenant)
		}
		if !hexSHA256.MatchString(a.KeySHA256) {
			bad(k+".key_sha256", "must be 64 lower-case hex digits (sha256 of the key; `tuft key hash` prints it)")
		}
	}
	p := c.Persistence
	switch p.Mode {
	case "embedded":
		if p.Path == "" {
			bad("persistence.path", "is required in embedded mode")
		}
	case "redis":
		if !strings.HasPrefix(p.RedisURL, "redis://") && !strings.HasPrefix(p.RedisURL, "rediss://") && !strings.HasPrefix(p.RedisURL, "unix://") {
			bad("persistence.redis_url", "%q must be a redis://, rediss:// or unix:// URL", redact(p.RedisURL))
		}
	case "memory":
	default:
		bad("persistence.mode", "%q is not one of embedded, redis, memory", p.Mode)
	}
	if !namespace.MatchString(p.Namespace) {
		bad("persistence.namespace", "%q must be 1-64 letters, digits, '.', '_' or '-'", p.Namespace)
	}
	if p.FutureTTLSeconds < 60 || p.FutureTTLSeconds > MaxTTLSeconds {
		bad("persistence.future_ttl_seconds", "%d must be in [60, %d]", p.FutureTTLSeconds, MaxTTLSeconds)
	}
	if !(c.Sessions.HeartbeatTimeoutSeconds >= 15 && c.Sessions.HeartbeatTimeoutSeconds <= MaxTTLSeconds) {
		bad("sessions.heartbeat_timeout_seconds", "%g must be in [15, %d] (the SDK heartbeats every 10 s)", c.Sessions.HeartbeatTimeoutSeconds, MaxTTLSeconds)
	}
	if !(c.Sessions.FinishedRetentionSeconds > 0 && c.Sessions.FinishedRetentionSeconds <= MaxTTLSeconds) {
		bad("sessions.finished_retention_seconds", "%g must be in (0, %d]", c.Sessions.FinishedRetentionSeconds, MaxTTLSeconds)
	}
	if c.Sessions.SeqGapTimeoutSeconds <= 0 {
		bad("sessions.seq_gap_timeout_seconds", "%g must be positive", c.Sessions.SeqGapTimeoutSeconds)
	}
	l := c.Limits
	if l.MaxQueuedPerTenant < 1 {
		bad("limits.max_queued_per_tenant", "%d must be at least 1", l.MaxQueuedPerTenant)
	}
	if l.MaxRequestBytes < 1<<10 {
		bad("limits.max_request_bytes", "%d must be at least 1024", l.MaxRequestBytes)
	}
	if l.MaxTokensPerBatch < 1 {
		bad("limits.max_tokens_per_batch", "%d must be at least 1", l.MaxTokensPerBatch)
	}
	if l.MaxSampleTokens < 1 {
		bad("limits.max_sample_tokens", "%d must be at least 1", l.MaxSampleTokens)
	}
	if l.MaxNumSamples < 1 {
		bad("limits.max_num_samples", "%d must be at least 1", l.MaxNumSamples)
	}
	if !deviceName.MatchString(c.Engine.Device) {
		bad("engine.device", "%q is not one of auto, cpu, cuda, cuda:N", c.Engine.Device)
	}
	if c.Engine.CUDAMemoryLimitBytes < 0 {
		bad("engine.cuda_memory_limit_bytes", "%d must not be negative", c.Engine.CUDAMemoryLimitBytes)
	}
	if c.Inference.MaxAdapters < 1 {
		bad("inference.max_adapters", "%d must be at least 1", c.Inference.MaxAdapters)
	}
	if l.MaxConcurrentRequestsPerTenant < 1 {
		bad("limits.max_concurrent_requests_per_tenant", "%d must be at least 1", l.MaxConcurrentRequestsPerTenant)
	}
	if l.MaxConcurrentRequests < l.MaxConcurrentRequestsPerTenant {
		bad("limits.max_concurrent_requests", "%d must be at least limits.max_concurrent_requests_per_tenant (%d)", l.MaxConcurrentRequests, l.MaxConcurrentRequestsPerTenant)
	}
	if l.MaxBodyBytesInFlightPerTenant < l.MaxRequestBytes {
		bad("limits.max_body_bytes_in_flight_per_tenant", "%d must be at least limits.max_request_bytes (%d): one request must fit", l.MaxBodyBytesInFlightPerTenant, l.MaxRequestBytes)
	}
	if l.MaxBodyBytesInFlight < l.MaxBodyBytesInFlightPerTenant {
		bad("limits.max_body_bytes_in_flight", "%d must be at least limits.max_body_bytes_in_flight_per_tenant (%d)", l.MaxBodyBytesInFlight, l.MaxBodyBytesInFlightPerTenant)
	}
	if l.MaxDecompressionRatio < 2 {
		bad("limits.max_decompression_ratio", "%d must be at least 2", l.MaxDecompressionRatio)
	}
	for _, q := range []struct {
		key string
		v   int64
	}{{"limits.max_sessions_per_tenant", int64(l.MaxSessionsPerTenant)}, {"limits.max_runs_per_tenant", int64(l.MaxRunsPerTenant)}, {"limits.max_adapter_bytes_per_tenant", l.MaxAdapterBytesPerTenant},
		{"limits.max_samplers_per_tenant", int64(l.MaxSamplersPerTenant)}, {"limits.max_ephemeral_samplers_per_run", int64(l.MaxEphemeralSamplersPerRun)},
		{"limits.max_exports_per_tenant", int64(l.MaxExportsPerTenant)},
		{"limits.max_metadata_bytes", int64(l.MaxMetadataBytes)},
		{"limits.max_metadata_bytes_per_tenant", l.MaxMetadataBytesPerTenant}, {"limits.max_disk_bytes_per_tenant", l.MaxDiskBytesPerTenant}} {
		if q.v < 1 {
			bad(q.key, "%d must be at least 1", q.v)
		}
	}
	if int64(l.MaxMetadataBytes) > l.MaxMetadataBytesPerTenant {
		bad("limits.max_metadata_bytes_per_tenant", "%d must be at least limits.max_metadata_bytes (%d)", l.MaxMetadataBytesPerTenant, l.MaxMetadataBytes)
	}
	if l.MaxStopStrings < 0 {
		bad("limits.max_stop_strings", "%d must not be negative", l.MaxStopStrings)
	}
	if l.MaxStopStringBytes < 0 {
		bad("limits.max_stop_string_bytes", "%d must not be negative", l.MaxStopStringBytes)
	}
	if l.MaxChatMessages < 1 {
		bad("limits.max_chat_messages", "%d must be at least 1", l.MaxChatMessages)
	}
	if l.MaxChatBytes < 1 {
		bad("limits.max_chat_bytes", "%d must be at least 1", l.MaxChatBytes)
	}
	if l.MaxTopKSampleLogprobs < 0 || l.MaxTopKSampleLogprobs > 100 {
		bad("limits.max_topk_sample_logprobs", "%d must be in [0, 100]", l.MaxTopKSampleLogprobs)
	}
	if l.MaxPromptAltTokensK < 0 {
		bad("limits.max_prompt_alt_tokens_k", "%d must not be negative", l.MaxPromptAltTokensK)
	}
	if l.MaxPromptOutputCells < 0 {
		bad("limits.max_prompt_output_cells", "%d must not be negative", l.MaxPromptOutputCells)
	}
	if l.MaxSampleOutputCells < 1 {
		bad("limits.max_sample_output_cells", "%d must be at least 1", l.MaxSampleOutputCells)
	}
	if l.MaxSampleOutputBytes < 1 {
		bad("limits.max_sample_output_bytes", "%d must be at least 1", l.MaxSampleOutputBytes)
	}
	if !(l.SampleTimeoutSeconds >= 1 && l.SampleTimeoutSeconds <= MaxTTLSeconds) {
		bad("limits.sample_timeout_seconds", "%g must be in [1, %d]", l.SampleTimeoutSeconds, MaxTTLSeconds)
	}
	if !(l.FutureTimeoutSeconds >= 1 && l.FutureTimeoutSeconds <= MaxTTLSeconds) {
		bad("limits.future_timeout_seconds", "%g must be in [1, %d]", l.FutureTimeoutSeconds, MaxTTLSeconds)
	}
	if l.MaxRunningPerTenant < 1 {
		bad("limits.max_running_per_tenant", "%d must be at least 1", l.MaxRunningPerTenant)
	}
	if !(l.SampleBacklogFactor >= 1) || math.IsInf(l.SampleBacklogFactor, 0) {
		bad("limits.sample_backlog_factor", "%g must be a finite number ≥ 1", l.SampleBacklogFactor)
	}
	sc := c.Engine.Scheduler
	if sc.MaxBatchSize < 1 {
		bad("engine.scheduler.max_batch_size", "%d must be at least 1", sc.MaxBatchSize)
	}
	if sc.StepTokenBudget < 1 {
		bad("engine.scheduler.step_token_budget", "%d must be at least 1", sc.StepTokenBudget)
	}
	if sc.PrefillChunkTokens < 1 {
		bad("engine.scheduler.prefill_chunk_tokens", "%d must be at least 1", sc.PrefillChunkTokens)
	}
	if sc.KVCacheBytes < 1<<20 {
		bad("engine.scheduler.kv_cache_bytes", "%d must be at least 1 MiB", sc.KVCacheBytes)
	}
	if sc.PrefixCacheEntries < 0 {
		bad("engine.scheduler.prefix_cache_entries", "%d must not be negative", sc.PrefixCacheEntries)
	}
	if sc.TrainPackTokens < 1 {
		bad("engine.scheduler.train_pack_tokens", "%d must be at least 1", sc.TrainPackTokens)
	}
	if !(sc.TrainShare > 0 && sc.TrainShare < 1) {
		bad("engine.scheduler.train_share", "%g must be in (0, 1)", sc.TrainShare)
	}
	if l.MaxClientEvents < 1 {
		bad("limits.max_client_events", "%d must be at least 1", l.MaxClientEvents)
	}
	if l.MaxClientEventBytes < 64 {
		bad("limits.max_client_event_bytes", "%d must be at least 64", l.MaxClientEventBytes)
	}
	if l.MaxCompletionEventsPerSampler < 1 {
		bad("limits.max_completion_events_per_sampler", "%d must be at least 1", l.MaxCompletionEventsPerSampler)
	}
	if l.MaxRetrievedRequestIDs < 1 {
		bad("limits.max_retrieved_request_ids", "%d must be at least 1", l.MaxRetrievedRequestIDs)
	}
	if err := c.Telemetry.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func redact(u string) string {
	if i := strings.Index(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j > 0 && j < i {
			return u[:j+3] + "***" + u[i:]
		}
	}
	return u
}
