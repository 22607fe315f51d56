package engine

import (
	"math"
	"slices"
	"sort"
	"strings"
)

// Allowed ranges of loss inputs and configuration. They are far wider than any sensible
// value, and narrow enough that no finite input can overflow the loss by itself (what a
// combination still overflows is refused when computed, see runBatch).
const (
	lossConfigMin, lossConfigMax = 0.0, 100.0 // clip thresholds, beta
	logprobMin, logprobMax       = -1e4, 0.01 // log-probabilities (a little above 0 for rounding)
	advantageMax                 = 1e6        // |advantages|
	weightMax                    = 1e6        // |weights|
)

// inputRange is the allowed range of a float loss input.
func inputRange(name string) (lo, hi float64) {
	switch name {
	case "logprobs":
		return logprobMin, logprobMax
	case "advantages":
		return -advantageMax, advantageMax
	}
	return -weightMax, weightMax
}

// lossSpec describes a Tinker loss: its inputs and config keys with defaults, and any
// check of a datum's inputs beyond their shapes.
type lossSpec struct {
	required []string
	optional []string
	config   map[string]float64
	// text lists the string-valued config keys and each one's allowed values, the
	// first being the default. None of the losses below has one.
	text  map[string][]string
	check func(d Datum) error
}

var losses = map[string]lossSpec{
	"cross_entropy":       {required: []string{"target_tokens"}, optional: []string{"weights"}},
	"importance_sampling": {required: []string{"target_tokens", "logprobs", "advantages"}, optional: []string{"weights"}},
	"ppo": {required: []string{"target_tokens", "logprobs", "advantages"}, optional: []string{"weights"},
		config: map[string]float64{"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}},
	"cispo": {required: []string{"target_tokens", "logprobs", "advantages"}, optional: []string{"weights"},
		config: map[string]float64{"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}},
	"dro": {required: []string{"target_tokens", "logprobs", "advantages"}, optional: []string{"weights"},
		config: map[string]float64{"beta": 0.01}},
	// GSPO-token (tinker-docs /tinker/losses/gspo/): one sequence ratio per datum, the
	// mean log-ratio over the tokens sequence_ratio_mask marks; PPO's clip thresholds.
	"gspo": {required: []string{"target_tokens", "logprobs", "advantages", "sequence_ratio_mask"}, optional: []string{"weights"},
		config: map[string]float64{"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}, check: checkRatioMask},
}

// refusedLosses are Tinker losses TuFT knows by name but does not implement, with the
// reason the error gives: refusing is better than an approximation.
var refusedLosses = map[string]string{
	"stable_reinforce": "loss_fn \"stable_reinforce\" is not supported: Tinker's public documentation " +
		"(/tinker/losses/stable-reinforce/) names the sampling-time stability information and the kl_coeff " +
		"config key but does not publish the objective, so TuFT refuses it rather than approximate it; " +
		"use gspo, ppo or importance_sampling with the sampled logprobs",
}

// checkRatioMask requires sequence_ratio_mask to mark at least one token: GSPO's sequence
// ratio is a mean over the marked tokens, undefined for none.
func checkRatioMask(d Datum) error {
	for _, v := range d.LossInputs["sequence_ratio_mask"].F32 {
		if v != 0 {
			return nil
		}
	}
	return Inputf("sequence_ratio_mask marks no token (GSPO's sequence ratio is the mean log-ratio over the marked tokens)")
}

// LossNames lists the supported loss functions.
func LossNames() []string {
	out := make([]string, 0, len(losses))
	for n := range losses {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// resolveTextConfig validates a loss's string-valued config keys, returning them with
// the defaults of the keys not given.
func resolveTextConfig(name string, spec lossSpec, numeric map[string]float64, text map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for k, vals := range spec.text {
		out[k] = vals[0]
	}
	keys := make([]string, 0, len(text))
	for k := range text {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := text[k]
		allowed, ok := spec.text[k]
		if !ok {
			if _, numericKey := spec.config[k]; numericKey {
				return nil, Inputf("loss_fn_config[%q] must be a number for %s, not the string %q", k, name, v)
			}
			return nil, Inputf("loss_fn_config key %q (the string %q) is not used by %s (string-valued keys: %s)", k, v, name, keyList(spec.text))
		}
		if !slices.Contains(allowed, v) {
			return nil, Inputf("loss_fn_config[%q] %q is not one of %s for %s", k, v, strings.Join(allowed, ", "), name)
		}
		out[k] = v
	}
	for k := range numeric {
		if _, ok := spec.text[k]; ok {
			return nil, Inputf("loss_fn_config[%q] of %s takes a string (one of %s), not a number", k, name, strings.Join(spec.text[k], ", "))
		}
	}
	return out, nil
}

func keyList[V any](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// resolveLoss validates the loss name and config, returning the config with defaults.
func resolveLoss(name string, cfg map[string]float64) (lossSpec, map[string]float64, error) {
	spec, ok := losses[name]
	if why, refused := refusedLosses[name]; refused {
		return spec, nil, Inputf("%s", why)
	}
	if !ok {
		return spec, nil, Inputf("unknown loss_fn %q (supported: %s)", name, strings.Join(LossNames(), ", "))
	}
	out := map[string]float64{}
	for k, v := range spec.config {
		out[k] = v
	}
	for k, v := range cfg {
		if _, ok := spec.text[k]; ok {
			continue // a string key given a number: resolveTextConfig names it
		}
		if _, ok := spec.config[k]; !ok {
			keys := make([]string, 0, len(spec.config))
			for kk := range spec.config {
				keys = append(keys, kk)
			}
			sort.Strings(keys)
			allowed := "none"
			if len(keys) > 0 {
				allowed = strings.Join(keys, ", ")
			}
			return spec, nil, Inputf("loss_fn_config key %q is not used by %s (accepted keys: %s)", k, name, allowed)
		}
		if !(v >= lossConfigMin && v <= lossConfigMax) { // also refuses NaN
			return spec, nil, Inputf("loss_fn_config[%q] %g must be in [%g, %g]", k, v, lossConfigMin, lossConfigMax)
		}
		out[k] = v
	}
	if name == "ppo" || name == "cispo" || name == "gspo" {
		if out["clip_low_threshold"] > out["clip_high_threshold"] {
			return spec, nil, Inputf("loss_fn_config: clip_low_threshold %g is above clip_high_threshold %g", out["clip_low_threshold"], out["clip_high_threshold"])
		}
	}
	return spec, out, nil
}

// datumLoss evaluates a loss for one datum from its target logprobs lp (n·k values) and
// returns the loss and dL/dlp for each value.
func datumLoss(name string, cfg map[string]float64, lp []float64, in map[string]Tensor) (float64, []float64) {
	grad := make([]float64, len(lp))
	w := func(i int) float64 {
		if t, ok := in["weights"]; ok {
			return float64(t.F32[i])
		}
		return 1
	}
	var loss float64
	switch name {
	case "cross_entropy":
		for i, v := range lp {
			loss -= w(i) * v
			grad[i] = -w(i)
		}
		return loss, grad
	}
	old, adv := in["logprobs"].F32, in["advantages"].F32
	if name == "gspo" {
		return gspoLoss(cfg, lp, old, adv, in["sequence_ratio_mask"].F32, w)
	}
	for i, v := range lp {
		m := w(i)
		if m == 0 {
			continue
		}
		o, a := float64(old[i]), float64(adv[i])
		r := math.Exp(v - o)
		switch name {
		case "importance_sampling":
			loss -= m * r * a
			grad[i] = -m * r * a
		case "ppo":
			lo, hi := cfg["clip_low_threshold"], cfg["clip_high_threshold"]
			cr := math.Min(math.Max(r, lo), hi)
			un, cl := r*a, cr*a
			if un <= cl {
				loss -= m * un
				grad[i] = -m * r * a
			} else {
				loss -= m * cl
				if r > lo && r < hi {
					grad[i] = -m * r * a
				}
			}
		case "cispo":
			lo, hi := cfg["clip_low_threshold"], cfg["clip_high_threshold"]
			cr := math.Min(math.Max(r, lo), hi)
			loss -= m * cr * v * a
			grad[i] = -m * cr * a
		case "dro":
			b := cfg["beta"]
			d := v - o
			loss -= m * (v*a - 0.5*b*d*d)
			grad[i] = -m * (a - b*d)
		}
	}
	return loss, grad
}

// gspoLoss is GSPO-token as tinker-docs /tinker/losses/gspo/ defines it. With M the
// tokens the mask marks, the sequence ratio is S = exp(mean_{j∈M}(lp_j − q_j)); every
// token's ratio s_t = sg(S)·exp(lp_t − sg(lp_t)) has S's value and the gradient of its
// own log-probability, so ∂s_t/∂lp_t = S and ∂s_t/∂lp_j = 0 for j ≠ t. The loss is
// −Σ_t w_t·min(s_t·A_t, clip(s_t, lo, hi)·A_t), summed like PPO's.
func gspoLoss(cfg map[string]float64, lp []float64, old, adv, mask []float32, w func(int) float64) (float64, []float64) {
	var sum float64
	n := 0
	for j, m := range mask {
		if m != 0 {
			sum += lp[j] - float64(old[j])
			n++
		}
	}
	s := math.Exp(sum / float64(n))
	lo, hi := cfg["clip_low_threshold"], cfg["clip_high_threshold"]
	cs := math.Min(math.Max(s, lo), hi)
	grad := make([]float64, len(lp))
	var loss float64
	for t := range lp {
		m := w(t)
		if m == 0 {
			continue
		}
		a := float64(adv[t])
		if un, cl := s*a, cs*a; un <= cl {
			loss -= m * un
			grad[t] = -m * s * a
		} else {
			loss -= m * cl
			if s > lo && s < hi {
				grad[t] = -m * s * a
			}
		}
	}
	return loss, grad
}

// validateDatum checks one datum against the loss and the model.
func validateDatum(i int, d Datum, spec lossSpec, c Config) (k int, err error) {
	n := len(d.Tokens)
	if n == 0 {
		return 0, Inputf("data[%d]: model_input is empty", i)
	}
	if n > c.MaxPositions {
		return 0, Inputf("data[%d]: %d tokens exceed the model's %d positions", i, n, c.MaxPositions)
	}
	for j, t := range d.Tokens {
		if t < 0 || int(t) >= c.VocabSize {
			return 0, Inputf("data[%d]: token id %d at position %d is outside the vocabulary [0, %d)", i, t, j, c.VocabSize)
		}
	}
	allowed := map[string]bool{}
	for _, r := range spec.required {
		allowed[r] = true
		if _, ok := d.LossInputs[r]; !ok {
			return 0, Inputf("data[%d]: loss_fn_inputs needs %q", i, r)
		}
	}
	for _, o := range spec.optional {
		allowed[o] = true
	}
	for name := range d.LossInputs {
		if !allowed[name] {
			keys := append(append([]string(nil), spec.required...), spec.optional...)
			return 0, Inputf("data[%d]: loss_fn_inputs key %q is not used by this loss (accepted: %s)", i, name, strings.Join(keys, ", "))
		}
	}
	tt := d.LossInputs["target_tokens"]
	if tt.DType != Int64 {
		return 0, Inputf("data[%d]: target_tokens must be int64, got %s", i, tt.DType)
	}
	switch {
	case len(tt.Shape) == 1 && tt.Shape[0] == n:
		k = 1
	case len(tt.Shape) == 2 && tt.Shape[0] == n && tt.Shape[1] >= 1:
		k = tt.Shape[1]
	default:
		return 0, Inputf("data[%d]: target_tokens shape %v does not match the %d input tokens (want [%d] or [%d, K])", i, tt.Shape, n, n, n)
	}
	if len(tt.I64) != n*k {
		return 0, Inputf("data[%d]: target_tokens has %d values for shape %v", i, len(tt.I64), tt.Shape)
	}
	for j, t := range tt.I64 {
		if t < 0 || int(t) >= c.VocabSize {
			return 0, Inputf("data[%d]: target_tokens[%d] = %d is outside the vocabulary [0, %d)", i, j, t, c.VocabSize)
		}
	}
	if k > 1 && len(spec.required) > 1 {
		return 0, Inputf("data[%d]: 2-D target_tokens (top-K) are only supported by cross_entropy", i)
	}
	for name, t := range d.LossInputs {
		if name == "target_tokens" {
			continue
		}
		if t.DType != Float32 {
			return 0, Inputf("data[%d]: %s must be float32, got %s", i, name, t.DType)
		}
		if !sameShape(t.Shape, tt.Shape) || len(t.F32) != n*k {
			return 0, Inputf("data[%d]: %s shape %v does not match target_tokens %v", i, name, t.Shape, tt.Shape)
		}
		lo, hi := inputRange(name)
		for j, v := range t.F32 {
			if x := float64(v); !(x >= lo && x <= hi) { // also refuses NaN
				return 0, Inputf("data[%d]: loss_fn_inputs %s[%d] = %g must be in [%g, %g]", i, name, j, x, lo, hi)
			}
		}
	}
	if spec.check != nil {
		if err := spec.check(d); err != nil {
			return 0, Inputf("data[%d]: %s", i, err.Error())
		}
	}
	return k, nil
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
