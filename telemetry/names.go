package telemetry

import "strings"

// Every span name, attribute key and metric name of ../shared/spec/observability.md is
// defined here, once. These are stable API: dashboards and alerts are built on them.

// Tracer (instrumentation scope) names.
const (
	ScopeHTTP               = "tuft.http"
	ScopeFutures            = "tuft.futures"
	ScopeTrainingController = "tuft.training_controller"
	ScopeSamplingController = "tuft.sampling_controller"
	ScopeTrainingBackend    = "tuft.training_backend"
	ScopeSamplingBackend    = "tuft.sampling_backend"
	ScopeModel              = "tuft.hf_training_model"
	ScopeStore              = "tuft.store"
	ScopeRedis              = "tuft.redis_store"
	ScopeWorker             = "tuft.worker"
	ScopeClient             = "tuft.client"
)

// Span names.
const (
	SpanFutureExecute = "future_store.execute_operation"

	SpanTCCreateModel        = "training_controller.create_model"
	SpanTCRunForward         = "training_controller.run_forward"
	SpanTCRunForwardBackward = "training_controller.run_forward_backward"
	SpanTCRunOptimStep       = "training_controller.run_optim_step"
	SpanTCSaveCheckpoint     = "training_controller.save_checkpoint"
	SpanTCLoadCheckpoint     = "training_controller.load_checkpoint"
	SpanTCUnloadModel        = "training_controller.unload_model"
	// SpanTCCopyCheckpoint is copy_weights copying a checkpoint into a run of the caller's.
	SpanTCCopyCheckpoint = "training_controller.copy_checkpoint"

	SpanSCCreateSamplingSession = "sampling_controller.create_sampling_session"
	SpanSCRunSample             = "sampling_controller.run_sample"
	// SpanSCCancelSample is cancel_future (SDK >= 0.26) stopping a sampling request.
	SpanSCCancelSample = "sampling_controller.cancel_sample"
	// SpanSCJoinSamplingSession allocates a cloned sampling client's counter.
	SpanSCJoinSamplingSession = "sampling_controller.join_sampling_session"

	SpanTBForward         = "training_backend.forward"
	SpanTBForwardBackward = "training_backend.forward_backward"
	SpanTBOptimStep       = "training_backend.optim_step"
	SpanTBSaveState       = "training_backend.save_state"
	SpanTBLoadState       = "training_backend.load_state"
	SpanTBCreateAdapter   = "training_backend.create_adapter"
	SpanTBRemoveAdapter   = "training_backend.remove_adapter"
	// SpanTBExport writes a checkpoint in an export format (docs/export.md).
	SpanTBExport = "training_backend.export"

	SpanSBSample        = "sampling_backend.sample"
	SpanSBAddAdapter    = "sampling_backend.add_adapter"
	SpanSBRemoveAdapter = "sampling_backend.remove_adapter"

	SpanHFForward         = "hf_model.forward"
	SpanHFForwardBackward = "hf_model.forward_backward"
	SpanHFOptimStep       = "hf_model.optim_step"
	SpanHFSaveState       = "hf_model.save_state"
	SpanHFLoadState       = "hf_model.load_state"
	SpanHFCreateAdapter   = "hf_model.create_adapter"
	SpanHFSample          = "hf_model.sample"

	SpanSamplePreprocess  = "sample.preprocess"
	SpanSampleSchedule    = "sample.schedule"
	SpanSamplePrefill     = "sample.prefill"
	SpanSampleDecode      = "sample.decode"
	SpanSamplePostprocess = "sample.postprocess"
	EventFirstToken       = "first_token"
	// SpanSamplePrefix is the common prefix of the sampling lifecycle slices.
	SpanSamplePrefix = "sample."

	SpanRedisSET  = "redis.SET"
	SpanRedisGET  = "redis.GET"
	SpanRedisDEL  = "redis.DEL"
	SpanRedisSCAN = "redis.SCAN"
	// SpanRedisPrefix prefixes "the other commands used" (spec §3): redis.<COMMAND>.
	SpanRedisPrefix = "redis."
	SpanStoreSET    = "store.SET"
	SpanStoreGET    = "store.GET"
	SpanStoreDEL    = "store.DEL"
	SpanStoreSCAN   = "store.SCAN"
)

// Span attribute keys: the correlation ("share") keys and the per-layer attributes.
const (
	AttrSessionID         = "tuft.session_id"
	AttrTrainingRunID     = "tuft.training_run_id"
	AttrSamplingSessionID = "tuft.sampling_session_id"
	AttrRequestID         = "tuft.request_id"
	AttrOperationType     = "tuft.operation_type"
	AttrBaseModel         = "tuft.base_model"
	AttrLoraRank          = "tuft.lora_rank"
	AttrBackward          = "tuft.backward"
	AttrModelID           = "tuft.model_id"
	AttrQueueWaitMs       = "tuft.queue_wait_ms"
	AttrDataCount         = "tuft.data_count"
	AttrLossFn            = "tuft.loss_fn"
	AttrLearningRate      = "tuft.learning_rate"
	AttrCheckpointType    = "tuft.checkpoint_type"
	AttrSeqID             = "tuft.seq_id"
	AttrNumSamples        = "tuft.num_samples"
	AttrLoraID            = "tuft.lora_id"
	AttrHasLora           = "tuft.has_lora"
	AttrNumMicroBatches   = "tuft.num_micro_batches"
	AttrBatchAdapters     = "tuft.batch_adapters" // requests of different adapters run in one engine batch
	AttrTokens            = "tuft.tokens"
	AttrOptimizer         = "tuft.optimizer" // a save or load includes the optimizer state
	// AttrOptimizerFamily is the optimizer family of a step, a load or a run (adamw, dimuon).
	AttrOptimizerFamily = "tuft.optimizer_family"
	// AttrSamplerKind is a sampler save's kind: snapshot or inflight.
	AttrSamplerKind = "tuft.sampler_kind"
	// AttrExportFormat is a checkpoint export's format: peft, hf, gguf or gguf-lora.
	AttrExportFormat = "tuft.export_format"
	// AttrCancelOutcome is what cancel_future did: cancelled_queued, cancelled_running
	// or already_done.
	AttrCancelOutcome = "tuft.cancel_outcome"
	// AttrClientCounter is the counter join_sampling_session gave a cloned client.
	AttrClientCounter = "tuft.client_counter"
	// AttrCheckpointPath is the tinker:// path of the checkpoint an operation made.
	AttrCheckpointPath = "tuft.checkpoint_path"
	// AttrQuotaLimit is the config key of the per-tenant quota that refused a request
	// (limits.max_runs_per_tenant, ...), on its HTTP span.
	AttrQuotaLimit = "tuft.quota_limit"
	// AttrEncrypted says an export's files are age-encrypted (save_weights_external).
	AttrEncrypted    = "tuft.encrypted"
	AttrPromptTokens = "tuft.prompt_tokens"
	AttrOutputTokens = "tuft.output_tokens"
	AttrTenant       = "tuft.tenant"
	AttrRole         = "tuft.role"

	AttrGenAIRequestModel  = "gen_ai.request.model"
	AttrGenAIInputTokens   = "gen_ai.usage.input_tokens"
	AttrGenAIOutputTokens  = "gen_ai.usage.output_tokens"
	AttrGenAIFinishReasons = "gen_ai.response.finish_reasons"
	AttrDBSystem           = "db.system"
	AttrDBOperation        = "db.operation"

	// Scheduler attributes of hf_model.sample (and tuft.queue_wait_ms on its
	// sample.schedule slice): the decode steps a request ran in held this many sequences
	// at most and on average; preemptions counts the times its memory was taken back
	// (it was recomputed later); prompt_cache_hit_tokens the prompt positions served
	// from the prefix cache.
	AttrBatchSizeMax         = "tuft.batch_size.max"
	AttrBatchSizeMean        = "tuft.batch_size.mean"
	AttrPreemptions          = "tuft.preemptions"
	AttrPromptCacheHitTokens = "tuft.prompt_cache_hit_tokens"

	// AttrTimeToFirstToken is the first_token event's delay since the request reached the
	// model executor, in milliseconds.
	AttrTimeToFirstToken = "tuft.time_to_first_token_ms"
	// AttrLink names why a span links to another (the future's link to the request that
	// enqueued it: LinkEnqueuedBy).
	AttrLink       = "tuft.link"
	LinkEnqueuedBy = "enqueued_by"
	// AttrRedisNumCmd is the number of commands in a Redis pipeline or transaction.
	AttrRedisNumCmd = "db.redis.num_cmd"
	// AttrSmoke marks the spans `tuft smoke` sends.
	AttrSmoke = "tuft.smoke"

	// The OpenAI- and Anthropic-compatible routes (OpenTelemetry gen_ai semantic
	// conventions), on their HTTP server spans.
	AttrGenAIOperationName      = "gen_ai.operation.name" // GenAIOpChat | GenAIOpTextCompletion
	AttrGenAIRequestMaxTokens   = "gen_ai.request.max_tokens"
	AttrGenAIRequestTemperature = "gen_ai.request.temperature"
	AttrGenAIRequestTopP        = "gen_ai.request.top_p"
	AttrGenAIRequestTopK        = "gen_ai.request.top_k"
	AttrGenAIRequestSeed        = "gen_ai.request.seed"
	AttrGenAIRequestChoiceCount = "gen_ai.request.choice.count"
	AttrGenAIResponseID         = "gen_ai.response.id"
	AttrGenAIResponseModel      = "gen_ai.response.model"
)

// Span names of the Go client SDK (tracer ScopeClient): tuft.client.<operation>.
const (
	SpanClientCreateModel     = "tuft.client.create_model"
	SpanClientForwardBackward = "tuft.client.forward_backward"
	SpanClientOptimStep       = "tuft.client.optim_step"
	SpanClientSample          = "tuft.client.sample"
)

// Log attribute keys of the Tinker SDK's telemetry events, which the API turns into log
// records correlated with the client's session (exception.* are the semantic
// conventions' keys).
const (
	LogSource            = "source"
	LogTenant            = "tenant"
	LogClientEvent       = "client.event"
	LogClientEventID     = "client.event_id"
	LogClientEventName   = "client.event_name"
	LogClientEventData   = "client.event_data"
	LogClientPlatform    = "client.platform"
	LogClientSDKVersion  = "client.sdk_version"
	LogClientProcessUUID = "client.process_uuid"
	LogClientTimestamp   = "client.timestamp"
	LogClientDuration    = "client.duration"
	LogClientSeverity    = "client.severity"
	LogExceptionType     = "exception.type"
	LogExceptionMessage  = "exception.message"
	LogExceptionTrace    = "exception.stacktrace"
)

// Operation types (values of tuft.operation_type and the operation_type metric attribute).
const (
	OpCreateModel           = "create_model"
	OpForward               = "forward"
	OpForwardBackward       = "forward_backward"
	OpOptimStep             = "optim_step"
	OpSaveWeights           = "save_weights"
	OpSaveWeightsForSampler = "save_weights_for_sampler"
	OpLoadWeights           = "load_weights"
	OpSample                = "sample"
	OpUnloadModel           = "unload_model"
	// OpSaveWeightsExternal is SDK 0.28's export in Hugging Face PEFT format.
	OpSaveWeightsExternal = "save_weights_external"
	// OpCopyWeights is copy_weights (synchronous: no future).
	OpCopyWeights = "copy_weights"
)

// Values of gen_ai.operation.name.
const (
	GenAIOpChat           = "chat"
	GenAIOpTextCompletion = "text_completion"
)

// Meter names.
const (
	MeterTuft      = "tuft"
	MeterResources = "tuft.resources"
)

// Metric names (meter "tuft").
const (
	MetricTrainingModelsActive     = "tuft.training.models.active"
	MetricTrainingTokensPerSecond  = "tuft.training.tokens_per_second"
	MetricTrainingCheckpointsSaved = "tuft.training.checkpoints.saved"
	MetricTrainingCheckpointSize   = "tuft.training.checkpoint.size_bytes"
	MetricSamplingSessionsActive   = "tuft.sampling.sessions.active"
	MetricSamplingRequests         = "tuft.sampling.requests"
	MetricSamplingDuration         = "tuft.sampling.duration"
	MetricSamplingTokensPerSecond  = "tuft.sampling.tokens_per_second"
	MetricSamplingOutputTokens     = "tuft.sampling.output_tokens"
	MetricFuturesQueueLength       = "tuft.futures.queue_length"
	MetricFuturesCreated           = "tuft.futures.created"
	MetricFuturesCompleted         = "tuft.futures.completed"
	MetricFuturesWaitTime          = "tuft.futures.wait_time"
	MetricFuturesExecutionTime     = "tuft.futures.execution_time"
	MetricRedisOperationDuration   = "tuft.redis.operation.duration"
	// MetricStoreWriteFailures counts record writes that failed where no caller could be
	// told (a background pass): each is also logged with its key.
	MetricStoreWriteFailures = "tuft.store.write_failures"
	// MetricHTTPConnectionsClosed counts client connections the server closed to keep its
	// connection slots (api/conn.go), by reason: ConnEvictedIdle, ConnKeylessIdle,
	// ConnRefusedFull, ConnRefusedAddress.
	MetricHTTPConnectionsClosed = "tuft.http.connections.closed"
	// MetricSessionSpansDropped counts spans the session-span record did not keep or no
	// longer keeps (sessions.record_spans), by reason: SpanDropQueueFull,
	// SpanDropSessionBound, SpanDropSessionEvicted.
	MetricSessionSpansDropped = "tuft.session_spans.dropped"
	// MetricAuditEvents counts audit-log entries (GET /api/v1/audit), by MAttrEvent and
	// MAttrStatus (AuditKept, AuditOverDayLimit, AuditWriteFailed).
	MetricAuditEvents = "tuft.audit.events"
	// MetricUsageTokens counts the tokens tenants trained, prefilled and sampled (what the
	// usage and billing routes report), by base_model and kind (UsageKind*).
	MetricUsageTokens = "tuft.usage.tokens"
	// MetricMetricStreamsActive counts the open training-metric streams
	// (GET /api/v1/training_runs/{run_id}/metrics/stream).
	MetricMetricStreamsActive = "tuft.training.metric_streams.active"
)

// Metrics of the semantic conventions, beside the contract's (spec: "where this file is
// silent, do what the semantic conventions say").
const (
	// MetricHTTPServerDuration is the standard HTTP server duration (meter ScopeHTTP).
	MetricHTTPServerDuration = "http.server.request.duration"
	// MetricDBClientOperationDuration is the embedded store's operation duration (meter
	// ScopeStore), with MAttrDBSystemName and MAttrDBOperationName. The contract's
	// tuft.redis.operation.duration stays Redis's own.
	MetricDBClientOperationDuration = "db.client.operation.duration"
)

// Resource gauge names (meter "tuft.resources").
const (
	MetricCPUUtilization    = "tuft.resource.cpu.utilization_percent"
	MetricMemoryUsed        = "tuft.resource.memory.used_bytes"
	MetricMemoryTotal       = "tuft.resource.memory.total_bytes"
	MetricMemoryUtilization = "tuft.resource.memory.utilization_percent"
	MetricProcessMemoryUsed = "tuft.resource.process.memory_used_bytes"
	MetricGPUUtilization    = "tuft.resource.gpu.utilization_percent"
	MetricGPUMemoryUsed     = "tuft.resource.gpu.memory_used_bytes"
	MetricGPUMemoryTotal    = "tuft.resource.gpu.memory_total_bytes"
)

// Reasons of tuft.http.connections.closed.
const (
	ConnEvictedIdle    = "evicted_idle"         // an idle connection made room for a new one
	ConnKeylessIdle    = "keyless_idle_timeout" // idle past server.unauthenticated_idle_timeout_seconds
	ConnRefusedFull    = "refused_full"         // new, at server.max_connections with none idle
	ConnRefusedAddress = "refused_address"      // new, at server.max_connections_per_address with none idle
)

// Metric attribute keys (low cardinality only).
const (
	MAttrBaseModel      = "base_model"
	MAttrModelID        = "model_id"
	MAttrCheckpointType = "checkpoint_type"
	MAttrQueueState     = "queue_state"
	MAttrOperationType  = "operation_type"
	MAttrStatus         = "status"
	MAttrOperation      = "operation"
	MAttrReason         = "reason"
	MAttrEvent          = "event" // an audit-log event (checkpoint_save, apikey_read, ...)
	// MAttrKind is a usage kind on tuft.usage.tokens: training, sampling_prefill,
	// sampling_prefill_cached, sampling_sample.
	MAttrKind  = "kind"
	MAttrGPUID = "gpu_id"

	MAttrDBSystemName    = "db.system.name"
	MAttrDBOperationName = "db.operation.name"
)

// Span names of the store operations the spec leaves to "the other commands used".
const (
	SpanStoreAPPLY = "store.APPLY"
	SpanStoreSETNX = "store.SETNX"
	SpanStoreCLEAR = "store.CLEAR"
)

// RedisSpan is the span name of Redis command op (upper case): the constant for the
// commands the contract lists, redis.<op> for the others.
func RedisSpan(op string) string {
	switch op {
	case "SET":
		return SpanRedisSET
	case "GET":
		return SpanRedisGET
	case "DEL":
		return SpanRedisDEL
	case "SCAN":
		return SpanRedisSCAN
	}
	return SpanRedisPrefix + op
}

// SampleSpan is the span name of the sampling lifecycle phase the engine reports
// ("preprocess", "prefill", …).
func SampleSpan(phase string) string {
	switch phase {
	case "preprocess":
		return SpanSamplePreprocess
	case "schedule":
		return SpanSampleSchedule
	case "prefill":
		return SpanSamplePrefill
	case "decode":
		return SpanSampleDecode
	case "postprocess":
		return SpanSamplePostprocess
	}
	return SpanSamplePrefix + strings.ToLower(phase)
}

// Values of the reason attribute of tuft.session_spans.dropped.
const (
	SpanDropQueueFull      = "queue_full"      // the recorder's queue held limits.max_spans_per_session spans of the tenant
	SpanDropSessionBound   = "session_bound"   // an older span of a session past limits.max_spans_per_session
	SpanDropSessionEvicted = "session_evicted" // a session's spans, for limits.max_traced_sessions_per_tenant
)

// Values of the status attribute of tuft.audit.events.
const (
	AuditKept         = "kept"
	AuditOverDayLimit = "over_day_limit" // limits.max_audit_events_per_tenant_per_day
	AuditWriteFailed  = "write_failed"
)
