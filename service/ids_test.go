package service

import "testing"

// The formats are part of the API (clients see and resubmit these ids) and of the stored
// records' keys: they must not change.
func TestIDFormats(t *testing.T) {
	if got := RunID("sess_ab", 3); got != "sess_ab:train:3" {
		t.Errorf("RunID = %q", got)
	}
	if got := SamplerID("sess_ab", 0); got != "sess_ab:sample:0" {
		t.Errorf("SamplerID = %q", got)
	}
}
