package engine

import "fmt"

// This file is the engine's public boundary: the types that backend and worker code
// exchange with it. Keep it small and free of HTTP, tenant or telemetry concepts.

// DType is the element type of a Tensor at the engine boundary.
type DType uint8

const (
	// Float32 tensors carry their values in Tensor.F32.
	Float32 DType = iota + 1
	// Int64 tensors carry their values in Tensor.I64.
	Int64
)

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Int64:
		return "int64"
	}
	return "unknown"
}

// Tensor is a dense, row-major host tensor used for loss inputs and outputs.
type Tensor struct {
	DType DType
	Shape []int
	F32   []float32 // set when DType == Float32
	I64   []int64   // set when DType == Int64
}

// Len is the number of elements the shape describes.
func (t Tensor) Len() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Datum is one example: the model input tokens and loss inputs aligned with them
// (position i of Tokens predicts target i).
type Datum struct {
	Tokens     []int32
	LossInputs map[string]Tensor
}

// ForwardRequest is one forward or forward_backward call on one adapter.
type ForwardRequest struct {
	Data         []Datum
	LossFn       string             // cross_entropy | importance_sampling | ppo | cispo | dro | gspo
	LossFnConfig map[string]float64 // loss-specific keys; unknown keys are an error
	// LossFnTextConfig holds string-valued config keys (the SDK's loss_fn_config_v2
	// text values): a loss accepts only the string keys it defines, and only their
	// allowed values. No loss TuFT implements defines one today.
	LossFnTextConfig map[string]string
	Backward         bool // accumulate gradients into the adapter
}

// ForwardResult holds per-datum outputs (at least "logprobs", float32, the shape of
// target_tokens) and metrics keyed "name:reduction" (at least "loss:sum").
type ForwardResult struct {
	Outputs []map[string]Tensor
	Metrics map[string]float64
	Tokens  int // input tokens processed, for throughput metrics
}

// LoraConfig describes a new LoRA adapter.
type LoraConfig struct {
	Rank         int
	Alpha        float64 // 0 means Rank (scale 1)
	Seed         int64
	TrainAttn    bool // q, k, v, o projections
	TrainMLP     bool // gate, up, down projections
	TrainUnembed bool // lm_head
	// Optimizer is the optimizer family the adapter trains with, fixed for its lifetime;
	// the zero value is AdamW.
	Optimizer OptimizerConfig
}

// The optimizer families (OptimizerConfig.Type).
const (
	OptimizerAdamW  = "adamw"
	OptimizerDimuon = "dimuon"
)

// OptimizerConfig selects an adapter's optimizer family, as the Tinker SDK's
// create_model optimizer_config does: {"type":"adamw"} or {"type":"dimuon","version":1}.
// The zero value means AdamW.
type OptimizerConfig struct {
	Type    string // OptimizerAdamW ("" too) or OptimizerDimuon
	Version int    // Dimuon: 1 (0 is read as 1); AdamW: 0
}

// Normalize spells the defaults out: "" becomes adamw, a dimuon version 0 becomes 1.
func (c OptimizerConfig) Normalize() OptimizerConfig {
	if c.Type == "" {
		c.Type = OptimizerAdamW
	}
	if c.Type == OptimizerDimuon && c.Version == 0 {
		c.Version = 1
	}
	return c
}

// String names the family for messages: "adamw", "dimuon v1".
func (c OptimizerConfig) String() string {
	c = c.Normalize()
	if c.Type == OptimizerDimuon {
		return fmt.Sprintf("dimuon v%d", c.Version)
	}
	return c.Type
}

// AdamParams are torch.optim.AdamW's hyper-parameters plus global-norm clipping
// (GradClipNorm 0 disables clipping).
type AdamParams struct {
	LearningRate float64
	Beta1        float64
	Beta2        float64
	Eps          float64
	WeightDecay  float64
	GradClipNorm float64
}

// DimuonParams are one Dimuon step's hyper-parameters (the SDK's DimuonParams; see
// DimuonStep for the update they drive). Make them with NewDimuonParams, which fills the
// defaults of the fields a request may omit.
type DimuonParams struct {
	LearningRate float64 // step length for a direction of Frobenius norm √rank, ≥ 0
	GradClipNorm float64 // global gradient-norm clipping; ≤ 0 disables it
	Beta1        float64 // momentum EMA coefficient, in [0, 1)
	// Damping (> 0) smooths the row and column preconditioner; it is relative to the
	// momentum's mean square, so the step does not depend on the gradient's scale.
	Damping float64
	// RankLRCorrectionExponent e scales the learning rate by (32/rank)^e for every LoRA
	// matrix; 0 disables the correction.
	RankLRCorrectionExponent float64
}

// Dimuon defaults for the fields a request may omit (SDK 0.38 sends learning_rate,
// grad_clip_norm and beta1 only).
const (
	DefaultDimuonBeta1                    = 0.9
	DefaultDimuonDamping                  = 0.1
	DefaultDimuonRankLRCorrectionExponent = 0.5
)

// NewDimuonParams returns Dimuon hyper-parameters with learning rate lr and the defaults
// for everything else: no clipping, beta1 0.9, damping 0.1, rank exponent 0.5.
func NewDimuonParams(lr float64) DimuonParams {
	return DimuonParams{LearningRate: lr, Beta1: DefaultDimuonBeta1, Damping: DefaultDimuonDamping,
		RankLRCorrectionExponent: DefaultDimuonRankLRCorrectionExponent}
}

// SampleParams control generation. TopK <= 0 means no limit; TopP >= 1 means no nucleus
// filtering; Temperature 0 means greedy.
type SampleParams struct {
	MaxTokens   int
	Temperature float64
	TopK        int
	TopP        float64
	Seed        *int64 // nil: a fresh random seed
	StopStrings []string
	StopTokens  []int32
	IgnoreEOS   bool // the model's EOS tokens do not end generation (the SDK's stop=[])
}

// SampleRequest asks for NumSamples continuations of Prompt.
type SampleRequest struct {
	Prompt             []int32
	NumSamples         int
	Params             SampleParams
	PromptLogprobs     bool // fill SampleResult.PromptLogprobs
	TopKPromptLogprobs int  // >0: fill SampleResult.TopKPrompt with this many entries per position
	// TopKSampleLogprobs > 0 fills Sequence.TopK: that many most likely tokens at every
	// sampled position (the Tinker SDK's topk_sample_logprobs).
	TopKSampleLogprobs int
	// PromptTargets, when set, names token ids whose log-probabilities to return at
	// prompt positions (SampleResult.PromptTargetLogprobs; the SDK's target_prompt_logprobs).
	PromptTargets *PromptTargets
	// PromptAltTokensK > 0 draws that many tokens at every prompt position after the
	// first (SampleResult.PromptAltTokens; the SDK's prompt_alt_tokens_k).
	PromptAltTokensK int
}

// PromptTargets are token ids to score at prompt positions, as a Rows×Cols matrix with
// Rows = len(Prompt)-1: row i scores prompt position i+1 (position 0 has no context).
// The matrix is dense (IDs holds Rows*Cols ids, row-major) or sparse CSR (RowStarts has
// Rows+1 offsets into IDs, ColIdx the column of each listed id; cells not listed ask
// nothing). An id of -1 asks nothing either.
type PromptTargets struct {
	Rows, Cols int
	IDs        []int32
	RowStarts  []int // CSR only; nil: dense
	ColIdx     []int // CSR only
}

// Sparse reports whether t is in CSR form.
func (t *PromptTargets) Sparse() bool { return t.RowStarts != nil }

// Span is where row i's ids are in IDs (and its logprobs in PromptTargetLogprobs.Logprobs).
func (t *PromptTargets) Span(i int) (lo, hi int) {
	if t.Sparse() {
		return t.RowStarts[i], t.RowStarts[i+1]
	}
	return i * t.Cols, (i + 1) * t.Cols
}

// FirstRow is the first row that names an id (Rows when none does): rows before it
// need no computation.
func (t *PromptTargets) FirstRow() int {
	for i := 0; i < t.Rows; i++ {
		lo, hi := t.Span(i)
		for _, id := range t.IDs[lo:hi] {
			if id >= 0 {
				return i
			}
		}
	}
	return t.Rows
}

// PromptTargetLogprobs answers PromptTargets: Logprobs[x] is the log-probability of
// IDs[x] at its prompt position under the model's distribution (temperature 1, as
// prompt logprobs), 0 where the id was -1. The layout is the request's (Rows, Cols and,
// when sparse, the same RowStarts and ColIdx).
type PromptTargetLogprobs struct {
	Rows, Cols int
	Logprobs   []float32
	RowStarts  []int // CSR only; nil: dense
	ColIdx     []int // CSR only
}

// PromptAltTokens answers PromptAltTokensK: K independent draws at every prompt position
// 1…n-1, as (n-1)×K row-major matrices (row i: alternatives to Prompt[i+1]). Each draw
// follows the request's sampling parameters, and its log-probability is reported as a
// sampled token's is (see Draw).
type PromptAltTokens struct {
	K        int
	Tokens   []int32
	Logprobs []float32
}

// StopReason says why a sequence ended.
type StopReason string

const (
	StopReasonStop   StopReason = "stop"   // a stop token or stop string
	StopReasonLength StopReason = "length" // MaxTokens or the context length was reached
)

// Sequence is one sampled continuation; Logprobs[i] is the log-probability of Tokens[i].
type Sequence struct {
	Tokens     []int32
	Logprobs   []float32
	StopReason StopReason
	// TopK, when SampleRequest.TopKSampleLogprobs > 0, holds per token the most likely
	// tokens of the distribution it was drawn from, best first, with log-probabilities
	// under the same distribution as Logprobs.
	TopK [][]TokenLogprob
}

// TokenLogprob is one (token, logprob) pair.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// SampleResult is the answer to a SampleRequest.
type SampleResult struct {
	Sequences      []Sequence
	PromptLogprobs []float32        // len(Prompt); NaN at position 0
	TopKPrompt     [][]TokenLogprob // len(Prompt); nil at position 0
	PromptTokens   int
	OutputTokens   int
	// PromptCacheHitTokens is how many prompt positions were served from a cache of
	// earlier requests' prompts instead of computed (a server's prefix cache).
	PromptCacheHitTokens int
	// PromptTargetLogprobs answers SampleRequest.PromptTargets (nil when not asked).
	PromptTargetLogprobs *PromptTargetLogprobs
	// PromptAltTokens answers SampleRequest.PromptAltTokensK (nil when not asked).
	PromptAltTokens *PromptAltTokens
}

// InputError is returned for bad input (wrong shapes, token ids outside the vocabulary,
// unknown loss functions or config keys). Callers map it to a user-category error.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

// Inputf builds an InputError.
func Inputf(format string, args ...any) error { return &InputError{Msg: fmt.Sprintf(format, args...)} }
