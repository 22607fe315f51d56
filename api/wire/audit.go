package wire

import "time"

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
