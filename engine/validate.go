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
	if _, err := resolveTextConfig(req.LossFn, spec, req.LossFnConfig, req.LossFnTextConfig); err != nil {
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
	case req.NumSamples < 1:
		return Inputf("num_samples %d must be at least 1 (the server's limits.max_num_samples bounds it above)", req.NumSamples)
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
	case req.TopKSampleLogprobs < 0 || req.TopKSampleLogprobs > 100:
		return Inputf("topk_sample_logprobs %d must be in [0, 100]", req.TopKSampleLogprobs)
	case req.PromptAltTokensK < 0:
		return Inputf("prompt_alt_tokens_k %d must not be negative", req.PromptAltTokensK)
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
	if t := req.PromptTargets; t != nil {
		return validatePromptTargets(c, t, len(req.Prompt))
	}
	return nil
}

// validatePromptTargets checks target_prompt_logprobs: [len(prompt)-1, K] with K ≥ 1, a
// well-formed layout, ids in the vocabulary or -1, and at least one id.
func validatePromptTargets(c Config, t *PromptTargets, promptLen int) error {
	const f = "target_prompt_logprobs"
	switch {
	case t.Rows != promptLen-1:
		return Inputf("%s has %d rows; it needs len(prompt)-1 = %d (row i scores prompt position i+1)", f, t.Rows, promptLen-1)
	case t.Cols < 1:
		return Inputf("%s has %d columns; it needs at least 1", f, t.Cols)
	case !t.Sparse() && len(t.IDs) != t.Rows*t.Cols:
		return Inputf("%s has %d ids for its %d×%d shape", f, len(t.IDs), t.Rows, t.Cols)
	}
	if t.Sparse() {
		switch {
		case len(t.RowStarts) != t.Rows+1:
			return Inputf("%s.sparse_crow_indices has %d entries, want rows+1 = %d", f, len(t.RowStarts), t.Rows+1)
		case t.RowStarts[0] != 0 || t.RowStarts[t.Rows] != len(t.IDs):
			return Inputf("%s.sparse_crow_indices must start at 0 and end at the number of values %d", f, len(t.IDs))
		case len(t.ColIdx) != len(t.IDs):
			return Inputf("%s.sparse_col_indices has %d entries for %d values", f, len(t.ColIdx), len(t.IDs))
		}
		for r := 0; r < t.Rows; r++ {
			if t.RowStarts[r+1] < t.RowStarts[r] || t.RowStarts[r+1] > len(t.IDs) {
				return Inputf("%s.sparse_crow_indices entry %d (%d) must be in [%d, %d]", f, r+1, t.RowStarts[r+1], t.RowStarts[r], len(t.IDs))
			}
			for x := t.RowStarts[r]; x < t.RowStarts[r+1]; x++ {
				if t.ColIdx[x] < 0 || t.ColIdx[x] >= t.Cols || (x > t.RowStarts[r] && t.ColIdx[x] <= t.ColIdx[x-1]) {
					return Inputf("%s.sparse_col_indices entry %d (%d): each row's columns must increase and lie in [0, %d)", f, x, t.ColIdx[x], t.Cols)
				}
			}
		}
	}
	any := false
	for x, id := range t.IDs {
		if id < -1 || int(id) >= c.VocabSize {
			return Inputf("%s value %d (entry %d) is neither -1 nor a token id in the vocabulary [0, %d)", f, id, x, c.VocabSize)
		}
		any = any || id >= 0
	}
	if !any {
		return Inputf("%s names no token id (every cell is -1); leave it out instead", f)
	}
	return nil
}

// Allowed ranges of AdamW's hyper-parameters: wide enough for any real schedule, narrow
// enough that none alone overflows float32 arithmetic (an eps below ~1e-38 is 0 in
// float32, and 0/0 is NaN).
const (
	maxLearningRate = 10
	minEps, maxEps  = 1e-20, 1
	maxWeightDecay  = 10
	maxGradClipNorm = 1e9
)

// Validate checks AdamW's hyper-parameters, naming the field and its allowed range.
func (p AdamParams) Validate() error {
	// Written as !(in range) so that NaN fails every check.
	switch {
	case !(p.LearningRate >= 0 && p.LearningRate <= maxLearningRate):
		return Inputf("adam_params.learning_rate %g must be in [0, %g]", p.LearningRate, float64(maxLearningRate))
	case !(p.Beta1 >= 0 && p.Beta1 < 1):
		return Inputf("adam_params.beta1 %g must be in [0, 1)", p.Beta1)
	case !(p.Beta2 >= 0 && p.Beta2 < 1):
		return Inputf("adam_params.beta2 %g must be in [0, 1)", p.Beta2)
	case !(p.Eps >= minEps && p.Eps <= maxEps):
		return Inputf("adam_params.eps %g must be in [%g, %g]", p.Eps, minEps, float64(maxEps))
	case !(p.WeightDecay >= 0 && p.WeightDecay <= maxWeightDecay):
		return Inputf("adam_params.weight_decay %g must be in [0, %g]", p.WeightDecay, float64(maxWeightDecay))
	case !(p.GradClipNorm >= 0 && p.GradClipNorm <= maxGradClipNorm):
		return Inputf("adam_params.grad_clip_norm %g must be in [0, %g]", p.GradClipNorm, float64(maxGradClipNorm))
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

// maxDimuonDamping bounds Dimuon's damping (relative to the momentum's mean square: at
// 1e6 the preconditioner is already uniform to a part in a million).
const maxDimuonDamping = 1e6

// Validate checks Dimuon's hyper-parameters, naming the first bad one. GradClipNorm ≤ 0
// disables clipping, as the SDK documents. Written as !(in range) so that NaN fails.
func (p DimuonParams) Validate() error {
	switch {
	case !(p.LearningRate >= 0 && p.LearningRate <= maxLearningRate):
		return Inputf("optimizer_params.learning_rate %g must be in [0, %g]", p.LearningRate, float64(maxLearningRate))
	case !(p.GradClipNorm >= -maxGradClipNorm && p.GradClipNorm <= maxGradClipNorm):
		return Inputf("optimizer_params.grad_clip_norm %g must be in [%g, %g] (≤ 0 disables clipping)", p.GradClipNorm, -float64(maxGradClipNorm), float64(maxGradClipNorm))
	case !(p.Beta1 >= 0 && p.Beta1 < 1):
		return Inputf("optimizer_params.beta1 %g must be in [0, 1)", p.Beta1)
	case !(p.Damping > 0 && p.Damping <= maxDimuonDamping):
		return Inputf("optimizer_params.damping %g must be in (0, %g]", p.Damping, float64(maxDimuonDamping))
	case !(p.RankLRCorrectionExponent >= 0 && p.RankLRCorrectionExponent <= 4):
		return Inputf("optimizer_params.rank_lr_correction_exponent %g must be in [0, 4] (0 disables the correction)", p.RankLRCorrectionExponent)
	}
	return nil
}
