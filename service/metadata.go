package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Metadata is a client's user_metadata (a session's or a training run's), held as the
// compact JSON object it is stored as. Holding the decoded map[string]any cost about
// 3.8 times the JSON's size in memory (issue 12, finding 6); the JSON is decoded only
// where a value is read (a search filter, a GET), which is rare.
type Metadata []byte

// NewMetadata encodes m (nil or empty: no metadata).
func NewMetadata(m map[string]any) (Metadata, error) {
	if len(m) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, invalidf("user_metadata cannot be encoded as JSON: %v", err)
	}
	return Metadata(b), nil
}

// Map decodes the metadata (nil when there is none or it is unreadable).
func (m Metadata) Map() map[string]any {
	if len(m) == 0 {
		return nil
	}
	var out map[string]any
	if json.Unmarshal(m, &out) != nil {
		return nil
	}
	return out
}

// MarshalJSON writes the held JSON as it is.
func (m Metadata) MarshalJSON() ([]byte, error) {
	if len(m) == 0 {
		return []byte("null"), nil
	}
	return m, nil
}

// UnmarshalJSON keeps a compact copy of an object (records written by older versions
// held the same JSON object); null reads as no metadata.
func (m *Metadata) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*m = nil
		return nil
	}
	if len(b) == 0 || b[0] != '{' {
		return fmt.Errorf("user_metadata: want a JSON object, got %.20q", b)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return fmt.Errorf("user_metadata: %w", err)
	}
	if buf.Len() == 2 { // {}
		*m = nil
		return nil
	}
	*m = Metadata(bytes.Clone(buf.Bytes()))
	return nil
}

// keyHeartbeat + session id holds the session's last heartbeat time (RFC 3339): a
// heartbeat (every 10 s per client) writes these few bytes, not the whole session record
// with its metadata. restore applies it over the record's last_heartbeat.
const keyHeartbeat = "heartbeat/"

// persistHeartbeat writes a session's heartbeat time.
func (s *Service) persistHeartbeat(ctx context.Context, id string, t time.Time) error {
	b, _ := t.UTC().MarshalText()
	if err := s.st.Set(ctx, keyHeartbeat+id, b, 0); err != nil {
		return fmt.Errorf("persist heartbeat of %s: %w", id, err)
	}
	return nil
}

// restoreHeartbeats applies the stored heartbeat times to the restored sessions.
func (s *Service) restoreHeartbeats(ctx context.Context) error {
	return s.st.Scan(ctx, keyHeartbeat, func(key string, v []byte) error {
		se := s.sessions.at(key[len(keyHeartbeat):])
		var t time.Time
		if se != nil && t.UnmarshalText(v) == nil && t.After(se.LastHeartbeat) {
			se.LastHeartbeat = t
		}
		return nil
	})
}
