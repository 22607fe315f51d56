package engine

import (
	"encoding/json"
	"fmt"
)

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

// Validate reports the first inconsistent field of cfg.
func (c Config) Validate() error {
	switch {
	case c.Arch != "llama" && c.Arch != "qwen2":
		return fmt.Errorf("config: unsupported architecture %q (want llama or qwen2)", c.Arch)
	case c.VocabSize <= 0:
		return fmt.Errorf("config: vocab_size %d must be positive", c.VocabSize)
	case c.Hidden <= 0 || c.Intermediate <= 0 || c.Layers <= 0:
		return fmt.Errorf("config: hidden_size %d, intermediate_size %d and num_hidden_layers %d must be positive", c.Hidden, c.Intermediate, c.Layers)
	case c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("config: num_attention_heads %d must be a positive multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
	case c.HeadDim <= 0 || c.HeadDim%2 != 0:
		return fmt.Errorf("config: head_dim %d must be positive and even", c.HeadDim)
	case c.RopeTheta <= 0:
		return fmt.Errorf("config: rope_theta %g must be positive", c.RopeTheta)
	case c.RMSNormEps <= 0:
		return fmt.Errorf("config: rms_norm_eps %g must be positive", c.RMSNormEps)
	case c.MaxPositions <= 0:
		return fmt.Errorf("config: max_position_embeddings %d must be positive", c.MaxPositions)
	}
	return nil
}

type hfConfig struct {
	ModelType             string          `json:"model_type"`
	Architectures         []string        `json:"architectures"`
	VocabSize             int             `json:"vocab_size"`
	HiddenSize            int             `json:"hidden_size"`
	IntermediateSize      int             `json:"intermediate_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	AttentionBias         *bool           `json:"attention_bias"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	BOSTokenID            json.RawMessage `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
	HiddenAct             string          `json:"hidden_act"`
}

// tokenIDs reads an int, a list of ints, or null.
func tokenIDs(raw json.RawMessage) ([]int32, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int32
	if json.Unmarshal(raw, &one) == nil {
		return []int32{one}, nil
	}
	var many []int32
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("must be an integer or a list of integers")
	}
	return many, nil
}

// ParseHFConfig reads a HuggingFace config.json of a Llama or Qwen2 model.
func ParseHFConfig(data []byte) (Config, error) {
	var h hfConfig
	if err := json.Unmarshal(data, &h); err != nil {
		return Config{}, fmt.Errorf("config.json is not valid JSON: %w", err)
	}
	c := Config{VocabSize: h.VocabSize, Hidden: h.HiddenSize, Intermediate: h.IntermediateSize, Layers: h.NumHiddenLayers,
		Heads: h.NumAttentionHeads, KVHeads: h.NumAttentionHeads, RopeTheta: 10000, RMSNormEps: 1e-6,
		MaxPositions: h.MaxPositionEmbeddings, BOSTokenID: -1}
	switch h.ModelType {
	case "llama":
		c.Arch, c.RMSNormEps = "llama", 1e-6
		if h.AttentionBias != nil && *h.AttentionBias {
			c.AttnBias = true
		}
	case "qwen2":
		c.Arch, c.AttnBias = "qwen2", true
	default:
		return Config{}, fmt.Errorf("config.json: model_type %q is not supported (llama or qwen2)", h.ModelType)
	}
	if h.HiddenAct != "" && h.HiddenAct != "silu" {
		return Config{}, fmt.Errorf("config.json: hidden_act %q is not supported (silu)", h.HiddenAct)
	}
	if h.NumKeyValueHeads != nil {
		c.KVHeads = *h.NumKeyValueHeads
	}
	if c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if h.HeadDim != nil {
		c.HeadDim = *h.HeadDim
	}
	if h.RopeTheta != nil {
		c.RopeTheta = *h.RopeTheta
	}
	if h.RMSNormEps != nil {
		c.RMSNormEps = *h.RMSNormEps
	}
	if h.TieWordEmbeddings != nil {
		c.TieEmbeddings = *h.TieWordEmbeddings
	} else {
		c.TieEmbeddings = true // PretrainedConfig's default
	}
	if len(h.RopeScaling) > 0 && string(h.RopeScaling) != "null" {
		var rs struct {
			RopeType        string  `json:"rope_type"`
			Type            string  `json:"type"`
			Factor          float64 `json:"factor"`
			LowFreqFactor   float64 `json:"low_freq_factor"`
			HighFreqFactor  float64 `json:"high_freq_factor"`
			OriginalMaxPosE int     `json:"original_max_position_embeddings"`
		}
		if err := json.Unmarshal(h.RopeScaling, &rs); err != nil {
			return Config{}, fmt.Errorf("config.json: rope_scaling: %w", err)
		}
		t := rs.RopeType
		if t == "" {
			t = rs.Type
		}
		switch t {
		case "llama3":
			if rs.Factor <= 0 || rs.LowFreqFactor <= 0 || rs.HighFreqFactor <= rs.LowFreqFactor || rs.OriginalMaxPosE <= 0 {
				return Config{}, fmt.Errorf("config.json: rope_scaling: llama3 needs factor > 0, 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0")
			}
			c.RopeScaling = &RopeScaling{Type: "llama3", Factor: rs.Factor, LowFreqFactor: rs.LowFreqFactor,
				HighFreqFactor: rs.HighFreqFactor, OriginalMaxPositions: rs.OriginalMaxPosE}
		case "default", "":
		default:
			return Config{}, fmt.Errorf("config.json: rope_scaling type %q is not supported (llama3)", t)
		}
	}
	bos, err := tokenIDs(h.BOSTokenID)
	if err != nil {
		return Config{}, fmt.Errorf("config.json: bos_token_id %w", err)
	}
	if len(bos) > 0 {
		c.BOSTokenID = bos[0]
	}
	if c.EOSTokenIDs, err = tokenIDs(h.EOSTokenID); err != nil {
		return Config{}, fmt.Errorf("config.json: eos_token_id %w", err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
