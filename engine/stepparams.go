package engine

import "context"

// StepParams are one optimizer step's hyper-parameters: Adam's, or Dimuon's when Dimuon
// is set. The adapter's optimizer family (LoraConfig.Optimizer) decides which one
// applies; parameters of the other family are an InputError that names both.
type StepParams struct {
	Adam   AdamParams
	Dimuon *DimuonParams
}

// Family is the optimizer family the parameters are for.
func (p StepParams) Family() string {
	if p.Dimuon != nil {
		return OptimizerDimuon
	}
	return OptimizerAdamW
}

// LearningRate is the step's learning rate, whatever the family.
func (p StepParams) LearningRate() float64 {
	if p.Dimuon != nil {
		return p.Dimuon.LearningRate
	}
	return p.Adam.LearningRate
}

// Validate checks the parameters of the family they are for.
func (p StepParams) Validate() error {
	if p.Dimuon != nil {
		return p.Dimuon.Validate()
	}
	return p.Adam.Validate()
}

// Step applies one optimizer step of the family p is for: OptimStep (AdamW) or
// DimuonStep. Both refuse parameters of the other family than the adapter's.
func (m *Model) Step(ctx context.Context, a *Adapter, p StepParams) (map[string]float64, error) {
	if p.Dimuon != nil {
		return m.DimuonStep(ctx, a, *p.Dimuon)
	}
	return m.OptimStep(ctx, a, p.Adam)
}
