package wire

import "time"

// The session-span record, its Perfetto export and the audit log (docs/observability.md
// "Session spans", docs/compatibility.md "Audit log and session traces").

// SessionSpansResponse answers GET /api/v1/sessions/{id}/spans (this server's addition,
// for the console): the server's own spans of the session's requests, oldest first, and
// how many older ones limits.max_spans_per_session dropped.
type SessionSpansResponse struct {
	SessionID string        `json:"session_id"`
	Spans     []SessionSpan `json:"spans"`
	Dropped   int64         `json:"dropped"`
}

// SessionSpan is one span of a session's record.
type SessionSpan struct {
	Seq          int64          `json:"seq"` // arrival order in the record
	TraceID      string         `json:"trace_id"`
	SpanID       string         `json:"span_id"`
	ParentSpanID string         `json:"parent_span_id"` // "" for a root span
	Name         string         `json:"name"`
	Start        time.Time      `json:"start"`
	End          time.Time      `json:"end"`
	DurationMs   float64        `json:"duration_ms"`
	Status       string         `json:"status"`          // "ok" | "error"
	Error        string         `json:"error,omitempty"` // the error's description
	Attributes   map[string]any `json:"attributes"`
}

// TraceExportResponse answers GET /api/v1/sessions/{id}/trace_export (SDK 0.38's
// RestClient.export_session_trace polls it until status is ready or failed).
type TraceExportResponse struct {
	Status string  `json:"status"` // "pending" | "ready" | "failed"
	URL    *string `json:"url"`
	Error  *string `json:"error"`
}

// AuditLogResponse answers GET /api/v1/audit (SDK 0.38's AdminClient.get_audit_log),
// entries sorted by timestamp.
type AuditLogResponse struct {
	Entries []AuditLogEntry `json:"entries"`
}

// AuditLogEntry is one audit-log entry (the SDK's AuditLogEntry). ModelID, TinkerPath
// and Purpose repeat event_details' fields on checkpoint events (deprecated in the SDK).
type AuditLogEntry struct {
	Timestamp    time.Time      `json:"timestamp"`
	Event        string         `json:"event"` // <resource>_<action>
	EventDetails map[string]any `json:"event_details"`
	ModelID      *string        `json:"model_id,omitempty"`
	TinkerPath   *string        `json:"tinker_path,omitempty"`
	Purpose      *string        `json:"purpose,omitempty"`
}
