package config

// The context-length arithmetic, defined once: the server's model loading, training-batch
// checks, sampling checks and the OpenAI/Anthropic-compatible routes all use these.

// ContextLength is the context length requests on the model may use: native (the model's
// own, 0 when unknown) lowered by models[].max_context_length when that is set.
func (m Model) ContextLength(native int) int {
	if m.MaxContextLength > 0 && (native == 0 || m.MaxContextLength < native) {
		return m.MaxContextLength
	}
	return native
}

// ExceedsContext says whether a prompt of promptLen tokens plus maxTokens to generate
// does not fit maxContext (0: no bound).
func ExceedsContext(maxContext, promptLen, maxTokens int) bool {
	return maxContext > 0 && promptLen+maxTokens > maxContext
}

// ContextRoom is how many tokens may be generated after a prompt of promptLen tokens:
// limit, lowered to what maxContext (0: no bound) leaves. It may be zero or negative.
func ContextRoom(maxContext, promptLen, limit int) int {
	if maxContext > 0 {
		return min(limit, maxContext-promptLen)
	}
	return limit
}
