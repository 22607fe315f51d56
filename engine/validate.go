package engine

import "math"

// ValidateSample checks a sample request against a model config without running it, so
// a server can refuse bad input before queueing it. Each error names the field and its
// allowed range. (Stop strings also need the model's tokenizer; that is checked when the
// request runs.)
func ValidateSample(c Config, req SampleRequest) error {
	p := req.Params
	// Written as !(in range) so that NaN fails every check.
	switch {
	case len(req.Prompt) == 0:
		return Inputf("prompt is empty")
	case req.NumSamples < 1 || req.NumSamples > 1024:
		return Inputf("num_samples %d must be in [1, 1024]", req.NumSamples)
	case p.MaxTokens < 1:
		return Inputf("sampling_params.max_tokens %d must be at least 1", p.MaxTokens)
	case !(p.Temperature >= 0) || math.IsInf(p.Temperature, 0):
		return Inputf("sampling_params.temperature %g must be finite and ≥ 0", p.Temperature)
	case !(p.TopP > 0 && p.TopP <= 1):
		return Inputf("sampling_params.top_p %g must be in (0, 1]", p.TopP)
	case p.TopK < -1:
		return Inputf("sampling_params.top_k %d must be -1 (no limit) or positive", p.TopK)
	case req.TopKPromptLogprobs < 0 || req.TopKPromptLogprobs > 100:
		return Inputf("topk_prompt_logprobs %d must be in [0, 100]", req.TopKPromptLogprobs)
	case len(req.Prompt)+p.MaxTokens > c.MaxPositions:
		return Inputf("prompt of %d tokens plus sampling_params.max_tokens %d exceeds the model's %d positions", len(req.Prompt), p.MaxTokens, c.MaxPositions)
	}
	for i, t := range req.Prompt {
		if t < 0 || int(t) >= c.VocabSize {
			return Inputf("prompt token %d at position %d is outside the vocabulary [0, %d)", t, i, c.VocabSize)
		}
	}
	for i, t := range p.StopTokens {
		if t < 0 || int(t) >= c.VocabSize {
			return Inputf("sampling_params.stop token %d (entry %d) is outside the vocabulary [0, %d)", t, i, c.VocabSize)
		}
	}
	for i, s := range p.StopStrings {
		if s == "" {
			return Inputf("sampling_params.stop string %d is empty: it would stop every sample at once", i)
		}
	}
	return nil
}
