package service

import (
	"github.com/tuft-go/tuft/engine"
)

// checkOptimizer refuses optimizer families this server does not implement ("" is the
// default, adamw).
func checkOptimizer(family string) error {
	switch family {
	case "", OptimizerAdamW, OptimizerDimuon:
		return nil
	}
	return invalidf("optimizer_config.type %q is not supported: this server implements %q and %q (version 1)", family, OptimizerAdamW, OptimizerDimuon)
}

// familyOr spells the default family out.
func familyOr(family string) string {
	if family == "" {
		return OptimizerAdamW
	}
	return family
}

// optimizerConfig is the engine's config of a family. Dimuon has one version (1).
func optimizerConfig(family string) engine.OptimizerConfig {
	return engine.OptimizerConfig{Type: familyOr(family)}.Normalize()
}

// optimizer is the optimizer the run trains with.
func (r *Run) optimizer() engine.OptimizerConfig { return optimizerConfig(r.Optimizer) }

// adapterConfig is the run's LoRA configuration with its optimizer, for creating its
// adapter.
func (r *Run) adapterConfig() engine.LoraConfig {
	c := r.Lora.engine()
	c.Optimizer = r.optimizer()
	return c
}

// paramsField names the optim_step field that carries a family's parameters.
func paramsField(family string) string {
	if family == OptimizerAdamW {
		return "adam_params"
	}
	return `optimizer_params {"type": "` + family + `", ...}`
}
