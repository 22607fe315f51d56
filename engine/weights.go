package engine

import "github.com/tuft-go/tuft/engine/kern"

// Config is a decoder-only transformer's architecture, read from a HuggingFace config.json
// (Llama and Qwen2 families).
type Config struct {
	Arch          string // "llama" or "qwen2"
	VocabSize     int
	Hidden        int // D
	Intermediate  int // I (SwiGLU width)
	Layers        int // L
	Heads         int // Hq
	KVHeads       int // Hkv (grouped-query attention when < Heads)
	HeadDim       int // hd
	RopeTheta     float64
	RopeScaling   *RopeScaling // nil: plain RoPE
	RMSNormEps    float64
	TieEmbeddings bool // lm_head shares the embedding matrix
	AttnBias      bool // q, k, v projections have biases (Qwen2)
	MaxPositions  int
	BOSTokenID    int32   // -1 when the model has none
	EOSTokenIDs   []int32 // generation stops on any of these
}

// RopeScaling is the llama3 frequency scaling of rope_scaling in config.json.
type RopeScaling struct {
	Type                 string // "llama3"
	Factor               float64
	LowFreqFactor        float64
	HighFreqFactor       float64
	OriginalMaxPositions int
}

// Layer holds one transformer block's frozen weights, row-major with HF shapes:
// a Linear's weight is [out, in].
type Layer[T kern.Float] struct {
	AttnNorm []T // [D]            input_layernorm
	Wq       []T // [Hq*hd, D]     self_attn.q_proj
	Wk       []T // [Hkv*hd, D]    self_attn.k_proj
	Wv       []T // [Hkv*hd, D]    self_attn.v_proj
	Wo       []T // [D, Hq*hd]     self_attn.o_proj
	Bq       []T // [Hq*hd]        nil unless Config.AttnBias
	Bk       []T // [Hkv*hd]
	Bv       []T // [Hkv*hd]
	MLPNorm  []T // [D]            post_attention_layernorm
	Wgate    []T // [I, D]         mlp.gate_proj
	Wup      []T // [I, D]         mlp.up_proj
	Wdown    []T // [D, I]         mlp.down_proj
}

// Weights is a base model's frozen parameters. LMHead aliases Embed when tied.
type Weights[T kern.Float] struct {
	Embed     []T // [V, D]  model.embed_tokens
	Layers    []Layer[T]
	FinalNorm []T // [D]     model.norm
	LMHead    []T // [V, D]  lm_head
}

// Proj names a LoRA target projection.
type Proj int

// The LoRA targets, in PEFT's module names.
const (
	ProjQ Proj = iota
	ProjK
	ProjV
	ProjO
	ProjGate
	ProjUp
	ProjDown
	NumLayerProj // number of per-layer targets
)

// ModuleName is the PEFT target module name of p.
func (p Proj) ModuleName() string {
	return [...]string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}[p]
}

// LoraPair is one LoRA update ΔW = scale·B·A of a Linear with weight [Out, In].
type LoraPair[T kern.Float] struct {
	In, Out int
	A       []T // [r, In]
	B       []T // [Out, r]
}

// LoraWeights are an adapter's trainable parameters (or their gradients, or optimizer
// moments, which have the same layout). A nil pair means the projection is not adapted.
type LoraWeights[T kern.Float] struct {
	Rank   int
	Scale  T // alpha / rank
	Layers [][NumLayerProj]*LoraPair[T]
	LMHead *LoraPair[T] // train_unembed
}
