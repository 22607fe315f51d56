package wire

import "time"

// Bodies of the routes SDK 0.26 – 0.38 call when the server advertises them (see
// ServerClientConfig and ClientDynamicConfigResponse), and of the other routes they
// added: cancel_future, retrieve_futures, join_sampling_session, copy_weights,
// sessions/search, the storage usage report, auth/apikey/me and the external weights.

// CancelFutureRequest is POST /cancel_future (SDK >= 0.26, when sample_cancel_enabled).
type CancelFutureRequest struct {
	RequestID string `json:"request_id"`
}

// CancelFutureResponse says what the cancel did (the SDK reads no body; any 2xx is
// success): cancelled_queued, cancelled_running or already_done.
type CancelFutureResponse struct {
	RequestID string `json:"request_id"`
	State     string `json:"state"`
}

// FuturesTarget is retrieve_futures' poll target: one sampling session, or one of its
// clones (cloned_sampler_id = seq_id / 10^9; 0 for the original client).
type FuturesTarget struct {
	Type              string `json:"type"`
	SamplingSessionID string `json:"sampling_session_id"`
	ClonedSamplerID   int64  `json:"cloned_sampler_id"`
}

// FuturesRetrieveRequest is POST /retrieve_futures (SDK >= 0.26.2, when
// sample_use_retrieve_futures): completions after prev_cursor, which acknowledges (and
// lets the server drop) the ones at or before it.
type FuturesRetrieveRequest struct {
	Target              *FuturesTarget `json:"target"`
	PrevCursor          int64          `json:"prev_cursor"`
	Timeout             *float64       `json:"timeout,omitempty"` // seconds; 0: answer at once; absent: the long poll
	RetrievedRequestIDs []string       `json:"retrieved_request_ids"`
}

// FutureCompletion is one completed request in a retrieve_futures reply.
type FutureCompletion struct {
	State                           string `json:"state"` // finished | failed
	RequestID                       string `json:"request_id"`
	ResponsePayloadUncompressedSize *int64 `json:"response_payload_uncompressed_size,omitempty"`
}

// FuturesRetrieveResponse answers retrieve_futures.
type FuturesRetrieveResponse struct {
	Completions []FutureCompletion `json:"completions"`
	Cursor      int64              `json:"cursor"`
}

// JoinSamplingSessionRequest is POST /join_sampling_session (SDK >= 0.32, when
// sample_join_sampling_session).
type JoinSamplingSessionRequest struct {
	SamplingSessionID string `json:"sampling_session_id"`
	Type              string `json:"type,omitempty"`
}

// JoinSamplingSessionResponse gives a clone its counter (the original client is 0): the
// clone's sample seq_ids are counter × 10^9 + n.
type JoinSamplingSessionResponse struct {
	Type          string `json:"type"`
	ClientCounter int64  `json:"client_counter"`
}

// CopyWeightsRequest is POST /copy_weights (SDK >= 0.26.2; reshaped in 0.34): a copy of
// a checkpoint, owned by a session's run slot or by a project.
type CopyWeightsRequest struct {
	SourcePath           string  `json:"source_path"`
	DestinationProjectID *string `json:"destination_project_id,omitempty"`
	SessionID            *string `json:"session_id,omitempty"`
	ModelSeqID           *int64  `json:"model_seq_id,omitempty"`
	TTLSeconds           *int64  `json:"ttl_seconds,omitempty"`
	WeightsAccessToken   *string `json:"weights_access_token,omitempty"`
}

// CopyWeightsResponse answers copy_weights (synchronously, not a future).
type CopyWeightsResponse struct {
	TinkerPath string `json:"tinker_path"`
}

// SessionSearchRequest is POST /sessions/search (SDK >= 0.36, experimental).
type SessionSearchRequest struct {
	SessionID    *string              `json:"session_id,omitempty"`
	ProjectIDs   []string             `json:"project_ids,omitempty"`
	UserMetadata map[string]string    `json:"user_metadata"`
	DisplayName  *string              `json:"display_name,omitempty"`
	Owner        *SearchOwner         `json:"owner,omitempty"`
	Statuses     []SessionStatusQuery `json:"statuses,omitempty"`
	Limit        *int                 `json:"limit,omitempty"`
	Cursor       *SessionSearchCursor `json:"cursor,omitempty"`
}

// SearchOwner is whose sessions a search covers: own, accessible, or user (owner_urns).
type SearchOwner struct {
	Type      string   `json:"type"`
	OwnerURNs []string `json:"owner_urns,omitempty"`
}

// SessionStatusQuery matches a session status: active, cancelled, failed, or
// client_finished (with its reasons).
type SessionStatusQuery struct {
	Type    string   `json:"type"`
	Reasons []string `json:"reasons,omitempty"`
}

// SessionSearchCursor is where the next page starts.
type SessionSearchCursor struct {
	LastCreatedAt time.Time `json:"last_created_at"`
	LastSessionID string    `json:"last_session_id"`
}

// SessionSummary is one session in a search reply.
type SessionSummary struct {
	SessionID              string            `json:"session_id"`
	CreatedAt              time.Time         `json:"created_at"`
	Owner                  string            `json:"owner"`
	ProjectID              string            `json:"project_id"`
	Status                 *SessionStatus    `json:"status,omitempty"`
	CheckpointsCount       int               `json:"checkpoints_count"`
	DisplayName            *string           `json:"display_name,omitempty"`
	UserMetadata           map[string]string `json:"user_metadata,omitempty"`
	CheckpointStorageBytes *int64            `json:"checkpoint_storage_bytes,omitempty"`
}

// SessionSearchResponse is one page of a search, newest first.
type SessionSearchResponse struct {
	Sessions   []SessionSummary     `json:"sessions"`
	NextCursor *SessionSearchCursor `json:"next_cursor,omitempty"`
}

// CheckpointStorageUsageItem is one (project, owner) group of the storage report.
type CheckpointStorageUsageItem struct {
	ProjectID               *string  `json:"project_id"`
	OrgUserURN              *string  `json:"org_user_urn,omitempty"`
	UserEmail               *string  `json:"user_email,omitempty"`
	UserName                *string  `json:"user_name,omitempty"`
	CheckpointCount         int      `json:"checkpoint_count"`
	SizeBytes               int64    `json:"size_bytes"`
	SizeGigabytes           float64  `json:"size_gigabytes"`
	EstimatedMonthlyCostUSD *float64 `json:"estimated_monthly_cost_usd"`
}

// CheckpointStorageUsageResponse answers GET /billing/usage/checkpoints/current.
type CheckpointStorageUsageResponse struct {
	EffectiveRateUSDPerGigabyteMonth *float64                     `json:"effective_rate_usd_per_gigabyte_month"`
	Data                             []CheckpointStorageUsageItem `json:"data"`
}

// APIKeyOrgDetails, APIKeyUserDetails and APIKeyDetails say whom a key belongs to.
type APIKeyOrgDetails struct {
	Name string `json:"name"`
}

// APIKeyUserDetails is the user part of APIKeyDetails.
type APIKeyUserDetails struct {
	Email string `json:"email"`
}

// APIKeyDetails is the owner of an API key.
type APIKeyDetails struct {
	OrgDetails  APIKeyOrgDetails  `json:"org_details"`
	UserDetails APIKeyUserDetails `json:"user_details"`
}

// SelfAPIKeyResponse answers GET /auth/apikey/me (the CLI's `tinker auth login`).
type SelfAPIKeyResponse struct {
	KeyID   int64         `json:"key_id"`
	Name    string        `json:"name"`
	Note    string        `json:"note"`
	Details APIKeyDetails `json:"details"`
}

// SaveWeightsExternalResponse is save_weights_external's future result.
type SaveWeightsExternalResponse struct {
	Path      string `json:"path"`
	SizeBytes *int64 `json:"size_bytes,omitempty"`
	Type      string `json:"type"`
}

// ExternalWeightsURLsResponse answers …/external_weights_urls: one signed, expiring URL
// per file of the export.
type ExternalWeightsURLsResponse struct {
	URLs    map[string]string `json:"urls"`
	Expires time.Time         `json:"expires"`
}
