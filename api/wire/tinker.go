package wire

// The Tinker domain types: what a forward_backward or asample request carries and what
// its result holds, decoded from (and encoded to) the JSON and protobuf forms above. They
// model the Tinker API, not TuFT's engine: package api converts them to the engine's
// types (api/convert.go), so the public client depends on this package and protobuf
// only. Their Go field names are what the decoded golden files under testdata/golden
// show, so a rename shows up there.

// DType is the element type of a Tensor (the SDK's float32 and int64; bfloat16
// arrives widened to float32, int32 to int64).
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

// Tensor is the SDK's TensorData decoded: a dense, row-major tensor (a sparse one
// arrives expanded) of loss inputs and loss outputs.
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

// Datum is one example of forward_backward_input.data: the model input's tokens (its
// encoded_text chunks joined) and the loss inputs by name.
type Datum struct {
	Tokens     []int32
	LossInputs map[string]Tensor
}

// ForwardBackwardInput is a forward or forward_backward request's input: the data, the
// loss function and its config (loss_fn_config's numbers; loss_fn_config_v2's strings in
// LossFnTextConfig).
type ForwardBackwardInput struct {
	Data             []Datum
	LossFn           string
	LossFnConfig     map[string]float64
	LossFnTextConfig map[string]string
}

// ForwardBackwardOutput is a forward or forward_backward result: one map of loss outputs
// per datum (at least "logprobs") and the metrics, keyed "name:reduction".
type ForwardBackwardOutput struct {
	LossFnOutputs []map[string]Tensor
	Metrics       map[string]float64
}

// SampleParams are an asample request's sampling_params with the SDK's defaults filled
// in. TopK <= 0 means no limit; TopP >= 1 no nucleus filtering; Temperature 0 greedy.
type SampleParams struct {
	MaxTokens   int
	Temperature float64
	TopK        int
	TopP        float64
	Seed        *int64 // nil: a fresh random seed
	StopStrings []string
	StopTokens  []int32
	IgnoreEOS   bool // stop: [] (no stop at all, EOS included)
}

// SampleInput is what an asample request asks for: NumSamples continuations of Prompt
// (its encoded_text chunks joined), and the prompt's logprobs if asked.
type SampleInput struct {
	Prompt             []int32
	NumSamples         int
	Params             SampleParams
	PromptLogprobs     bool
	TopKPromptLogprobs int
	// TopKSampleLogprobs > 0 asks for that many most likely tokens at every sampled
	// position (topk_sample_logprobs; Sequence.TopK).
	TopKSampleLogprobs int
	// PromptTargets are target_prompt_logprobs' token ids, nil when not asked
	// (SampleResponse.PromptTargetLogprobs).
	PromptTargets *PromptTargets
	// PromptAltTokensK > 0 asks for that many draws at every prompt position after the
	// first (prompt_alt_tokens_k; SampleResponse.PromptAltTokens).
	PromptAltTokensK int
}

// PromptTargets are target_prompt_logprobs decoded: token ids to score at prompt
// positions, a Rows×Cols matrix with Rows = len(prompt)-1 (row i scores prompt position
// i+1), dense (IDs row-major) or CSR (RowStarts has Rows+1 offsets into IDs, ColIdx the
// column of each id). An id of -1 asks nothing.
type PromptTargets struct {
	Rows, Cols int
	IDs        []int32
	RowStarts  []int // CSR only; nil: dense
	ColIdx     []int // CSR only
}

// Sparse reports whether t is in CSR form.
func (t *PromptTargets) Sparse() bool { return t.RowStarts != nil }

// PromptTargetLogprobs answer PromptTargets in the request's layout: Logprobs[x] is the
// log-probability of IDs[x] at its prompt position (0 where the id was -1).
type PromptTargetLogprobs struct {
	Rows, Cols int
	Logprobs   []float32
	RowStarts  []int // CSR only; nil: dense
	ColIdx     []int // CSR only
}

// PromptAltTokens answer PromptAltTokensK: K draws at every prompt position 1…n-1, as
// (n-1)×K row-major matrices (row i: alternatives to prompt[i+1]).
type PromptAltTokens struct {
	K        int
	Tokens   []int32
	Logprobs []float32
}

// StopReason says why a sampled sequence ended.
type StopReason string

// The stop reasons of a Sequence.
const (
	StopReasonStop   StopReason = "stop"   // a stop token or stop string
	StopReasonLength StopReason = "length" // max_tokens or the context length was reached
)

// Sequence is one sampled continuation (the SDK's SampledSequence); Logprobs[i] is the
// log-probability of Tokens[i].
type Sequence struct {
	Tokens     []int32
	Logprobs   []float32
	StopReason StopReason
	// TopK, when asked (SampleInput.TopKSampleLogprobs), holds per token the most likely
	// tokens of the distribution it was drawn from, best first.
	TopK [][]TokenLogprob
}

// TokenLogprob is one (token, logprob) pair of a top-k list.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// SampleResponse is an asample result.
type SampleResponse struct {
	Sequences      []Sequence
	PromptLogprobs []float32        // one per prompt token; NaN at position 0
	TopKPrompt     [][]TokenLogprob // one row per prompt token; nil at position 0
	// PromptCacheHitTokens is how many prompt positions the server served from its
	// prefix cache.
	PromptCacheHitTokens int
	// PromptTargetLogprobs answers SampleInput.PromptTargets (nil when not asked).
	PromptTargetLogprobs *PromptTargetLogprobs
	// PromptAltTokens answers SampleInput.PromptAltTokensK (nil when not asked).
	PromptAltTokens *PromptAltTokens
}
