package telemetry

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

	SpanSCCreateSamplingSession = "sampling_controller.create_sampling_session"
	SpanSCRunSample             = "sampling_controller.run_sample"

	SpanTBForward         = "training_backend.forward"
	SpanTBForwardBackward = "training_backend.forward_backward"
	SpanTBOptimStep       = "training_backend.optim_step"
	SpanTBSaveState       = "training_backend.save_state"
	SpanTBLoadState       = "training_backend.load_state"
	SpanTBCreateAdapter   = "training_backend.create_adapter"
	SpanTBRemoveAdapter   = "training_backend.remove_adapter"

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

	SpanRedisSET  = "redis.SET"
	SpanRedisGET  = "redis.GET"
	SpanRedisDEL  = "redis.DEL"
	SpanRedisSCAN = "redis.SCAN"
	SpanStoreSET  = "store.SET"
	SpanStoreGET  = "store.GET"
	SpanStoreDEL  = "store.DEL"
	SpanStoreSCAN = "store.SCAN"
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
	AttrOptimizer         = "tuft.optimizer"
	AttrPromptTokens      = "tuft.prompt_tokens"
	AttrOutputTokens      = "tuft.output_tokens"
	AttrTenant            = "tuft.tenant"
	AttrRole              = "tuft.role"

	AttrGenAIRequestModel  = "gen_ai.request.model"
	AttrGenAIInputTokens   = "gen_ai.usage.input_tokens"
	AttrGenAIOutputTokens  = "gen_ai.usage.output_tokens"
	AttrGenAIFinishReasons = "gen_ai.response.finish_reasons"
	AttrDBSystem           = "db.system"
	AttrDBOperation        = "db.operation"
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
	// OpSaveWeightsExternal is SDK 0.28's export, refused for now (its seq_id is settled).
	OpSaveWeightsExternal = "save_weights_external"
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

// Metric attribute keys (low cardinality only).
const (
	MAttrBaseModel      = "base_model"
	MAttrModelID        = "model_id"
	MAttrCheckpointType = "checkpoint_type"
	MAttrQueueState     = "queue_state"
	MAttrOperationType  = "operation_type"
	MAttrStatus         = "status"
	MAttrOperation      = "operation"
	MAttrGPUID          = "gpu_id"
)

// Span names of the store operations the spec leaves to "the other commands used".
const (
	SpanStoreAPPLY = "store.APPLY"
	SpanStoreSETNX = "store.SETNX"
	SpanStoreCLEAR = "store.CLEAR"
)
