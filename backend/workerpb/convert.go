package workerpb

import (
	"fmt"

	"github.com/tuft-go/tuft/engine"
)

// Conversions between engine types and their messages, used by both ends of the wire
// (backend's gRPC client and the worker's server).

// FromConfig encodes a model architecture.
func FromConfig(c engine.Config) *ModelConfig {
	m := &ModelConfig{Arch: c.Arch, VocabSize: int32(c.VocabSize), Hidden: int32(c.Hidden), Intermediate: int32(c.Intermediate),
		Layers: int32(c.Layers), Heads: int32(c.Heads), KvHeads: int32(c.KVHeads), HeadDim: int32(c.HeadDim), RopeTheta: c.RopeTheta,
		RmsNormEps: c.RMSNormEps, TieEmbeddings: c.TieEmbeddings, AttnBias: c.AttnBias, MaxPositions: int32(c.MaxPositions),
		BosTokenId: c.BOSTokenID, EosTokenIds: c.EOSTokenIDs}
	if r := c.RopeScaling; r != nil {
		m.RopeScaling = &RopeScaling{Type: r.Type, Factor: r.Factor, LowFreqFactor: r.LowFreqFactor, HighFreqFactor: r.HighFreqFactor,
			OriginalMaxPositions: int32(r.OriginalMaxPositions)}
	}
	return m
}

// ToConfig decodes a model architecture.
func ToConfig(m *ModelConfig) engine.Config {
	c := engine.Config{Arch: m.GetArch(), VocabSize: int(m.GetVocabSize()), Hidden: int(m.GetHidden()), Intermediate: int(m.GetIntermediate()),
		Layers: int(m.GetLayers()), Heads: int(m.GetHeads()), KVHeads: int(m.GetKvHeads()), HeadDim: int(m.GetHeadDim()), RopeTheta: m.GetRopeTheta(),
		RMSNormEps: m.GetRmsNormEps(), TieEmbeddings: m.GetTieEmbeddings(), AttnBias: m.GetAttnBias(), MaxPositions: int(m.GetMaxPositions()),
		BOSTokenID: m.GetBosTokenId(), EOSTokenIDs: m.GetEosTokenIds()}
	if r := m.GetRopeScaling(); r != nil {
		c.RopeScaling = &engine.RopeScaling{Type: r.Type, Factor: r.Factor, LowFreqFactor: r.LowFreqFactor, HighFreqFactor: r.HighFreqFactor,
			OriginalMaxPositions: int(r.OriginalMaxPositions)}
	}
	return c
}

// FromLoraConfig encodes adapter settings.
func FromLoraConfig(c engine.LoraConfig) *LoraConfig {
	return &LoraConfig{Rank: int32(c.Rank), Alpha: c.Alpha, Seed: c.Seed, TrainAttn: c.TrainAttn, TrainMlp: c.TrainMLP, TrainUnembed: c.TrainUnembed,
		Optimizer: FromOptimizerConfig(c.Optimizer)}
}

// FromOptimizerConfig encodes an optimizer family; AdamW, the default, is left out (nil),
// so messages of AdamW adapters are what they were before optimizers had families.
func FromOptimizerConfig(c engine.OptimizerConfig) *OptimizerConfig {
	c = c.Normalize()
	if c.Type == engine.OptimizerAdamW {
		return nil
	}
	return &OptimizerConfig{Type: c.Type, Version: int32(c.Version)}
}

// ToOptimizerConfig decodes an optimizer family (nil: the zero value, which is adamw).
func ToOptimizerConfig(c *OptimizerConfig) engine.OptimizerConfig {
	return engine.OptimizerConfig{Type: c.GetType(), Version: int(c.GetVersion())}
}

// ToLoraConfig decodes adapter settings.
func ToLoraConfig(c *LoraConfig) engine.LoraConfig {
	return engine.LoraConfig{Rank: int(c.GetRank()), Alpha: c.GetAlpha(), Seed: c.GetSeed(), TrainAttn: c.GetTrainAttn(),
		TrainMLP: c.GetTrainMlp(), TrainUnembed: c.GetTrainUnembed(), Optimizer: ToOptimizerConfig(c.GetOptimizer())}
}

func fromTensor(t engine.Tensor) *Tensor {
	out := &Tensor{F32: t.F32, I64: t.I64}
	switch t.DType {
	case engine.Float32:
		out.Dtype = Tensor_FLOAT32
	case engine.Int64:
		out.Dtype = Tensor_INT64
	}
	for _, d := range t.Shape {
		out.Shape = append(out.Shape, int64(d))
	}
	return out
}

func toTensor(name string, t *Tensor) (engine.Tensor, error) {
	out := engine.Tensor{F32: t.GetF32(), I64: t.GetI64()}
	switch t.GetDtype() {
	case Tensor_FLOAT32:
		out.DType = engine.Float32
	case Tensor_INT64:
		out.DType = engine.Int64
	default:
		return engine.Tensor{}, fmt.Errorf("tensor %s: unknown dtype %v", name, t.GetDtype())
	}
	for _, d := range t.GetShape() {
		out.Shape = append(out.Shape, int(d))
	}
	return out, nil
}

func fromTensors(m map[string]engine.Tensor) map[string]*Tensor {
	out := make(map[string]*Tensor, len(m))
	for k, t := range m {
		out[k] = fromTensor(t)
	}
	return out
}

func toTensors(m map[string]*Tensor) (map[string]engine.Tensor, error) {
	out := make(map[string]engine.Tensor, len(m))
	for k, t := range m {
		v, err := toTensor(k, t)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

// FromForwardRequest encodes a forward(_backward) request.
func FromForwardRequest(ref *AdapterRef, r engine.ForwardRequest) *ForwardBackwardRequest {
	out := &ForwardBackwardRequest{Adapter: ref, LossFn: r.LossFn, LossFnConfig: r.LossFnConfig, LossFnTextConfig: r.LossFnTextConfig, Backward: r.Backward}
	for _, d := range r.Data {
		out.Data = append(out.Data, &Datum{Tokens: d.Tokens, LossInputs: fromTensors(d.LossInputs)})
	}
	return out
}

// ToForwardRequest decodes a forward(_backward) request.
func ToForwardRequest(r *ForwardBackwardRequest) (engine.ForwardRequest, error) {
	out := engine.ForwardRequest{LossFn: r.GetLossFn(), LossFnConfig: r.GetLossFnConfig(), LossFnTextConfig: r.GetLossFnTextConfig(), Backward: r.GetBackward()}
	for i, d := range r.GetData() {
		in, err := toTensors(d.GetLossInputs())
		if err != nil {
			return engine.ForwardRequest{}, fmt.Errorf("datum %d: %w", i, err)
		}
		out.Data = append(out.Data, engine.Datum{Tokens: d.GetTokens(), LossInputs: in})
	}
	return out, nil
}

// FromForwardResult encodes a forward(_backward) result.
func FromForwardResult(r engine.ForwardResult) *ForwardBackwardReply {
	out := &ForwardBackwardReply{Metrics: r.Metrics, Tokens: int64(r.Tokens)}
	for _, o := range r.Outputs {
		out.Outputs = append(out.Outputs, &TensorMap{Tensors: fromTensors(o)})
	}
	return out
}

// ToForwardResult decodes a forward(_backward) result.
func ToForwardResult(r *ForwardBackwardReply) (engine.ForwardResult, error) {
	out := engine.ForwardResult{Metrics: r.GetMetrics(), Tokens: int(r.GetTokens())}
	for i, o := range r.GetOutputs() {
		m, err := toTensors(o.GetTensors())
		if err != nil {
			return engine.ForwardResult{}, fmt.Errorf("output %d: %w", i, err)
		}
		out.Outputs = append(out.Outputs, m)
	}
	if out.Metrics == nil {
		out.Metrics = map[string]float64{}
	}
	return out, nil
}

// FromAdamParams encodes optimizer settings.
func FromAdamParams(p engine.AdamParams) *AdamParams {
	return &AdamParams{LearningRate: p.LearningRate, Beta1: p.Beta1, Beta2: p.Beta2, Eps: p.Eps, WeightDecay: p.WeightDecay, GradClipNorm: p.GradClipNorm}
}

// ToAdamParams decodes optimizer settings.
func ToAdamParams(p *AdamParams) engine.AdamParams {
	return engine.AdamParams{LearningRate: p.GetLearningRate(), Beta1: p.GetBeta1(), Beta2: p.GetBeta2(), Eps: p.GetEps(),
		WeightDecay: p.GetWeightDecay(), GradClipNorm: p.GetGradClipNorm()}
}

// FromStepParams encodes one optimizer step of adapter ref.
func FromStepParams(ref *AdapterRef, p engine.StepParams) *OptimStepRequest {
	out := &OptimStepRequest{Adapter: ref}
	if d := p.Dimuon; d != nil {
		out.Dimuon = &DimuonParams{LearningRate: d.LearningRate, GradClipNorm: d.GradClipNorm, Beta1: d.Beta1, Damping: d.Damping,
			RankLrCorrectionExponent: d.RankLRCorrectionExponent}
	} else {
		out.Params = FromAdamParams(p.Adam)
	}
	return out
}

// ToStepParams decodes one optimizer step: Dimuon's when the request carries its
// parameters, else Adam's.
func ToStepParams(r *OptimStepRequest) (engine.StepParams, error) {
	if d := r.GetDimuon(); d != nil {
		if r.GetParams() != nil {
			return engine.StepParams{}, fmt.Errorf("optim_step carries both Adam's and Dimuon's parameters")
		}
		return engine.StepParams{Dimuon: &engine.DimuonParams{LearningRate: d.GetLearningRate(), GradClipNorm: d.GetGradClipNorm(),
			Beta1: d.GetBeta1(), Damping: d.GetDamping(), RankLRCorrectionExponent: d.GetRankLrCorrectionExponent()}}, nil
	}
	return engine.StepParams{Adam: ToAdamParams(r.GetParams())}, nil
}

// FromSampleRequest encodes a sampling request.
func FromSampleRequest(ref *AdapterRef, r engine.SampleRequest) *SampleRequest {
	p := r.Params
	return &SampleRequest{Adapter: ref, Prompt: r.Prompt, NumSamples: int32(r.NumSamples), PromptLogprobs: r.PromptLogprobs,
		TopkPromptLogprobs: int32(r.TopKPromptLogprobs), TopkSampleLogprobs: int32(r.TopKSampleLogprobs),
		PromptTargets: fromPromptTargets(r.PromptTargets), PromptAltTokensK: int32(r.PromptAltTokensK),
		Params: &SampleParams{MaxTokens: int32(p.MaxTokens), Temperature: p.Temperature, TopK: int32(p.TopK), TopP: p.TopP,
			Seed: p.Seed, StopStrings: p.StopStrings, StopTokens: p.StopTokens, IgnoreEos: p.IgnoreEOS}}
}

// ToSampleRequest decodes a sampling request.
func ToSampleRequest(r *SampleRequest) engine.SampleRequest {
	p := r.GetParams()
	var seed *int64
	if p != nil && p.Seed != nil {
		v := *p.Seed
		seed = &v
	}
	return engine.SampleRequest{Prompt: r.GetPrompt(), NumSamples: int(r.GetNumSamples()), PromptLogprobs: r.GetPromptLogprobs(),
		TopKPromptLogprobs: int(r.GetTopkPromptLogprobs()), TopKSampleLogprobs: int(r.GetTopkSampleLogprobs()),
		PromptTargets: toPromptTargets(r.GetPromptTargets()), PromptAltTokensK: int(r.GetPromptAltTokensK()),
		Params: engine.SampleParams{MaxTokens: int(p.GetMaxTokens()), Temperature: p.GetTemperature(), TopK: int(p.GetTopK()),
			TopP: p.GetTopP(), Seed: seed, StopStrings: p.GetStopStrings(), StopTokens: p.GetStopTokens(), IgnoreEOS: p.GetIgnoreEos()}}
}

// FromSampleResult encodes sampled sequences.
func FromSampleResult(r engine.SampleResult) *SampleReply {
	out := &SampleReply{PromptLogprobs: r.PromptLogprobs, PromptTokens: int64(r.PromptTokens), OutputTokens: int64(r.OutputTokens),
		PromptCacheHitTokens: int64(r.PromptCacheHitTokens)}
	for _, s := range r.Sequences {
		out.Sequences = append(out.Sequences, &Sequence{Tokens: s.Tokens, Logprobs: s.Logprobs, StopReason: string(s.StopReason), Topk: fromTopK(s.TopK)})
	}
	if t := r.PromptTargetLogprobs; t != nil {
		out.PromptTargetLogprobs = &PromptTargetLogprobs{Rows: int32(t.Rows), Cols: int32(t.Cols), Logprobs: t.Logprobs,
			Sparse: t.RowStarts != nil, RowStarts: int32s(t.RowStarts), ColIdx: int32s(t.ColIdx)}
	}
	if a := r.PromptAltTokens; a != nil {
		out.PromptAltTokens = &PromptAltTokens{K: int32(a.K), Tokens: a.Tokens, Logprobs: a.Logprobs}
	}
	if r.TopKPrompt != nil {
		for _, row := range r.TopKPrompt {
			e := &TopKEntry{}
			for _, t := range row {
				e.Entries = append(e.Entries, &TokenLogprob{Token: t.Token, Logprob: t.Logprob})
			}
			out.TopkPrompt = append(out.TopkPrompt, e)
		}
	}
	return out
}

// ToSampleResult decodes sampled sequences.
func ToSampleResult(r *SampleReply) engine.SampleResult {
	out := engine.SampleResult{PromptLogprobs: r.GetPromptLogprobs(), PromptTokens: int(r.GetPromptTokens()), OutputTokens: int(r.GetOutputTokens()),
		PromptCacheHitTokens: int(r.GetPromptCacheHitTokens())}
	for _, s := range r.GetSequences() {
		sq := engine.Sequence{Tokens: s.GetTokens(), Logprobs: s.GetLogprobs(), StopReason: engine.StopReason(s.GetStopReason())}
		if tk := s.GetTopk(); len(tk) > 0 {
			sq.TopK = make([][]engine.TokenLogprob, len(tk))
			for i, e := range tk {
				sq.TopK[i] = toTokenLogprobs(e)
			}
		}
		out.Sequences = append(out.Sequences, sq)
	}
	if t := r.GetPromptTargetLogprobs(); t != nil {
		out.PromptTargetLogprobs = &engine.PromptTargetLogprobs{Rows: int(t.GetRows()), Cols: int(t.GetCols()), Logprobs: t.GetLogprobs()}
		if out.PromptTargetLogprobs.Logprobs == nil {
			out.PromptTargetLogprobs.Logprobs = []float32{}
		}
		if t.GetSparse() {
			out.PromptTargetLogprobs.RowStarts, out.PromptTargetLogprobs.ColIdx = ints(t.GetRowStarts()), ints(t.GetColIdx())
		}
	}
	if a := r.GetPromptAltTokens(); a != nil {
		out.PromptAltTokens = &engine.PromptAltTokens{K: int(a.GetK()), Tokens: a.GetTokens(), Logprobs: a.GetLogprobs()}
		if out.PromptAltTokens.Tokens == nil {
			out.PromptAltTokens.Tokens, out.PromptAltTokens.Logprobs = []int32{}, []float32{}
		}
	}
	if tk := r.GetTopkPrompt(); len(tk) > 0 {
		out.TopKPrompt = make([][]engine.TokenLogprob, len(tk))
		for i, e := range tk {
			if len(e.GetEntries()) == 0 {
				continue // position 0 has none
			}
			for _, t := range e.GetEntries() {
				out.TopKPrompt[i] = append(out.TopKPrompt[i], engine.TokenLogprob{Token: t.GetToken(), Logprob: t.GetLogprob()})
			}
		}
	}
	return out
}

// FromTokenEvent encodes a token drawn by a streamed sample.
func FromTokenEvent(ev engine.TokenEvent) *TokenEvent {
	out := &TokenEvent{Seq: int32(ev.Seq), Token: ev.Token, Logprob: ev.Logprob, Stop: string(ev.Stop)}
	for _, t := range ev.Top {
		out.Top = append(out.Top, &TokenLogprob{Token: t.Token, Logprob: t.Logprob})
	}
	return out
}

// ToTokenEvent decodes a token drawn by a streamed sample.
func ToTokenEvent(ev *TokenEvent) engine.TokenEvent {
	out := engine.TokenEvent{Seq: int(ev.GetSeq()), Token: ev.GetToken(), Logprob: ev.GetLogprob(), Stop: engine.StopReason(ev.GetStop())}
	for _, t := range ev.GetTop() {
		out.Top = append(out.Top, engine.TokenLogprob{Token: t.GetToken(), Logprob: t.GetLogprob()})
	}
	return out
}

// fromPromptTargets encodes target_prompt_logprobs' ids (nil: none asked).
func fromPromptTargets(t *engine.PromptTargets) *PromptTargets {
	if t == nil {
		return nil
	}
	return &PromptTargets{Rows: int32(t.Rows), Cols: int32(t.Cols), Ids: t.IDs, Sparse: t.Sparse(),
		RowStarts: int32s(t.RowStarts), ColIdx: int32s(t.ColIdx)}
}

// toPromptTargets decodes them; the engine validates the layout before using it.
func toPromptTargets(t *PromptTargets) *engine.PromptTargets {
	if t == nil {
		return nil
	}
	out := &engine.PromptTargets{Rows: int(t.GetRows()), Cols: int(t.GetCols()), IDs: t.GetIds()}
	if t.GetSparse() {
		out.RowStarts, out.ColIdx = ints(t.GetRowStarts()), ints(t.GetColIdx())
	}
	return out
}

// fromTopK encodes per-token top-k rows (nil: none asked).
func fromTopK(rows [][]engine.TokenLogprob) []*TopKEntry {
	var out []*TopKEntry
	for _, row := range rows {
		e := &TopKEntry{}
		for _, t := range row {
			e.Entries = append(e.Entries, &TokenLogprob{Token: t.Token, Logprob: t.Logprob})
		}
		out = append(out, e)
	}
	return out
}

func toTokenLogprobs(e *TopKEntry) []engine.TokenLogprob {
	out := make([]engine.TokenLogprob, 0, len(e.GetEntries()))
	for _, t := range e.GetEntries() {
		out = append(out, engine.TokenLogprob{Token: t.GetToken(), Logprob: t.GetLogprob()})
	}
	return out
}

// int32s and ints convert index lists (a sparse layout's indices fit in int32: the
// engine bounds them by the ids' count).
func int32s(v []int) []int32 {
	if v == nil {
		return nil
	}
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

func ints(v []int32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}
