package api

import (
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/engine"
)

// The one place where the Tinker wire types (api/wire) meet the engine's: requests are
// converted on their way to the service, results on their way back to the wire's
// encoders. api/wire imports nothing of the engine, so the public client does not either.
// Conversions share the big token and value arrays (a slice header is copied, never the
// elements): a decoded forward_backward body is held once.

func engineDType(d wire.DType) engine.DType {
	switch d {
	case wire.Float32:
		return engine.Float32
	case wire.Int64:
		return engine.Int64
	}
	return 0 // refused by the engine's validation, like any other bad tensor
}

func wireDType(d engine.DType) wire.DType {
	switch d {
	case engine.Float32:
		return wire.Float32
	case engine.Int64:
		return wire.Int64
	}
	return 0
}

func engineTensor(t wire.Tensor) engine.Tensor {
	return engine.Tensor{DType: engineDType(t.DType), Shape: t.Shape, F32: t.F32, I64: t.I64}
}

func wireTensor(t engine.Tensor) wire.Tensor {
	return wire.Tensor{DType: wireDType(t.DType), Shape: t.Shape, F32: t.F32, I64: t.I64}
}

// forwardRequest is a decoded forward or forward_backward call as the engine takes it.
func forwardRequest(call *wire.ForwardBackwardCall) engine.ForwardRequest {
	in := call.Req
	data := make([]engine.Datum, len(in.Data))
	for i, d := range in.Data {
		inputs := make(map[string]engine.Tensor, len(d.LossInputs))
		for name, t := range d.LossInputs {
			inputs[name] = engineTensor(t)
		}
		data[i] = engine.Datum{Tokens: d.Tokens, LossInputs: inputs}
	}
	return engine.ForwardRequest{Data: data, LossFn: in.LossFn, LossFnConfig: in.LossFnConfig,
		LossFnTextConfig: in.LossFnTextConfig, Backward: !call.ForwardOnly}
}

// forwardOutput is an engine result as the wire encodes it.
func forwardOutput(res engine.ForwardResult) wire.ForwardBackwardOutput {
	out := wire.ForwardBackwardOutput{Metrics: res.Metrics}
	if res.Outputs != nil {
		out.LossFnOutputs = make([]map[string]wire.Tensor, len(res.Outputs))
	}
	for i, o := range res.Outputs {
		m := make(map[string]wire.Tensor, len(o))
		for name, t := range o {
			m[name] = wireTensor(t)
		}
		out.LossFnOutputs[i] = m
	}
	return out
}

// sampleRequest is a decoded asample request as the engine takes it.
func sampleRequest(in wire.SampleInput) engine.SampleRequest {
	p := in.Params
	r := engine.SampleRequest{Prompt: in.Prompt, NumSamples: in.NumSamples, PromptLogprobs: in.PromptLogprobs,
		TopKPromptLogprobs: in.TopKPromptLogprobs, TopKSampleLogprobs: in.TopKSampleLogprobs, PromptAltTokensK: in.PromptAltTokensK,
		Params: engine.SampleParams{MaxTokens: p.MaxTokens, Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, Seed: p.Seed,
			StopStrings: p.StopStrings, StopTokens: p.StopTokens, IgnoreEOS: p.IgnoreEOS}}
	if t := in.PromptTargets; t != nil {
		r.PromptTargets = &engine.PromptTargets{Rows: t.Rows, Cols: t.Cols, IDs: t.IDs, RowStarts: t.RowStarts, ColIdx: t.ColIdx}
	}
	return r
}

// wireTopK is rows of (token, logprob) pairs as the wire encodes them.
func wireTopK(rows [][]engine.TokenLogprob) [][]wire.TokenLogprob {
	if rows == nil {
		return nil
	}
	out := make([][]wire.TokenLogprob, len(rows))
	for i, row := range rows {
		if row == nil {
			continue
		}
		r := make([]wire.TokenLogprob, len(row))
		for j, e := range row {
			r[j] = wire.TokenLogprob{Token: e.Token, Logprob: e.Logprob}
		}
		out[i] = r
	}
	return out
}

// sampleResponse is an engine sampling result as the wire encodes it.
func sampleResponse(res engine.SampleResult) wire.SampleResponse {
	out := wire.SampleResponse{PromptLogprobs: res.PromptLogprobs, PromptCacheHitTokens: res.PromptCacheHitTokens}
	if res.Sequences != nil {
		out.Sequences = make([]wire.Sequence, len(res.Sequences))
	}
	for i, s := range res.Sequences {
		out.Sequences[i] = wire.Sequence{Tokens: s.Tokens, Logprobs: s.Logprobs, StopReason: wire.StopReason(s.StopReason), TopK: wireTopK(s.TopK)}
	}
	out.TopKPrompt = wireTopK(res.TopKPrompt)
	if t := res.PromptTargetLogprobs; t != nil {
		out.PromptTargetLogprobs = &wire.PromptTargetLogprobs{Rows: t.Rows, Cols: t.Cols, Logprobs: t.Logprobs, RowStarts: t.RowStarts, ColIdx: t.ColIdx}
	}
	if a := res.PromptAltTokens; a != nil {
		out.PromptAltTokens = &wire.PromptAltTokens{K: a.K, Tokens: a.Tokens, Logprobs: a.Logprobs}
	}
	return out
}

// adamParams are optim_step's Adam parameters as the engine takes them.
func adamParams(p wire.AdamParams) engine.AdamParams {
	return engine.AdamParams{LearningRate: p.LearningRate, Beta1: p.Beta1, Beta2: p.Beta2, Eps: p.Eps,
		WeightDecay: p.WeightDecay, GradClipNorm: p.GradClipNorm}
}

// dimuonParams are optim_step's Dimuon parameters as the engine takes them.
func dimuonParams(p wire.DimuonParams) engine.DimuonParams {
	return engine.DimuonParams{LearningRate: p.LearningRate, GradClipNorm: p.GradClipNorm, Beta1: p.Beta1, Damping: p.Damping,
		RankLRCorrectionExponent: p.RankLRCorrectionExponent}
}

// loraConfig is create_model's lora_config as the engine takes it; seed is used when the
// request gives none.
func loraConfig(l wire.LoraConfig, seed int64) engine.LoraConfig {
	if l.Seed != nil {
		seed = *l.Seed
	}
	return engine.LoraConfig{Rank: l.Rank, Seed: seed, TrainAttn: l.TrainAttn, TrainMLP: l.TrainMLP, TrainUnembed: l.TrainUnembed}
}
