// Package wire defines the Tinker API's wire formats in one place: the JSON bodies of
// every route (as SDK 0.18–0.38 send and accept them) and the protobuf codecs of
// forward_backward requests and of ForwardBackwardOutput / SampleResponse results.
// Decoders validate everything they read and report errors that name the field.
// Request fields are honoured or refused, never ignored (see DecodeRequest): a field a
// newer SDK adds is accepted only while it holds its zero value.
//
// The package holds the Tinker domain types too (tinker.go: Datum, Tensor,
// ForwardBackwardOutput, SampleInput, SampleResponse), what the codecs decode into and
// encode from. It imports nothing of the engine, so the public client does not; package
// api converts between these types and the engine's (api/convert.go).
package wire

import (
	"encoding/json"
	"reflect"
	"strconv"
	"time"
)

// ClientConfigResponse is what POST /client/config advertises.
type ClientConfigResponse struct {
	PJWTAuthEnabled            bool   `json:"pjwt_auth_enabled"`
	CredentialDefaultSource    string `json:"credential_default_source"`
	ParallelFwdbwdChunks       bool   `json:"parallel_fwdbwd_chunks"`
	ProtoWriteFwdbwd           bool   `json:"proto_write_fwdbwd"`
	ProtoCompressFwdbwd        bool   `json:"proto_compress_fwdbwd"`
	FwdViaFwdbwd               bool   `json:"fwd_via_fwdbwd"`
	UsePyqwestTransport        bool   `json:"use_pyqwest_transport"`
	CreateModelViaLoadWeights  bool   `json:"create_model_via_load_weights"`
	SampleNoRetries            bool   `json:"sample_no_retries"`
	SampleEnableStuckDetection bool   `json:"sample_enable_stuck_detection"`
	// SampleUseRetrieveFutures: a SamplingClient polls /retrieve_futures once per
	// sampling session instead of one retrieve_future long-poll per request (SDK >= 0.26.2).
	SampleUseRetrieveFutures bool `json:"sample_use_retrieve_futures"`
	// SampleJoinSamplingSession: a cloned SamplingClient asks /join_sampling_session for
	// its counter instead of picking a random one (SDK >= 0.32).
	SampleJoinSamplingSession bool `json:"sample_join_sampling_session"`
	// CustomLossServerSide stays false: custom losses run in the SDK.
	CustomLossServerSide bool `json:"custom_loss_server_side"`
}

// ServerClientConfig is this server's client configuration: plain API keys, chunks
// submitted serially (so an SDK's seq_ids arrive in order, which the run queues rely on:
// a seq_id the SDK skipped is never waited for), protobuf forward_backward for every
// SDK ≥ 0.18.2, the plain httpx transport.
func ServerClientConfig() ClientConfigResponse {
	return ClientConfigResponse{CredentialDefaultSource: "api_key", ProtoWriteFwdbwd: true, SampleEnableStuckDetection: true,
		SampleUseRetrieveFutures: true, SampleJoinSamplingSession: true}
}

// ClientDynamicConfigResponse answers POST /client/dynamic_config.
type ClientDynamicConfigResponse struct {
	RefreshIntervalSec int `json:"refresh_interval_sec"`
	// SampleCancelEnabled: the SDK sends /cancel_future for a sample whose caller gave
	// up (SDK >= 0.26), at most SampleCancelMaxBatchSize at once.
	SampleCancelEnabled      bool `json:"sample_cancel_enabled"`
	SampleCancelMaxBatchSize int  `json:"sample_cancel_max_batch_size"`
}

// ServerDynamicConfig is this server's dynamic client configuration.
func ServerDynamicConfig() ClientDynamicConfigResponse {
	return ClientDynamicConfigResponse{RefreshIntervalSec: 300, SampleCancelEnabled: true, SampleCancelMaxBatchSize: 64}
}

// HealthResponse answers GET /healthz.
type HealthResponse struct {
	Status string `json:"status"`
}

// SupportedModel is one entry of the server capabilities.
type SupportedModel struct {
	ModelName        *string `json:"model_name,omitempty"`
	MaxContextLength *int    `json:"max_context_length,omitempty"`
	Trainable        *bool   `json:"trainable,omitempty"`  // SDK >= 0.26
	Sampleable       *bool   `json:"sampleable,omitempty"` // SDK >= 0.26
}

// GetServerCapabilitiesResponse answers GET /get_server_capabilities.
type GetServerCapabilitiesResponse struct {
	SupportedModels []SupportedModel `json:"supported_models"`
}

// CreateSessionRequest is POST /create_session.
type CreateSessionRequest struct {
	Tags         []string       `json:"tags"`
	UserMetadata map[string]any `json:"user_metadata"`
	SDKVersion   string         `json:"sdk_version"`
	ProjectID    *string        `json:"project_id,omitempty"`
	DisplayName  *string        `json:"display_name,omitempty"` // SDK >= 0.34
	Type         string         `json:"type,omitempty"`
}

// CreateSessionResponse answers create_session.
type CreateSessionResponse struct {
	SessionID      string  `json:"session_id"`
	Type           string  `json:"type,omitempty"`
	InfoMessage    *string `json:"info_message,omitempty"`
	WarningMessage *string `json:"warning_message,omitempty"`
	ErrorMessage   *string `json:"error_message,omitempty"`
}

// SessionHeartbeatRequest is POST /session_heartbeat.
type SessionHeartbeatRequest struct {
	SessionID string `json:"session_id"`
	Type      string `json:"type,omitempty"`
}

// SessionHeartbeatResponse answers a heartbeat.
type SessionHeartbeatResponse struct {
	Type string `json:"type,omitempty"`
}

// CreateSamplingSessionRequest is POST /create_sampling_session.
type CreateSamplingSessionRequest struct {
	SessionID            string  `json:"session_id"`
	SamplingSessionSeqID int64   `json:"sampling_session_seq_id"`
	BaseModel            *string `json:"base_model,omitempty"`
	ModelPath            *string `json:"model_path,omitempty"`
	Type                 string  `json:"type,omitempty"`
}

// CreateSamplingSessionResponse answers create_sampling_session.
type CreateSamplingSessionResponse struct {
	SamplingSessionID string `json:"sampling_session_id"`
	Type              string `json:"type,omitempty"`
}

// GetSamplerResponse answers GET /samplers/{id}.
type GetSamplerResponse struct {
	SamplerID string  `json:"sampler_id"`
	BaseModel string  `json:"base_model"`
	ModelPath *string `json:"model_path,omitempty"`
}

// LoraConfig is create_model's lora_config; the train_* flags default to true.
type LoraConfig struct {
	Rank         int    `json:"rank"`
	Seed         *int64 `json:"seed,omitempty"`
	TrainUnembed bool   `json:"train_unembed"`
	TrainMLP     bool   `json:"train_mlp"`
	TrainAttn    bool   `json:"train_attn"`
}

// UnmarshalJSON applies the SDK's defaults (rank 32, every train flag true).
func (l *LoraConfig) UnmarshalJSON(b []byte) error {
	type raw LoraConfig
	r := raw{Rank: 32, TrainUnembed: true, TrainMLP: true, TrainAttn: true}
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	*l = LoraConfig(r)
	return nil
}

// CreateModelRequest is POST /create_model.
type CreateModelRequest struct {
	SessionID    string         `json:"session_id"`
	ModelSeqID   int64          `json:"model_seq_id"`
	BaseModel    string         `json:"base_model"`
	UserMetadata map[string]any `json:"user_metadata,omitempty"`
	LoraConfig   *LoraConfig    `json:"lora_config,omitempty"`
	// OptimizerConfig fixes the run's optimizer (SDK >= 0.29.1 always sends it).
	OptimizerConfig *OptimizerConfig `json:"optimizer_config,omitempty"`
	Type            string           `json:"type,omitempty"`
}

// UntypedAPIFuture answers every operation that returns a future. SampleSequenceIDs is
// set on /asample replies only: one id per sample, in the order of the final sequences
// (SDK >= 0.26 requires them; older SDKs ignore the field).
type UntypedAPIFuture struct {
	RequestID         string   `json:"request_id"`
	ModelID           *string  `json:"model_id,omitempty"`
	SampleSequenceIDs []string `json:"sample_sequence_ids,omitempty"`
}

// SampleSequenceIDs names the sequences of a sample request: derived from its request id,
// so they are unique (request ids are) and a deduplicated replay, which returns the same
// request id, returns the same ids.
func SampleSequenceIDs(requestID string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = requestID + ":" + strconv.Itoa(i)
	}
	return ids
}

// CreateModelResponse is create_model's future result.
type CreateModelResponse struct {
	ModelID string `json:"model_id"`
	Type    string `json:"type,omitempty"`
}

// GetInfoRequest is POST /get_info.
type GetInfoRequest struct {
	ModelID string `json:"model_id"`
	Type    string `json:"type,omitempty"`
}

// ModelData describes a training run's base model.
type ModelData struct {
	Arch        *string `json:"arch,omitempty"`
	ModelName   *string `json:"model_name,omitempty"`
	TokenizerID *string `json:"tokenizer_id,omitempty"`
}

// GetInfoResponse answers get_info.
type GetInfoResponse struct {
	ModelID   string    `json:"model_id"`
	ModelData ModelData `json:"model_data"`
	IsLora    *bool     `json:"is_lora,omitempty"`
	LoraRank  *int      `json:"lora_rank,omitempty"`
	ModelName *string   `json:"model_name,omitempty"`
	// OptimizerConfig is the run's optimizer (SDK >= 0.29.1 reads it; default adamw).
	OptimizerConfig *OptimizerConfig `json:"optimizer_config,omitempty"`
	Type            string           `json:"type,omitempty"`
}

// UnloadModelRequest is POST /unload_model.
type UnloadModelRequest struct {
	ModelID string `json:"model_id"`
	Type    string `json:"type,omitempty"`
}

// UnloadModelResponse is unload_model's future result.
type UnloadModelResponse struct {
	ModelID string `json:"model_id"`
	Type    string `json:"type,omitempty"`
}

// WeightsInfoRequest is POST /weights_info.
type WeightsInfoRequest struct {
	TinkerPath string `json:"tinker_path"`
}

// WeightsInfoResponse answers weights_info.
type WeightsInfoResponse struct {
	BaseModel       string           `json:"base_model"`
	OptimizerConfig *OptimizerConfig `json:"optimizer_config,omitempty"`
	IsLora          bool             `json:"is_lora"`
	LoraRank        *int             `json:"lora_rank,omitempty"`
	TrainUnembed    *bool            `json:"train_unembed,omitempty"`
	TrainMLP        *bool            `json:"train_mlp,omitempty"`
	TrainAttn       *bool            `json:"train_attn,omitempty"`
}

// AdamParams are optim_step's hyper-parameters; absent fields take the SDK's defaults.
type AdamParams struct {
	LearningRate float64 `json:"learning_rate"`
	Beta1        float64 `json:"beta1"`
	Beta2        float64 `json:"beta2"`
	Eps          float64 `json:"eps"`
	WeightDecay  float64 `json:"weight_decay"`
	GradClipNorm float64 `json:"grad_clip_norm"`
}

// DefaultAdamParams are the SDK's defaults.
func DefaultAdamParams() AdamParams {
	return AdamParams{LearningRate: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-12}
}

// UnmarshalJSON applies the defaults to absent fields.
func (a *AdamParams) UnmarshalJSON(b []byte) error {
	type raw AdamParams
	r := raw(DefaultAdamParams())
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	*a = AdamParams(r)
	return nil
}

// OptimStepRequest is POST /optim_step: Adam's parameters in adam_params, or (SDK >=
// 0.29.1) another family's in optimizer_params, by type; see OptimParams.
type OptimStepRequest struct {
	AdamParams       AdamParams      `json:"-"` // adam_params with the defaults for absent fields
	RawAdam          json.RawMessage `json:"adam_params,omitempty"`
	OptimizerParams  json.RawMessage `json:"optimizer_params,omitempty"`
	OptimParamsAlias json.RawMessage `json:"optim_params,omitempty"`
	ModelID          string          `json:"model_id"`
	SeqID            *int64          `json:"seq_id,omitempty"`
	Type             string          `json:"type,omitempty"`
}

// UnmarshalJSON keeps the defaults when adam_params is absent.
func (o *OptimStepRequest) UnmarshalJSON(b []byte) error {
	type raw OptimStepRequest
	var r raw
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	r.AdamParams = DefaultAdamParams()
	if len(r.RawAdam) > 0 && string(r.RawAdam) != "null" {
		if err := DecodeJSON(r.RawAdam, &r.AdamParams); err != nil {
			return prefix("adam_params", err)
		}
		if err := checkUnknown(r.RawAdam, reflect.TypeOf(AdamParams{}), "adam_params"); err != nil {
			return err
		}
	}
	*o = OptimStepRequest(r)
	return nil
}

// MarshalJSON writes AdamParams as adam_params (clients build requests from it) unless the
// request carries its parameters in raw form.
func (o OptimStepRequest) MarshalJSON() ([]byte, error) {
	type raw OptimStepRequest
	r := raw(o)
	if len(r.RawAdam) == 0 && len(r.OptimizerParams) == 0 && len(r.OptimParamsAlias) == 0 {
		b, err := json.Marshal(o.AdamParams)
		if err != nil {
			return nil, err
		}
		r.RawAdam = b
	}
	return json.Marshal(r)
}

// OptimStepResponse is optim_step's future result.
type OptimStepResponse struct {
	Metrics Metrics `json:"metrics"`
}

// SaveWeightsRequest is POST /save_weights (save_state).
type SaveWeightsRequest struct {
	ModelID    string  `json:"model_id"`
	Path       *string `json:"path,omitempty"`
	SeqID      *int64  `json:"seq_id,omitempty"`
	TTLSeconds *int64  `json:"ttl_seconds,omitempty"`
	Overwrite  bool    `json:"overwrite"`
	// UserMetadata is stored with the checkpoint (SDK >= 0.27.1), replaced on overwrite.
	UserMetadata map[string]string `json:"user_metadata,omitempty"`
	Type         string            `json:"type,omitempty"`
}

// SaveWeightsResponse is save_weights' future result.
type SaveWeightsResponse struct {
	Path string `json:"path"`
	Type string `json:"type,omitempty"`
}

// SaveWeightsForSamplerRequest is POST /save_weights_for_sampler, named (path) or
// ephemeral (sampling_session_seq_id).
type SaveWeightsForSamplerRequest struct {
	ModelID              string  `json:"model_id"`
	Path                 *string `json:"path,omitempty"`
	SeqID                *int64  `json:"seq_id,omitempty"`
	TTLSeconds           *int64  `json:"ttl_seconds,omitempty"`
	SamplingSessionSeqID *int64  `json:"sampling_session_seq_id,omitempty"`
	// Kind is "snapshot" or "inflight" (SDK >= 0.38); see the handler for inflight.
	Kind         *string           `json:"kind,omitempty"`
	UserMetadata map[string]string `json:"user_metadata,omitempty"`
	Type         string            `json:"type,omitempty"`
}

// SaveWeightsForSamplerResponse is its future result.
type SaveWeightsForSamplerResponse struct {
	Path              *string `json:"path,omitempty"`
	SamplingSessionID *string `json:"sampling_session_id,omitempty"`
	Type              string  `json:"type,omitempty"`
}

// LoadWeightsRequest is POST /load_weights.
type LoadWeightsRequest struct {
	ModelID            string         `json:"model_id"`
	Path               string         `json:"path"`
	SeqID              *int64         `json:"seq_id,omitempty"`
	Optimizer          bool           `json:"optimizer"`
	WeightsAccessToken *string        `json:"weights_access_token,omitempty"`
	SessionID          *string        `json:"session_id,omitempty"`
	ModelSeqID         *int64         `json:"model_seq_id,omitempty"`
	BaseModel          *string        `json:"base_model,omitempty"`
	UserMetadata       map[string]any `json:"user_metadata,omitempty"`
	// OptimizerConfig is the optimizer of a run created by a weights-only load.
	OptimizerConfig *OptimizerConfig `json:"optimizer_config,omitempty"`
	Type            string           `json:"type,omitempty"`
}

// LoadWeightsResponse is load_weights' future result.
type LoadWeightsResponse struct {
	Path    *string `json:"path,omitempty"`
	ModelID *string `json:"model_id,omitempty"`
	Type    string  `json:"type,omitempty"`
}

// FutureRetrieveRequest is POST /retrieve_future.
type FutureRetrieveRequest struct {
	RequestID         string `json:"request_id"`
	AllowMetadataOnly bool   `json:"allow_metadata_only"`
}

// TryAgainResponse answers a retrieve whose future has not resolved (status 408).
type TryAgainResponse struct {
	Type             string  `json:"type"`
	RequestID        string  `json:"request_id"`
	QueueState       string  `json:"queue_state"`
	QueueStateReason *string `json:"queue_state_reason,omitempty"`
}

// RequestFailedResponse answers a retrieve whose operation failed.
type RequestFailedResponse struct {
	Error    string `json:"error"`
	Category string `json:"category"`
}

// TelemetryEvent is one event of the SDK's telemetry batch; every field is optional.
type TelemetryEvent struct {
	Event             string          `json:"event"`
	EventID           string          `json:"event_id"`
	EventSessionIndex int64           `json:"event_session_index"`
	Severity          string          `json:"severity"`
	Timestamp         time.Time       `json:"-"`
	RawTimestamp      json.RawMessage `json:"timestamp,omitempty"`
	Duration          string          `json:"duration,omitempty"`
	ErrorMessage      string          `json:"error_message,omitempty"`
	ErrorType         string          `json:"error_type,omitempty"`
	Traceback         string          `json:"traceback,omitempty"`
	EventName         string          `json:"event_name,omitempty"`
	EventData         json.RawMessage `json:"event_data,omitempty"`
}

// UnmarshalJSON accepts the timestamp as an RFC 3339 string (with or without a zone) or
// a number of seconds, and the duration as a string or a number.
func (e *TelemetryEvent) UnmarshalJSON(b []byte) error {
	type raw TelemetryEvent
	var r struct {
		raw
		Duration json.RawMessage `json:"duration,omitempty"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	*e = TelemetryEvent(r.raw)
	if len(r.Duration) > 0 && string(r.Duration) != "null" {
		var s string
		if json.Unmarshal(r.Duration, &s) == nil {
			e.Duration = s
		} else {
			e.Duration = string(r.Duration)
		}
	}
	if len(e.RawTimestamp) > 0 {
		var s string
		var f float64
		if json.Unmarshal(e.RawTimestamp, &s) == nil {
			for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999"} {
				if t, err := time.Parse(layout, s); err == nil {
					e.Timestamp = t
					break
				}
			}
		} else if json.Unmarshal(e.RawTimestamp, &f) == nil {
			e.Timestamp = time.Unix(0, int64(f*1e9))
		}
	}
	return nil
}

// TelemetrySendRequest is POST /telemetry.
type TelemetrySendRequest struct {
	Events      []TelemetryEvent `json:"events"`
	Platform    string           `json:"platform"`
	SDKVersion  string           `json:"sdk_version"`
	SessionID   string           `json:"session_id"`
	ProcessUUID string           `json:"process_uuid"`
}

// TelemetryResponse answers telemetry.
type TelemetryResponse struct {
	Status string `json:"status"`
}

// Checkpoint is a checkpoint in REST answers.
type Checkpoint struct {
	CheckpointID   string     `json:"checkpoint_id"`
	CheckpointType string     `json:"checkpoint_type"`
	Time           time.Time  `json:"time"`
	TinkerPath     string     `json:"tinker_path"`
	SizeBytes      *int64     `json:"size_bytes,omitempty"`
	Public         bool       `json:"public"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
	// UserMetadata is what the save gave (SDK >= 0.26.2 reads it).
	UserMetadata map[string]string `json:"user_metadata,omitempty"`
}

// TrainingRun is a training run in REST answers.
type TrainingRun struct {
	TrainingRunID         string            `json:"training_run_id"`
	BaseModel             string            `json:"base_model"`
	ModelOwner            string            `json:"model_owner"`
	IsLora                bool              `json:"is_lora"`
	Corrupted             bool              `json:"corrupted"`
	LoraRank              *int              `json:"lora_rank,omitempty"`
	LastRequestTime       time.Time         `json:"last_request_time"`
	LastCheckpoint        *Checkpoint       `json:"last_checkpoint,omitempty"`
	LastSamplerCheckpoint *Checkpoint       `json:"last_sampler_checkpoint,omitempty"`
	UserMetadata          map[string]string `json:"user_metadata,omitempty"`
}

// Cursor pages REST lists.
type Cursor struct {
	Offset     int `json:"offset"`
	Limit      int `json:"limit"`
	TotalCount int `json:"total_count"`
}

// TrainingRunsResponse answers GET /training_runs.
type TrainingRunsResponse struct {
	TrainingRuns []TrainingRun `json:"training_runs"`
	Cursor       Cursor        `json:"cursor"`
}

// CheckpointsListResponse answers the checkpoint lists.
type CheckpointsListResponse struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
	Cursor      *Cursor      `json:"cursor,omitempty"`
}

// CheckpointTTLRequest is PUT …/ttl.
type CheckpointTTLRequest struct {
	TTLSeconds *int64 `json:"ttl_seconds"`
}

// ArchiveURLResponse is the JSON form of the archive answer.
type ArchiveURLResponse struct {
	URL     string    `json:"url"`
	Expires time.Time `json:"expires"`
}

// ListSessionsResponse answers GET /sessions.
type ListSessionsResponse struct {
	Sessions []string `json:"sessions"`
}

// GetSessionResponse answers GET /sessions/{id}. Status is this server's addition (in
// the SDK's SessionStatus shape); the SDK reads the other fields.
type GetSessionResponse struct {
	TrainingRunIDs []string          `json:"training_run_ids"`
	SamplerIDs     []string          `json:"sampler_ids"`
	UserMetadata   map[string]string `json:"user_metadata,omitempty"`
	DisplayName    *string           `json:"display_name,omitempty"`
	Status         SessionStatus     `json:"status"`
}

// SessionProjectRequest is PUT /sessions/{id}/project.
type SessionProjectRequest struct {
	ProjectID string `json:"project_id"`
}
