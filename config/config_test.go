package config

import (
	"strings"
	"testing"
)

func TestDefaultIsValid(t *testing.T) {
	t.Parallel()
	c, err := Parse(nil, "/tmp/tufthome")
	if err != nil {
		t.Fatal(err)
	}
	if c.Models[0].Name != DefaultModelName || c.Models[0].Preset != "tiny" {
		t.Fatalf("default model = %+v", c.Models[0])
	}
	if c.Persistence.Path != "/tmp/tufthome/tuft.db" || c.CheckpointDir != "/tmp/tufthome/checkpoints" {
		t.Fatalf("derived paths: %q %q", c.Persistence.Path, c.CheckpointDir)
	}
	if c.Server.Port != 10610 {
		t.Fatalf("port %d", c.Server.Port)
	}
}

func TestParseErrorsNameTheKey(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown top key", "modles: []", `unknown key "modles"`},
		{"unknown nested key", "models:\n  - name: a\n    preset: tiny\n    pathh: x", `unknown key "models[0].pathh"`},
		{"unknown persistence key", "persistence:\n  mdoe: redis", `unknown key "persistence.mdoe"`},
		{"unknown telemetry key", "telemetry:\n  enabeld: true", `unknown key "telemetry.enabeld"`},
		{"bad mode", "persistence:\n  mode: sqlite", "persistence.mode"},
		{"redis url", "persistence:\n  mode: redis\n  redis_url: localhost:6379", "persistence.redis_url"},
		{"no models", "models: []", "models: at least one model"},
		{"path and preset", "models:\n  - name: a\n    preset: tiny\n    path: /x", "has both path and preset"},
		{"duplicate name", "models:\n  - {name: a, preset: tiny}\n  - {name: a, preset: tiny}", `"a" is listed twice`},
		{"rank", "models:\n  - {name: a, preset: tiny, max_lora_rank: -3}\n", "max_lora_rank"},
		{"bad hash", "auth:\n  api_keys:\n    - {tenant: t, key_sha256: abc}", "auth.api_keys[0].key_sha256"},
		{"bad tenant", "auth:\n  api_keys:\n    - {tenant: 'a b', key_sha256: " + strings.Repeat("a", 64) + "}", "auth.api_keys[0].tenant"},
		{"port", "server:\n  port: 70000", "server.port"},
		{"remote with path", "models:\n  - {name: a, remote: true, path: /x}\nworkers: {pinned: [{address: 'h:1', models: [a]}]}", "is remote"},
		{"remote without workers", "models:\n  - {name: a, remote: true}", "workers: models marked remote"},
		{"discover without redis", "models:\n  - {name: a, remote: true}\nworkers: {discover: true}", "workers.discover"},
		{"pinned address", "models:\n  - {name: a, remote: true}\nworkers: {pinned: [{address: nohost, models: [a]}]}", "workers.pinned[0].address"},
		{"pinned local model", "models:\n  - {name: a, preset: tiny}\nworkers: {pinned: [{address: 'h:1', models: [a]}]}", "workers.pinned[0].models"},
		{"register without redis", "worker: {register: true}", "worker.register"},
		{"replica without redis", "server: {replica_id: api-0}", "server.replica_id"},
		{"worker tls half", "worker: {tls: {cert_file: /c}}", "worker.tls"},
		{"long poll", "server:\n  long_poll_seconds: 50", "server.long_poll_seconds"},
		{"log level", "server:\n  log_level: loud", "server.log_level"},
		{"ttl", "persistence:\n  future_ttl_seconds: 1", "persistence.future_ttl_seconds"},
		{"heartbeat", "sessions:\n  heartbeat_timeout_seconds: 5", "sessions.heartbeat_timeout_seconds"},
		{"seq gap", "sessions:\n  seq_gap_timeout_seconds: 0", "sessions.seq_gap_timeout_seconds"},
		{"finished retention", "sessions:\n  finished_retention_seconds: 0", "sessions.finished_retention_seconds"},
		{"limits", "limits:\n  max_queued_per_tenant: 0", "limits.max_queued_per_tenant"},
		{"wrong type", "server:\n  port: abc", "invalid value"},
		{"heartbeat overflows a duration", "sessions:\n  heartbeat_timeout_seconds: 1e300", "sessions.heartbeat_timeout_seconds"},
		{"heartbeat NaN", "sessions:\n  heartbeat_timeout_seconds: .nan", "sessions.heartbeat_timeout_seconds"},
		{"future ttl overflows a duration", "persistence:\n  future_ttl_seconds: 9223372037", "persistence.future_ttl_seconds"},
		{"call timeout overflows a duration", "workers:\n  call_timeout_seconds: 1e12", "workers.call_timeout_seconds"},
		{"body timeout", "server:\n  read_body_timeout_seconds: 0", "server.read_body_timeout_seconds"},
		{"header timeout", "server:\n  read_header_timeout_seconds: -1", "server.read_header_timeout_seconds"},
		{"max connections", "server:\n  max_connections: 1", "server.max_connections"},
		{"connections per address", "server:\n  max_connections_per_address: 0", "server.max_connections_per_address"},
		{"keyless idle timeout", "server:\n  unauthenticated_idle_timeout_seconds: 121", "server.unauthenticated_idle_timeout_seconds"},
		{"keyless idle timeout zero", "server:\n  unauthenticated_idle_timeout_seconds: 0", "server.unauthenticated_idle_timeout_seconds"},
		{"sample output cells", "limits:\n  max_sample_output_cells: 0", "limits.max_sample_output_cells"},
		{"sample output bytes", "limits:\n  max_sample_output_bytes: -1", "limits.max_sample_output_bytes"},
		{"per-tenant concurrency", "limits:\n  max_concurrent_requests_per_tenant: 0", "limits.max_concurrent_requests_per_tenant"},
		{"total concurrency below per-tenant", "limits:\n  max_concurrent_requests: 10\n  max_concurrent_requests_per_tenant: 20", "limits.max_concurrent_requests:"},
		{"body budget below one request", "limits:\n  max_body_bytes_in_flight_per_tenant: 1024", "limits.max_body_bytes_in_flight_per_tenant"},
		{"decompression ratio", "limits:\n  max_decompression_ratio: 1", "limits.max_decompression_ratio"},
		{"stop strings", "limits:\n  max_stop_strings: -1", "limits.max_stop_strings"},
		{"chat messages", "limits:\n  max_chat_messages: 0", "limits.max_chat_messages"},
		{"chat bytes", "limits:\n  max_chat_bytes: -1", "limits.max_chat_bytes"},
		{"sample top-k", "limits:\n  max_topk_sample_logprobs: 101", "limits.max_topk_sample_logprobs"},
		{"alternative tokens", "limits:\n  max_prompt_alt_tokens_k: -1", "limits.max_prompt_alt_tokens_k"},
		{"prompt output cells", "limits:\n  max_prompt_output_cells: -1", "limits.max_prompt_output_cells"},
		{"sample timeout", "limits:\n  sample_timeout_seconds: 0", "limits.sample_timeout_seconds"},
		{"runs quota", "limits:\n  max_runs_per_tenant: 0", "limits.max_runs_per_tenant"},
		{"adapter bytes quota", "limits:\n  max_adapter_bytes_per_tenant: -1", "limits.max_adapter_bytes_per_tenant"},
		{"samplers quota", "limits:\n  max_samplers_per_tenant: 0", "limits.max_samplers_per_tenant"},
		{"ephemeral samplers per run", "limits:\n  max_ephemeral_samplers_per_run: 0", "limits.max_ephemeral_samplers_per_run"},
		{"exports per tenant", "limits:\n  max_exports_per_tenant: 0", "limits.max_exports_per_tenant"},
		{"metric points per run", "limits:\n  max_metric_points_per_run: 0", "limits.max_metric_points_per_run"},
		{"metric streams per tenant", "limits:\n  max_metric_streams_per_tenant: 0", "limits.max_metric_streams_per_tenant"},
		{"usage retention", "billing:\n  usage_retention_days: 0", "billing.usage_retention_days"},
		{"negative price", "billing:\n  usd_per_million_sample_tokens: -1", "billing.usd_per_million_sample_tokens"},
		{"operator key not hex", "auth:\n  operator_key_sha256: nope", "auth.operator_key_sha256"},
		{"metadata per record", "limits:\n  max_metadata_bytes: 0", "limits.max_metadata_bytes"},
		{"metadata per tenant below one record", "limits:\n  max_metadata_bytes: 1000\n  max_metadata_bytes_per_tenant: 10", "limits.max_metadata_bytes_per_tenant"},
		{"disk quota", "limits:\n  max_disk_bytes_per_tenant: 0", "limits.max_disk_bytes_per_tenant"},
		{"future timeout overflows a duration", "limits:\n  future_timeout_seconds: 1e300", "limits.future_timeout_seconds"},
		{"running per tenant", "limits:\n  max_running_per_tenant: 0", "limits.max_running_per_tenant"},
		{"operation workers", "server:\n  operation_workers: 0", "server.operation_workers"},
		{"spans per session", "limits:\n  max_spans_per_session: 0", "limits.max_spans_per_session"},
		{"traced sessions per tenant", "limits:\n  max_traced_sessions_per_tenant: -1", "limits.max_traced_sessions_per_tenant"},
		{"audit retention under a day", "limits:\n  audit_retention_seconds: 3600", "limits.audit_retention_seconds"},
		{"audit events per day", "limits:\n  max_audit_events_per_tenant_per_day: 0", "limits.max_audit_events_per_tenant_per_day"},
		{"sample backlog", "limits:\n  sample_backlog_factor: 0.5", "limits.sample_backlog_factor"},
		{"batch size", "engine:\n  scheduler:\n    max_batch_size: 0", "engine.scheduler.max_batch_size"},
		{"step budget", "engine:\n  scheduler:\n    step_token_budget: -3", "engine.scheduler.step_token_budget"},
		{"prefill chunk", "engine:\n  scheduler:\n    prefill_chunk_tokens: 0", "engine.scheduler.prefill_chunk_tokens"},
		{"kv cache", "engine:\n  scheduler:\n    kv_cache_bytes: 100", "engine.scheduler.kv_cache_bytes"},
		{"prefix cache", "engine:\n  scheduler:\n    prefix_cache_entries: -1", "engine.scheduler.prefix_cache_entries"},
		{"train pack", "engine:\n  scheduler:\n    train_pack_tokens: 0", "engine.scheduler.train_pack_tokens"},
		{"train share", "engine:\n  scheduler:\n    train_share: 1", "engine.scheduler.train_share"},
		{"unknown scheduler key", "engine:\n  scheduler:\n    batch: 3", "engine.scheduler.batch"},
		{"telemetry timeout overflows a duration", "telemetry:\n  timeout_seconds: 1e300", "timeout_seconds"},
		{"bad yaml", "models: [", "invalid YAML"},
		{"telemetry ratio", "telemetry:\n  sampling_ratio: 2", "telemetry.sampling_ratio"},
		{"telemetry protocol", "telemetry:\n  protocol: carrier-pigeon", "telemetry.protocol"},
		{"device", "engine:\n  device: gpu", "engine.device"},
		{"device ordinal", "engine:\n  device: cuda:x", "engine.device"},
		{"cuda memory limit", "engine:\n  cuda_memory_limit_bytes: -1", "engine.cuda_memory_limit_bytes"},
		{"cuda graphs max", "engine:\n  cuda_graphs_max: 0", "engine.cuda_graphs_max"},
		{"console session ttl", "console:\n  session_ttl_seconds: 5", "console.session_ttl_seconds"},
		{"console session ttl NaN", "console:\n  session_ttl_seconds: .nan", "console.session_ttl_seconds"},
		{"console max sessions", "console:\n  max_sessions: 0", "console.max_sessions"},
		{"console per tenant", "console:\n  max_sessions_per_tenant: 0", "console.max_sessions_per_tenant"},
		{"console per tenant over all", "console:\n  max_sessions: 4\n  max_sessions_per_tenant: 5", "console.max_sessions_per_tenant: 5 must not exceed"},
		{"unknown console key", "console:\n  ttl: 5", `unknown key "console.ttl"`},
		{"cpu weight format", "engine:\n  cpu_weight_format: q3_k", "engine.cpu_weight_format"},
		{"cpu prepack bytes", "engine:\n  cpu_prepack_bytes: -1", "engine.cpu_prepack_bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "/h")
			if err == nil {
				t.Fatalf("no error for %q", tc.yaml)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestParseFull(t *testing.T) {
	y := `
server: {host: 0.0.0.0, port: 8000, log_level: debug}
models:
  - name: Qwen/Qwen2.5-0.5B
    path: /models/qwen
    max_context_length: 4096
    max_lora_rank: 32
checkpoint_dir: /data/ckpt
auth:
  api_keys:
    - tenant: alice
      key_sha256: ` + strings.Repeat("ab", 32) + `
persistence: {mode: redis, redis_url: "redis://:secret@localhost:6379/0", namespace: prod, future_ttl_seconds: 3600}
limits: {max_queued_per_tenant: 10, max_request_bytes: 1048576, max_tokens_per_batch: 1000}
telemetry:
  enabled: true
  sampling_ratio: 0.5
`
	c, err := Parse([]byte(y), "/h")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Models) != 1 || c.Models[0].MaxLoraRank != 32 || c.Models[0].Path != "/models/qwen" {
		t.Fatalf("models: %+v", c.Models)
	}
	if c.Persistence.Mode != "redis" || c.Persistence.Namespace != "prod" || c.Limits.MaxQueuedPerTenant != 10 {
		t.Fatalf("parsed: %+v %+v", c.Persistence, c.Limits)
	}
	if c.Limits.MaxSampleTokens != 4096 {
		t.Fatal("unset limits must keep their defaults")
	}
	if !c.Telemetry.Enabled || c.Telemetry.SamplingRatio != 0.5 {
		t.Fatalf("telemetry: %+v", c.Telemetry)
	}
	if m, ok := c.Model("Qwen/Qwen2.5-0.5B"); !ok || m.LoraAlphaRatio != 1 {
		t.Fatalf("Model lookup: %+v %v", m, ok)
	}
}

// TestCPUDecodeSpin: engine.cpu_decode_spin is on by default and a YAML false turns it
// off (a bool whose default is true must not read an unset key as false).
func TestCPUDecodeSpin(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want bool
	}{{"engine: {device: cpu}", true}, {"engine: {cpu_decode_spin: false}", false}, {"engine: {cpu_decode_spin: true}", true}} {
		cfg, err := Parse([]byte("models: [{name: m, path: /m}]\n"+c.yaml), "/h")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Engine.CPUDecodeSpin != c.want {
			t.Fatalf("%q: cpu_decode_spin = %v, want %v", c.yaml, cfg.Engine.CPUDecodeSpin, c.want)
		}
	}
}

func TestRedactHidesPassword(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("persistence:\n  mode: redis\n  redis_url: http://user:hunter2@host"), "/h")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("password leaked or no error: %v", err)
	}
}

func TestApplyEnv(t *testing.T) {
	t.Setenv("TUFT_HOST", "0.0.0.0")
	t.Setenv("TUFT_PORT", "1234")
	t.Setenv("TUFT_LOG_LEVEL", "DEBUG")
	t.Setenv("TUFT_CHECKPOINT_DIR", "/ck")
	c := Default("/h")
	if err := c.ApplyEnv(); err != nil {
		t.Fatal(err)
	}
	if c.Server.Host != "0.0.0.0" || c.Server.Port != 1234 || c.Server.LogLevel != "debug" || c.CheckpointDir != "/ck" {
		t.Fatalf("%+v %q", c.Server, c.CheckpointDir)
	}
	t.Setenv("TUFT_PORT", "x")
	if err := c.ApplyEnv(); err == nil || !strings.Contains(err.Error(), "TUFT_PORT") {
		t.Fatalf("bad TUFT_PORT: %v", err)
	}
	t.Setenv("TUFT_PORT", "1234")
	t.Setenv("TUFT_DEVICE", "cuda:1")
	if err := c.ApplyEnv(); err != nil || c.Engine.Device != "cuda:1" {
		t.Fatalf("TUFT_DEVICE: %v, device %q", err, c.Engine.Device)
	}
	t.Setenv("TUFT_DEVICE", "tpu")
	if err := c.ApplyEnv(); err == nil || !strings.Contains(err.Error(), "TUFT_DEVICE") {
		t.Fatalf("bad TUFT_DEVICE: %v", err)
	}
}

// The operator key is nobody's tenant key: the same digest in both places is refused.
func TestOperatorKeyIsNotATenantKey(t *testing.T) {
	t.Parallel()
	c := Default(t.TempDir())
	d := HashAPIKey("tml-k").String()
	c.Auth.APIKeys = []APIKey{{Tenant: "alice", KeySHA256: d}}
	c.Auth.OperatorKeySHA256 = d
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "auth.api_keys[0].key_sha256") || !strings.Contains(err.Error(), "operator") {
		t.Fatalf("validate: %v", err)
	}
	c.Auth.OperatorKeySHA256 = HashAPIKey("tml-op").String()
	if err := c.Validate(); err != nil && strings.Contains(err.Error(), "auth.") {
		t.Fatal(err)
	}
}
