package testenv

// Scenario builders: the requests most tests make before the one they are about, written
// once. A test about create_session itself (its fields, limits or quotas) writes its body
// out instead.

// SDKVersion is the Tinker SDK version the sessions of NewSession claim.
const SDKVersion = "0.38.0"

// NewSession opens a session as the SDK does, with no tags and no metadata, requiring
// success, and returns its id.
func (c *Client) NewSession() string {
	c.T.Helper()
	var out struct {
		SessionID string `json:"session_id"`
	}
	c.Post("/api/v1/create_session", map[string]any{"tags": []string{}, "user_metadata": map[string]any{}, "sdk_version": SDKVersion}, &out)
	if out.SessionID == "" {
		c.T.Fatalf("create_session answered no session_id")
	}
	return out.SessionID
}

// NewTrainingRun creates a LoRA training run of Model in session (model_seq_id 0, lora
// the request's lora_config), waits until it exists and returns its model id.
func (c *Client) NewTrainingRun(session string, lora map[string]any) string {
	c.T.Helper()
	var f struct {
		RequestID string `json:"request_id"`
		ModelID   string `json:"model_id"`
	}
	c.Post("/api/v1/create_model", map[string]any{"session_id": session, "model_seq_id": 0, "base_model": Model, "lora_config": lora}, &f)
	c.Result(f.RequestID, nil)
	return f.ModelID
}
