package service

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// The id formats, defined once. A training run's id names the session slot the SDK gave
// it ("{session}:train:{model_seq_id}"), so a client that resubmits create_model (or a
// load or copy into that slot) lands on the same run; a sampling session's id does the
// same for sampling_session_seq_id.

// RunID is the id of the training run in slot modelSeqID of session.
func RunID(session string, modelSeqID int64) string {
	return fmt.Sprintf("%s:train:%d", session, modelSeqID)
}

// SamplerID is the id of the sampling session in slot seq of session.
func SamplerID(session string, seq int64) string {
	return fmt.Sprintf("%s:sample:%d", session, seq)
}

// newID is a random id with prefix (sessions, request ids).
func newID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
