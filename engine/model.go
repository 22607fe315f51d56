package engine

import "fmt"

// TextCodec turns text into token ids and back. engine/tokenizer implements it; the
// sampler uses Decode to match stop strings.
type TextCodec interface {
	Encode(text string) ([]int32, error)
	Decode(tokens []int32) string
}

// Model is a loaded base model: architecture, frozen weights (held once, shared by every
// adapter) and tokenizer. Its methods are safe for concurrent use on different adapters.
type Model struct {
	Name         string // the name clients use as base_model
	Cfg          Config
	W            *Weights[float32]
	Tok          TextCodec // may be nil for weight-only tests
	ChatTemplate string    // Jinja chat template from tokenizer_config.json, "" if none
}

// NewModel checks that every weight has the shape cfg implies and builds a Model.
func NewModel(name string, cfg Config, w *Weights[float32], tok TextCodec) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := w.check(cfg); err != nil {
		return nil, err
	}
	return &Model{Name: name, Cfg: cfg, W: w, Tok: tok}, nil
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

func (w *Weights[T]) check(c Config) error {
	D, I, V := c.Hidden, c.Intermediate, c.VocabSize
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	want := func(name string, got []T, n int) error {
		if len(got) != n {
			return fmt.Errorf("weights: %s has %d elements, config implies %d", name, len(got), n)
		}
		return nil
	}
	if err := want("model.embed_tokens.weight", w.Embed, V*D); err != nil {
		return err
	}
	if err := want("lm_head.weight", w.LMHead, V*D); err != nil {
		return err
	}
	if err := want("model.norm.weight", w.FinalNorm, D); err != nil {
		return err
	}
	if len(w.Layers) != c.Layers {
		return fmt.Errorf("weights: %d layers, config says %d", len(w.Layers), c.Layers)
	}
	for i := range w.Layers {
		l := &w.Layers[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		checks := []struct {
			name string
			got  []T
			n    int
		}{
			{"input_layernorm.weight", l.AttnNorm, D},
			{"self_attn.q_proj.weight", l.Wq, q * D},
			{"self_attn.k_proj.weight", l.Wk, kv * D},
			{"self_attn.v_proj.weight", l.Wv, kv * D},
			{"self_attn.o_proj.weight", l.Wo, D * q},
			{"post_attention_layernorm.weight", l.MLPNorm, D},
			{"mlp.gate_proj.weight", l.Wgate, I * D},
			{"mlp.up_proj.weight", l.Wup, I * D},
			{"mlp.down_proj.weight", l.Wdown, D * I},
		}
		if c.AttnBias {
			checks = append(checks, []struct {
				name string
				got  []T
				n    int
			}{{"self_attn.q_proj.bias", l.Bq, q}, {"self_attn.k_proj.bias", l.Bk, kv}, {"self_attn.v_proj.bias", l.Bv, kv}}...)
		}
		for _, ck := range checks {
			if err := want(p+ck.name, ck.got, ck.n); err != nil {
				return err
			}
		}
	}
	return nil
}
