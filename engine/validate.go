package engine

import "math"

// This file holds the checks a server runs at its edge, before queueing a request, so
// that bad input is refused with an error that names the field (an *InputError) instead
// of failing later inside a queued operation. The engine runs the same checks again
// when it executes the request.

// ValidateForward checks a forward / forward_backward request against a model config
// without running it, so a server can refuse bad input before queueing it.
func ValidateForward(c Config, req ForwardRequest) error {
	spec, _, err := resolveLoss(req.LossFn, req.LossFnConfig)
	if err != nil {
		return err
	}
	if len(req.Data) == 0 {
		return Inputf("data is empty")
	}
	for i, d := range req.Data {
		if _, err := validateDatum(i, d, spec, c); err != nil {
			return err
		}
	}
	return nil
}

// ValidateSample checks a sample request against a model config without running it. The
// number of samples has no upper bound here: that is a server limit. Stop strings also
// need the model's tokenizer, which Sample checks.
func ValidateSample(c Config, req SampleRequest) error {
	p := req.Params
	switch {
	case len(req.Prompt) == 0:
		return Inputf("prompt is empty")
	case req.NumSamples < 1:
		return Inputf("num_samples %d must be at least 1", req.NumSamples)
	case p.MaxTokens < 1:
		return Inputf("max_tokens %d must be at least 1", p.MaxTokens)
	case p.Temperature < 0 || math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0):
		return Inputf("temperature %g must be a finite number ≥ 0", p.Temperature)
	case p.TopP <= 0 || p.TopP > 1 || math.IsNaN(p.TopP):
		return Inputf("top_p %g must be in (0, 1]", p.TopP)
	case p.TopK < -1:
		return Inputf("top_k %d must be -1 (no limit) or positive", p.TopK)
	case req.TopKPromptLogprobs < 0 || req.TopKPromptLogprobs > 100:
		return Inputf("topk_prompt_logprobs %d must be in [0, 100]", req.TopKPromptLogprobs)
	case len(req.Prompt)+p.MaxTokens > c.MaxPositions:
		return Inputf("prompt of %d tokens plus max_tokens %d exceeds the model's %d positions", len(req.Prompt), p.MaxTokens, c.MaxPositions)
	}
	for i, t := range req.Prompt {
		if t < 0 || int(t) >= c.VocabSize {
			return Inputf("prompt token %d at position %d is outside the vocabulary [0, %d)", t, i, c.VocabSize)
		}
	}
	for _, t := range p.StopTokens {
		if t < 0 || int(t) >= c.VocabSize {
			return Inputf("stop token %d is outside the vocabulary [0, %d)", t, c.VocabSize)
		}
	}
	return nil
}

// Validate checks AdamW's hyper-parameters, naming the first bad one.
func (p AdamParams) Validate() error {
	bad := func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }
	switch {
	case p.LearningRate < 0 || bad(p.LearningRate):
		return Inputf("adam_params.learning_rate %g must be a finite number ≥ 0", p.LearningRate)
	case p.Beta1 < 0 || p.Beta1 >= 1 || math.IsNaN(p.Beta1):
		return Inputf("adam_params.beta1 %g must be in [0, 1)", p.Beta1)
	case p.Beta2 < 0 || p.Beta2 >= 1 || math.IsNaN(p.Beta2):
		return Inputf("adam_params.beta2 %g must be in [0, 1)", p.Beta2)
	case p.Eps <= 0 || bad(p.Eps):
		return Inputf("adam_params.eps %g must be a finite number > 0", p.Eps)
	case p.WeightDecay < 0 || bad(p.WeightDecay):
		return Inputf("adam_params.weight_decay %g must be a finite number ≥ 0", p.WeightDecay)
	case p.GradClipNorm < 0 || bad(p.GradClipNorm):
		return Inputf("adam_params.grad_clip_norm %g must be a finite number ≥ 0", p.GradClipNorm)
	}
	return nil
}

// Validate checks an optimizer selection: adamw, or dimuon version 1.
func (c OptimizerConfig) Validate() error {
	n := c.Normalize()
	switch n.Type {
	case OptimizerAdamW:
		if n.Version != 0 {
			return Inputf("optimizer_config: adamw has no version (got %d)", n.Version)
		}
	case OptimizerDimuon:
		if n.Version != 1 {
			return Inputf("optimizer_config: dimuon version %d is not supported (supported: 1)", n.Version)
		}
	default:
		return Inputf("optimizer_config.type %q is not supported (supported: adamw, dimuon)", c.Type)
	}
	return nil
}

// Validate checks Dimuon's hyper-parameters, naming the first bad one. GradClipNorm ≤ 0
// disables clipping, as the SDK documents, so any finite value is accepted.
func (p DimuonParams) Validate() error {
	bad := func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }
	switch {
	case p.LearningRate < 0 || bad(p.LearningRate):
		return Inputf("optimizer_params.learning_rate %g must be a finite number ≥ 0", p.LearningRate)
	case bad(p.GradClipNorm):
		return Inputf("optimizer_params.grad_clip_norm %g must be a finite number (≤ 0 disables clipping)", p.GradClipNorm)
	case p.Beta1 < 0 || p.Beta1 >= 1 || math.IsNaN(p.Beta1):
		return Inputf("optimizer_params.beta1 %g must be in [0, 1)", p.Beta1)
	case p.Damping <= 0 || bad(p.Damping):
		return Inputf("optimizer_params.damping %g must be a finite number > 0", p.Damping)
	case p.RankLRCorrectionExponent < 0 || p.RankLRCorrectionExponent > 4 || math.IsNaN(p.RankLRCorrectionExponent):
		return Inputf("optimizer_params.rank_lr_correction_exponent %g must be in [0, 4] (0 disables the correction)", p.RankLRCorrectionExponent)
	}
	return nil
}
