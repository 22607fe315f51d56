package engine

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
	LossFn       string             // cross_entropy | importance_sampling | ppo | cispo | dro
	LossFnConfig map[string]float64 // loss-specific keys; unknown keys are an error
	Backward     bool               // accumulate gradients into the adapter
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
}

// InputError is returned for bad input (wrong shapes, token ids outside the vocabulary,
// unknown loss functions or config keys). Callers map it to a user-category error.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

// Inputf builds an InputError.
func Inputf(format string, args ...any) error { return &InputError{Msg: sprintf(format, args...)} }
