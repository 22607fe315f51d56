package config

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tuft-go/tuft/telemetry"
)

// Config is the whole tuft_config.yaml.
type Config struct {
	Server        Server      `yaml:"server"`
	Models        []Model     `yaml:"models"`
	CheckpointDir string      `yaml:"checkpoint_dir"`
	Auth          Auth        `yaml:"auth"`
	Persistence   Persistence `yaml:"persistence"`
	Sessions      Sessions    `yaml:"sessions"`
	Limits        Limits      `yaml:"limits"`
	Inference     Inference   `yaml:"inference"`
	// Billing prices the usage the billing and usage routes report (docs/compatibility.md).
	Billing   Billing          `yaml:"billing"`
	Console   Console          `yaml:"console"`
	Telemetry telemetry.Config `yaml:"telemetry"`
	// Workers is how an API server reaches `tuft worker` processes (models with remote: true).
	Workers Workers `yaml:"workers"`
	// Worker configures a `tuft worker` process.
	Worker Worker `yaml:"worker"`
	// Engine configures where and how models compute.
	Engine Engine `yaml:"engine"`

	// Home is TUFT_HOME (not a YAML key): the directory for the embedded store, the
	// generated API key, preset models and, by default, checkpoints.
	Home string `yaml:"-"`
}

// Server holds the listener settings (overridden by flags and TUFT_HOST / TUFT_PORT).
type Server struct {
	Host     string `yaml:"host"`
	Port     int    `yaml:"port"`
	LogLevel string `yaml:"log_level"` // debug | info | warn | error
	// PublicURL is the base URL clients reach this server at; archive download links are
	// built on it. Default: http://HOST:PORT.
	PublicURL string `yaml:"public_url"`
	// LongPollSeconds is how long retrieve_future holds a request before answering 408
	// try_again; it must stay well under the SDK's 45 s client timeout.
	LongPollSeconds Seconds `yaml:"long_poll_seconds"`
	// ReplicaID names this API replica when several share one Redis (also TUFT_REPLICA_ID,
	// e.g. the pod name). Each session and everything in it belongs to the replica that
	// created it; the others forward requests about it there (at its public_url). Empty:
	// a single server.
	ReplicaID string `yaml:"replica_id"`
	// ReplicaURL is where the other replicas reach this one (also TUFT_REPLICA_URL, e.g.
	// http://$(POD_IP):10610). Default: http://HOST:PORT of the listener.
	ReplicaURL string `yaml:"replica_url"`
	// ShutdownTimeoutSeconds bounds graceful shutdown.
	ShutdownTimeoutSeconds Seconds `yaml:"shutdown_timeout_seconds"`
	// ReadHeaderTimeoutSeconds bounds how long a connection may take to send a request's
	// headers (a client that stalls there is cut off, key or not).
	ReadHeaderTimeoutSeconds Seconds `yaml:"read_header_timeout_seconds"`
	// ReadBodyTimeoutSeconds bounds how long a request may take to send its whole body,
	// counted from its start; a stalled body is answered 408 and its connection closed.
	ReadBodyTimeoutSeconds Seconds `yaml:"read_body_timeout_seconds"`
	// IdleTimeoutSeconds closes a keep-alive connection idle for this long.
	IdleTimeoutSeconds Seconds `yaml:"idle_timeout_seconds"`
	// MaxConnections bounds the open client connections. When they are all open, a new
	// one evicts the connection idle longest (unauthenticated ones first); it is closed
	// at once only when every connection is busy with a request.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerAddress bounds one remote address's open connections (a new one
	// evicts the address's own idle one, or is closed).
	MaxConnectionsPerAddress int `yaml:"max_connections_per_address"`
	// UnauthenticatedIdleTimeoutSeconds closes an idle connection none of whose requests
	// carried a valid API key yet (IdleTimeoutSeconds applies once one has).
	UnauthenticatedIdleTimeoutSeconds Seconds `yaml:"unauthenticated_idle_timeout_seconds"`
	// OperationWorkers is how many goroutines run the blocking bodies of queued
	// operations (create_model, save/load weights, unload: CPU and IO work), and as many
	// again finish asynchronous ones (forward, forward_backward, optim_step, sample:
	// their continuation, the result's persistence). Model work itself never holds one:
	// it waits in the model's token scheduler.
	OperationWorkers int `yaml:"operation_workers"`
}

// Model is one base model that clients may name as base_model.
type Model struct {
	Name             string `yaml:"name"`
	Path             string `yaml:"path"`   // local directory in HuggingFace layout, or a .gguf file
	Preset           string `yaml:"preset"` // a built-in preset (see `tuft model init`)
	MaxContextLength int    `yaml:"max_context_length"`
	MaxLoraRank      int    `yaml:"max_lora_rank"`
	// LoraAlphaRatio sets lora_alpha = rank × ratio for new adapters (Tinker leaves alpha to
	// the server; 1 gives scale 1).
	LoraAlphaRatio float64 `yaml:"lora_alpha_ratio"`
	// Remote: the model is hosted by `tuft worker` processes (see workers), not here.
	Remote bool `yaml:"remote"`
}

// Workers is the API server's side of the worker connection.
type Workers struct {
	// TokenFile holds the shared secret workers require (also TUFT_WORKER_TOKEN).
	TokenFile string `yaml:"token_file"`
	// TLS is the client side of (mutual) TLS to the workers; empty is plaintext.
	TLS TLSFiles `yaml:"tls"`
	// Pinned lists workers by address, with the models they must host.
	Pinned []PinnedWorker `yaml:"pinned"`
	// Discover finds workers that registered themselves in the shared store (Redis).
	Discover bool `yaml:"discover"`
	// CallTimeoutSeconds bounds one operation on a worker (default 600; 0 also means the default).
	CallTimeoutSeconds Seconds `yaml:"call_timeout_seconds"`
	// StartTimeoutSeconds is how long start-up waits for the remote models' workers (default 120; 0 also means the default).
	StartTimeoutSeconds Seconds `yaml:"start_timeout_seconds"`
	// CheckSeconds is how often workers are discovered and checked (default 5; 0 also means the default).
	CheckSeconds Seconds `yaml:"check_seconds"`
}

// PinnedWorker is a worker at a fixed address.
type PinnedWorker struct {
	Address string   `yaml:"address"`
	Models  []string `yaml:"models"`
}

// Worker configures the `tuft worker` process; it hosts the models listed under models.
type Worker struct {
	// Listen is the gRPC address (default 127.0.0.1:10620; --listen overrides).
	Listen string `yaml:"listen"`
	// Advertise is the address API replicas dial, written to the registration (default:
	// the listen address).
	Advertise string `yaml:"advertise"`
	// TokenFile holds the shared secret callers must present (also TUFT_WORKER_TOKEN).
	TokenFile string `yaml:"token_file"`
	// TLS serves TLS; with client_ca_file set, only clients with a certificate from that CA
	// are admitted (mutual TLS).
	TLS TLSFiles `yaml:"tls"`
	// Register publishes the worker in the shared store (persistence must be redis).
	Register bool `yaml:"register"`
	// HeartbeatSeconds is the registration renewal interval (default 5; TTL is 3×).
	HeartbeatSeconds Seconds `yaml:"heartbeat_seconds"`
}

// Engine configures model execution.
type Engine struct {
	// Device is where models compute: auto (a GPU when this binary has CUDA support and
	// the machine a usable GPU, else the CPU), cpu, cuda or cuda:N (also TUFT_DEVICE).
	Device string `yaml:"device"`
	// CUDALibDirs are searched first for libcuda.so.1 and cuBLAS.
	CUDALibDirs []string `yaml:"cuda_lib_dirs"`
	// CUDAFP32Weights keeps base weights in float32 on the GPU instead of bfloat16.
	CUDAFP32Weights bool `yaml:"cuda_fp32_weights"`
	// CPUWeightFormat is how the CPU device stores base weight matrices: bf16 (default),
	// f32, or the GGUF block formats q8_0, q4_1 and q4_k (q4_k keeps a GGUF file's
	// Q4_K_M blocks as they are; docs/models.md: speed and accuracy of each). Norms, biases, LoRA adapters and activations stay float32.
	CPUWeightFormat string `yaml:"cpu_weight_format"`
	// CPUPrepackBytes bounds the float32 panels the CPU keeps of base weight matrices for
	// the products of training and prefill (each weight packed as the GEMM reads it,
	// forward and backward: 8 bytes a weight whatever the format, 1.08 GB for SmolLM2-135M),
	// built on a matrix's first product of many rows, first come first served; beyond it a
	// product packs its weight itself, as every one does at 0. A 512-token training step
	// took 6 % less time with them (docs/performance.md, "Tenth pass").
	CPUPrepackBytes int64 `yaml:"cpu_prepack_bytes"`
	// CPUDecodeSpin keeps the CPU's other cores spinning through each decode step, so
	// that they take a share of every product at once instead of waking for each
	// (kern.Burst: batch-1 decode 1.4–1.7× faster on 2 cores, docs/performance.md,
	// "Fourteenth pass"). Off, a step's products wake the cores one by one: for a machine
	// whose cores other work needs more than decode does.
	CPUDecodeSpin bool `yaml:"cpu_decode_spin"`
	// CUDAMemoryLimitBytes caps the GPU memory the engine holds (0: no limit).
	CUDAMemoryLimitBytes int64 `yaml:"cuda_memory_limit_bytes"`
	// CUDAGraphs runs each decode step of one token per sequence as a CUDA graph, captured
	// once per shape (rows, adapters, rows with logits) and replayed with one launch;
	// other steps, and shapes whose capture failed, run their kernels one by one.
	CUDAGraphs bool `yaml:"cuda_graphs"`
	// CUDAGraphsMax bounds the decode-step graphs kept per device (least recently used
	// dropped first); each holds its step's activations and logits.
	CUDAGraphsMax int `yaml:"cuda_graphs_max"`
	// CUDAGEMV runs one-row products with bfloat16 weights (batch-1 decoding) by the
	// engine's own kernel, which streams the weights at full width; false: cuBLAS.
	CUDAGEMV bool `yaml:"cuda_gemv"`
	// Scheduler configures each model's iteration-level scheduler (docs/scheduling.md).
	Scheduler Scheduler `yaml:"scheduler"`
}

// Scheduler configures the loop that runs each model's decode steps and training packs
// (in the server for local models, in `tuft worker` for remote ones).
type Scheduler struct {
	// MaxBatchSize bounds the sequences of one decode step, all requests, adapters and
	// tenants together.
	MaxBatchSize int `yaml:"max_batch_size"`
	// StepTokenBudget bounds the tokens of one decode step: one per decoding sequence
	// plus chunks of joining prompts. It bounds how long a step takes.
	StepTokenBudget int `yaml:"step_token_budget"`
	// PrefillChunkTokens bounds the tokens of one prompt in one step, so a long prompt is
	// prefilled over several steps while the others keep decoding.
	PrefillChunkTokens int `yaml:"prefill_chunk_tokens"`
	// KVCacheBytes is the KV-cache memory of each model (on its device). Work is admitted
	// as it fits; a sequence that can never fit is refused with 400 naming this key.
	KVCacheBytes int64 `yaml:"kv_cache_bytes"`
	// PrefixCacheEntries bounds the prompts whose KV blocks are kept for later requests of
	// the same adapter (0 turns the prefix cache off).
	PrefixCacheEntries int `yaml:"prefix_cache_entries"`
	// TrainPackTokens bounds the tokens of one training pass: a decode step waits for at
	// most one pass (a single longer datum runs alone).
	TrainPackTokens int `yaml:"train_pack_tokens"`
	// TrainShare is the share of a model's time training gets while sampling also waits.
	TrainShare float64 `yaml:"train_share"`
}

// TLSFiles names PEM files.
type TLSFiles struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	CAFile       string `yaml:"ca_file"`        // client: the CA that signed the workers' certificates
	ClientCAFile string `yaml:"client_ca_file"` // worker: the CA of admitted clients (mutual TLS)
	ServerName   string `yaml:"server_name"`    // client: the name in the workers' certificates
}

// RemoteModels lists the models hosted by workers.
func (c Config) RemoteModels() []string {
	var out []string
	for _, m := range c.Models {
		if m.Remote {
			out = append(out, m.Name)
		}
	}
	return out
}

// WorkerToken reads the shared worker secret from TUFT_WORKER_TOKEN or file ("" if
// neither is set).
func WorkerToken(file string) (string, error) {
	if t := strings.TrimSpace(os.Getenv("TUFT_WORKER_TOKEN")); t != "" {
		return t, nil
	}
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(expandHome(file))
	if err != nil {
		return "", fmt.Errorf("worker token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("worker token file %s is empty", file)
	}
	return t, nil
}

// Auth lists the API keys, by SHA-256, and the tenant each belongs to.
type Auth struct {
	APIKeys []APIKey `yaml:"api_keys"`
	// OperatorKeySHA256 is the SHA-256 of the operator key, the one key that reads
	// GET /api/v1/admin/overview (every tenant's usage, queues and health) and nothing
	// else; empty (the default) leaves the server without an operator.
	OperatorKeySHA256 string `yaml:"operator_key_sha256"`
}

// APIKey maps one key (never stored in clear) to a tenant.
type APIKey struct {
	Tenant    string `yaml:"tenant"`
	KeySHA256 string `yaml:"key_sha256"`
}

// Persistence selects the store.
type Persistence struct {
	Mode             string `yaml:"mode"` // embedded | redis | memory
	Path             string `yaml:"path"` // embedded: the database file; default $TUFT_HOME/tuft.db
	RedisURL         string `yaml:"redis_url"`
	Namespace        string `yaml:"namespace"`
	FutureTTLSeconds int    `yaml:"future_ttl_seconds"`
}

// Sessions controls client session lifetime.
type Sessions struct {
	// HeartbeatTimeoutSeconds: a session with no heartbeat for this long expires and its
	// training runs and sampling sessions are unloaded (their records and checkpoints stay).
	HeartbeatTimeoutSeconds Seconds `yaml:"heartbeat_timeout_seconds"`
	// SeqGapTimeoutSeconds is how long a training operation that arrived before its
	// predecessor (seq_id) waits for it before failing. Refused and restart-failed seq_ids
	// never make anything wait; this covers only genuinely late arrivals (the SDK retries a
	// submission for up to 5 minutes).
	SeqGapTimeoutSeconds Seconds `yaml:"seq_gap_timeout_seconds"`
	// FinishedRetentionSeconds is how long a finished or expired session keeps its
	// metadata (tags, user_metadata, names, project, finish detail), counted by
	// limits.max_metadata_bytes_per_tenant; then the reaper prunes it to a compact record
	// (id, tenant, times, finish reason: what a 410 needs), in memory and in the store.
	// Over the quota because of ended sessions, a request gets 429 with Retry-After at
	// their prune; the default stays within the SDK's five minutes of retries.
	FinishedRetentionSeconds Seconds `yaml:"finished_retention_seconds"`
	// RecordSpans keeps this server's own spans of each session's requests for the
	// session's owner (GET /api/v1/sessions/{id}/spans, the Perfetto trace export),
	// bounded by limits.max_spans_per_session and limits.max_traced_sessions_per_tenant.
	// It turns the OpenTelemetry SDK on even with telemetry disabled (no exporter then):
	// spans cost a few microseconds each instead of nothing. On by default: the console's
	// session timeline and the SDK's trace_export need it (docs/observability.md).
	RecordSpans bool `yaml:"record_spans"`
}

// Limits bound what one tenant or one request may ask for.
type Limits struct {
	MaxQueuedPerTenant int   `yaml:"max_queued_per_tenant"`
	MaxRequestBytes    int64 `yaml:"max_request_bytes"`
	MaxTokensPerBatch  int   `yaml:"max_tokens_per_batch"`
	MaxSampleTokens    int   `yaml:"max_sample_tokens"`
	MaxNumSamples      int   `yaml:"max_num_samples"`
	// MaxConcurrentRequests bounds the requests being served at once (long-polls
	// included), all tenants together: one more is answered 503.
	MaxConcurrentRequests int `yaml:"max_concurrent_requests"`
	// MaxConcurrentRequestsPerTenant bounds one tenant's requests being served at once:
	// one more is answered 429.
	MaxConcurrentRequestsPerTenant int `yaml:"max_concurrent_requests_per_tenant"`
	// MaxBodyBytesInFlight bounds the request bodies held in memory at once, all tenants
	// together (503 over it); MaxBodyBytesInFlightPerTenant bounds one tenant's (429).
	MaxBodyBytesInFlight          int64 `yaml:"max_body_bytes_in_flight"`
	MaxBodyBytesInFlightPerTenant int64 `yaml:"max_body_bytes_in_flight_per_tenant"`
	// MaxDecompressionRatio refuses a compressed body that inflates more than this many
	// times its size, before it is inflated further.
	MaxDecompressionRatio int `yaml:"max_decompression_ratio"`
	// MaxStopStrings and MaxStopStringBytes bound one sample request's stop strings: their
	// count and their total length in bytes.
	MaxStopStrings     int `yaml:"max_stop_strings"`
	MaxStopStringBytes int `yaml:"max_stop_string_bytes"`
	// MaxChatMessages and MaxChatBytes bound a conversation the model's chat template
	// renders (chat completions, Anthropic messages and count_tokens): its messages, and
	// their roles' and contents' bytes together. Checked before rendering starts (400);
	// the rendered prompt is also stopped as soon as it cannot fit the model's context.
	MaxChatMessages int   `yaml:"max_chat_messages"`
	MaxChatBytes    int64 `yaml:"max_chat_bytes"`
	// MaxClientEvents and MaxClientEventBytes bound what one client telemetry request
	// puts in the server's log: its events, and each text field of one.
	MaxClientEvents     int `yaml:"max_client_events"`
	MaxClientEventBytes int `yaml:"max_client_event_bytes"`
	// SampleTimeoutSeconds is a sample request's deadline from its submission (Tinker
	// requests carry none): past it, the request leaves the batch at the next step and
	// fails. FutureTimeoutSeconds is every other operation's.
	SampleTimeoutSeconds Seconds `yaml:"sample_timeout_seconds"`
	FutureTimeoutSeconds Seconds `yaml:"future_timeout_seconds"`
	// MaxRunningPerTenant bounds one tenant's operations running at once on a base model
	// (the rest wait in its queue), so that another tenant's operation always finds a
	// free slot and joins the model's scheduler at once.
	MaxRunningPerTenant int `yaml:"max_running_per_tenant"`
	// SampleBacklogFactor bounds the sampling work a base model holds: when the KV
	// positions that accepted, unfinished sample requests may take exceed this many
	// times its KV cache, a tenant above its share of that is answered 429 (the SDK backs
	// off and resends).
	SampleBacklogFactor float64 `yaml:"sample_backlog_factor"`
	// MaxCompletionEventsPerSampler bounds the completions retrieve_futures keeps for one
	// sampling session (clone) until its client acknowledges them; the oldest go first.
	MaxCompletionEventsPerSampler int `yaml:"max_completion_events_per_sampler"`
	// MaxRetrievedRequestIDs bounds the retrieved_request_ids of one retrieve_futures poll.
	MaxRetrievedRequestIDs int `yaml:"max_retrieved_request_ids"`
	// MaxTopKSampleLogprobs bounds a sample request's topk_sample_logprobs (the
	// alternatives returned per sampled token); MaxPromptAltTokensK its
	// prompt_alt_tokens_k (tokens drawn per prompt position); MaxPromptOutputCells the
	// prompt-position outputs it may ask for: the cells of target_prompt_logprobs (dense:
	// rows×columns; sparse: the listed ones), and len(prompt)-1 times prompt_alt_tokens_k.
	MaxTopKSampleLogprobs int `yaml:"max_topk_sample_logprobs"`
	MaxPromptAltTokensK   int `yaml:"max_prompt_alt_tokens_k"`
	MaxPromptOutputCells  int `yaml:"max_prompt_output_cells"`
	// MaxSampleOutputCells and MaxSampleOutputBytes bound what one sampling request (any
	// route) may ask the server to produce, sized from its parameters before it is
	// queued: the values of its reply (samples × tokens × (1 + alternatives), prompt
	// outputs) and the reply's estimated bytes (service/output.go).
	MaxSampleOutputCells int64 `yaml:"max_sample_output_cells"`
	MaxSampleOutputBytes int64 `yaml:"max_sample_output_bytes"`

	// Per-tenant quotas on what a tenant holds (service/quota.go, docs/security.md).
	// MaxRunsPerTenant bounds a tenant's live training runs (not unloaded), and
	// MaxAdapterBytesPerTenant the memory their adapters take: weights, gradients and two
	// optimizer moments in float32, computed from each run's rank and its model's shape.
	MaxRunsPerTenant         int   `yaml:"max_runs_per_tenant"`
	MaxAdapterBytesPerTenant int64 `yaml:"max_adapter_bytes_per_tenant"`
	// MaxSessionsPerTenant bounds a tenant's open client sessions (ServiceClients that
	// have not finished and whose heartbeats have not lapsed).
	MaxSessionsPerTenant int `yaml:"max_sessions_per_tenant"`
	// MaxSamplersPerTenant bounds a tenant's open sampling sessions (those of
	// save_weights_and_get_sampling_client included).
	MaxSamplersPerTenant int `yaml:"max_samplers_per_tenant"`
	// MaxEphemeralSamplersPerRun is how many sampling sessions made by a run's
	// save_weights_and_get_sampling_client stay open: the SDK never releases them (an RL
	// loop makes one per iteration), so a newer one releases the run's oldest past this
	// number, and also when the tenant is at limits.max_samplers_per_tenant.
	MaxEphemeralSamplersPerRun int `yaml:"max_ephemeral_samplers_per_run"`
	// MaxExportsPerTenant bounds a tenant's checkpoint exports running at once (a merged
	// export holds a tensor of the model at a time and writes the model to a temporary
	// directory): one more is answered 429 with Retry-After.
	MaxExportsPerTenant int `yaml:"max_exports_per_tenant"`
	// MaxMetadataBytes bounds one record's client metadata (a session's tags and
	// user_metadata, a run's or a checkpoint's user_metadata, as JSON);
	// MaxMetadataBytesPerTenant bounds all of a tenant's held in memory (its open
	// sessions and live runs, and its checkpoints).
	MaxMetadataBytes          int   `yaml:"max_metadata_bytes"`
	MaxMetadataBytesPerTenant int64 `yaml:"max_metadata_bytes_per_tenant"`
	// MaxDiskBytesPerTenant bounds the bytes a tenant's runs hold under checkpoint_dir:
	// checkpoints (external and copies included), sampler weights of open sampling
	// sessions, autosaves and inflight targets. A save that would pass it is refused
	// before anything is written.
	MaxDiskBytesPerTenant int64 `yaml:"max_disk_bytes_per_tenant"`
	// MaxMetricPointsPerRun bounds a training run's metric history (one point per
	// forward_backward and optim_step, GET /training_runs/{id}/metrics): past it the
	// oldest points are dropped, and the history says how many.
	MaxMetricPointsPerRun int `yaml:"max_metric_points_per_run"`
	// MaxMetricStreamsPerTenant bounds a tenant's open metric streams
	// (GET /training_runs/{id}/metrics/stream): a stream holds no request slot of
	// max_concurrent_requests_per_tenant once it has started, so it is counted here.
	MaxMetricStreamsPerTenant int `yaml:"max_metric_streams_per_tenant"`
	// MaxSpansPerSession bounds the spans kept for one session (sessions.record_spans):
	// past it the oldest go first, and the record counts them as dropped. It also bounds a
	// tenant's spans waiting for the recorder (20 ms at most).
	// MaxTracedSessionsPerTenant bounds the sessions whose spans a tenant keeps: a span
	// of one more session deletes the spans of the tenant's least recently traced one.
	MaxSpansPerSession         int `yaml:"max_spans_per_session"`
	MaxTracedSessionsPerTenant int `yaml:"max_traced_sessions_per_tenant"`
	// AuditRetentionSeconds is how long an audit-log entry (GET /api/v1/audit) is kept;
	// MaxAuditEventsPerTenantPerDay bounds a tenant's entries of one UTC day (past it, an
	// operation still runs, its entry is not kept, and the server logs that once a day).
	AuditRetentionSeconds         Seconds `yaml:"audit_retention_seconds"`
	MaxAuditEventsPerTenantPerDay int     `yaml:"max_audit_events_per_tenant_per_day"`
}

// Billing holds the prices of the usage the server records (tokens trained, prefilled
// and sampled, kept in hourly buckets) and how long it keeps those buckets. Prices are
// in US dollars; 0 (the default) reports a zero cost.
type Billing struct {
	// UsageRetentionDays is how long hourly usage buckets are kept (GET /usage reads at
	// most 90 days, GET /billing/usage/events 14).
	UsageRetentionDays int `yaml:"usage_retention_days"`
	// USDPerMillionTrainingTokens, ...Prefill..., ...CachedPrefill..., ...Sample... price
	// the token kinds (cached prefill: prompt tokens served from the prefix cache).
	USDPerMillionTrainingTokens      float64 `yaml:"usd_per_million_training_tokens"`
	USDPerMillionPrefillTokens       float64 `yaml:"usd_per_million_prefill_tokens"`
	USDPerMillionCachedPrefillTokens float64 `yaml:"usd_per_million_cached_prefill_tokens"`
	USDPerMillionSampleTokens        float64 `yaml:"usd_per_million_sample_tokens"`
	// USDPerGBMonthStorage prices checkpoint storage (one GB-month is 720 GB-hours).
	USDPerGBMonthStorage float64 `yaml:"usd_per_gb_month_storage"`
}

// Inference configures the OpenAI- and Anthropic-compatible routes.
type Inference struct {
	// MaxAdapters is how many checkpoints named by those routes stay loaded (least
	// recently used ones are dropped first; ones in use never are).
	MaxAdapters int `yaml:"max_adapters"`
}

// MaxTTLSeconds is the longest time-to-live, in seconds, anything accepts (100 years): far
// below what overflows a time.Duration (about 292 years).
const MaxTTLSeconds = 100 * 365 * 86400

// DefaultModelName is the base_model name of the built-in model served without a config.
const DefaultModelName = "tuft/tiny"

// Default returns the embedded defaults: the built-in tiny model, the embedded store under
// home, checkpoints under home.
func Default(home string) Config {
	return Config{
		Server: Server{Host: "127.0.0.1", Port: 10610, LogLevel: "info", LongPollSeconds: 30, ShutdownTimeoutSeconds: 30,
			ReadHeaderTimeoutSeconds: 10, ReadBodyTimeoutSeconds: 120, IdleTimeoutSeconds: 120, MaxConnections: 8192,
			MaxConnectionsPerAddress: 1024, UnauthenticatedIdleTimeoutSeconds: 5, OperationWorkers: 16},
		Models: []Model{{Name: DefaultModelName, Preset: "tiny"}},
		Persistence: Persistence{
			Mode: "embedded", Namespace: "tuft", FutureTTLSeconds: 86400,
		},
		Sessions: Sessions{HeartbeatTimeoutSeconds: 300, SeqGapTimeoutSeconds: 300, FinishedRetentionSeconds: 240, RecordSpans: true},
		Console:  Console{Enabled: true, SessionTTLSeconds: 43200, MaxSessions: 4096, MaxSessionsPerTenant: 64},
		Limits: Limits{MaxQueuedPerTenant: 256, MaxRequestBytes: 64 << 20, MaxTokensPerBatch: 262144, MaxSampleTokens: 4096, MaxNumSamples: 128,
			MaxConcurrentRequests: 4096, MaxConcurrentRequestsPerTenant: 512, MaxBodyBytesInFlight: 1 << 30, MaxBodyBytesInFlightPerTenant: 256 << 20,
			MaxDecompressionRatio: 100, MaxStopStrings: 16, MaxStopStringBytes: 4096,
			MaxChatMessages: 4096, MaxChatBytes: 8 << 20, MaxClientEvents: 100, MaxClientEventBytes: 8192,
			SampleTimeoutSeconds: 600, FutureTimeoutSeconds: 3600, MaxRunningPerTenant: 32, SampleBacklogFactor: 4,
			MaxCompletionEventsPerSampler: 100000, MaxRetrievedRequestIDs: 10000,
			MaxTopKSampleLogprobs: 20, MaxPromptAltTokensK: 32, MaxPromptOutputCells: 262144,
			MaxSampleOutputCells: 1 << 20, MaxSampleOutputBytes: 32 << 20,
			MaxSessionsPerTenant: 1024, MaxRunsPerTenant: 256, MaxAdapterBytesPerTenant: 8 << 30, MaxSamplersPerTenant: 256, MaxEphemeralSamplersPerRun: 8, MaxExportsPerTenant: 1,
			MaxMetadataBytes: 64 << 10, MaxMetadataBytesPerTenant: 16 << 20, MaxDiskBytesPerTenant: 100 << 30,
			MaxMetricPointsPerRun: 4096, MaxMetricStreamsPerTenant: 16,
			MaxSpansPerSession: 4096, MaxTracedSessionsPerTenant: 64, AuditRetentionSeconds: 90 * 86400, MaxAuditEventsPerTenantPerDay: 100000},
		Billing:   Billing{UsageRetentionDays: 90},
		Inference: Inference{MaxAdapters: 16},
		Workers:   Workers{CallTimeoutSeconds: 600, StartTimeoutSeconds: 120, CheckSeconds: 5},
		Worker:    Worker{Listen: "127.0.0.1:10620", HeartbeatSeconds: 5},
		Telemetry: telemetry.DefaultConfig(),
		Engine: Engine{Device: "auto", CPUWeightFormat: "bf16", CPUPrepackBytes: 2 << 30, CPUDecodeSpin: true, CUDAGraphs: true, CUDAGraphsMax: 32, CUDAGEMV: true, Scheduler: Scheduler{MaxBatchSize: 128, StepTokenBudget: 256, PrefillChunkTokens: 128,
			KVCacheBytes: 1 << 30, PrefixCacheEntries: 1024, TrainPackTokens: 512, TrainShare: 0.5}},
		Home: home,
	}
}

// FutureTTL is persistence.future_ttl_seconds as a duration.
func (c Config) FutureTTL() time.Duration {
	return time.Duration(c.Persistence.FutureTTLSeconds) * time.Second
}

// LongPoll is server.long_poll_seconds as a duration.
func (c Config) LongPoll() time.Duration {
	return c.Server.LongPollSeconds.Duration()
}

// HeartbeatTimeout is sessions.heartbeat_timeout_seconds as a duration.
func (c Config) HeartbeatTimeout() time.Duration {
	return c.Sessions.HeartbeatTimeoutSeconds.Duration()
}

// FinishedRetention is sessions.finished_retention_seconds as a duration.
func (c Config) FinishedRetention() time.Duration {
	return c.Sessions.FinishedRetentionSeconds.Duration()
}

// SeqGapTimeout is sessions.seq_gap_timeout_seconds as a duration.
func (c Config) SeqGapTimeout() time.Duration {
	return c.Sessions.SeqGapTimeoutSeconds.Duration()
}

// Model returns the configured model named name.
func (c Config) Model(name string) (Model, bool) {
	for _, m := range c.Models {
		if m.Name == name {
			return m, true
		}
	}
	return Model{}, false
}
