package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tuft-go/tuft/engine/safetensors"
)

// WriteHF writes the model as a HuggingFace-layout directory (config.json,
// generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json with
// the chat template) that Load and transformers read. bf16 narrows the weights to
// bfloat16 (half the size; the dequantised values of 4- and 5-bit formats mostly do not
// fit exactly); otherwise they are float32, exactly the values LoadGGUF computes. dir
// must not exist: the files are written to a temporary directory beside it, then renamed.
func (g *GGUFModel) WriteHF(dir string, bf16 bool) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("write %s: it already exists", dir)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".import-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	c := g.Cfg
	dtype := map[bool]string{true: "bfloat16", false: "float32"}[bf16]
	cfg := map[string]any{
		"architectures":           []string{map[string]string{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[c.Arch]},
		"model_type":              c.Arch,
		"vocab_size":              c.VocabSize,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim,
		"rope_theta":              c.RopeTheta,
		"rms_norm_eps":            c.RMSNormEps,
		"tie_word_embeddings":     c.TieEmbeddings,
		"max_position_embeddings": c.MaxPositions,
		"hidden_act":              "silu",
		"eos_token_id":            c.EOSTokenIDs,
		"torch_dtype":             dtype,
	}
	gen := map[string]any{"eos_token_id": c.EOSTokenIDs}
	if c.BOSTokenID >= 0 {
		cfg["bos_token_id"], gen["bos_token_id"] = c.BOSTokenID, c.BOSTokenID
	}
	if c.Arch == "llama" {
		cfg["attention_bias"] = c.AttnBias
	}
	str := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	tc := map[string]any{"bos_token": str(g.BOS), "eos_token": str(g.EOS), "pad_token": str(g.Pad),
		"add_bos_token": g.AddBOS, "model_max_length": c.MaxPositions, "tokenizer_class": "PreTrainedTokenizerFast"}
	if g.ChatTemplate != "" {
		tc["chat_template"] = g.ChatTemplate
	}
	for fn, v := range map[string]any{"config.json": cfg, "generation_config.json": gen, "tokenizer_config.json": tc} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tmp, fn), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "tokenizer.json"), g.TokenizerJSON, 0o644); err != nil {
		return err
	}
	mk := safetensors.FromFloat32
	if bf16 {
		mk = safetensors.FromFloat32AsBF16
	}
	D, I, V := c.Hidden, c.Intermediate, c.VocabSize
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	w := g.W
	ts := []safetensors.Tensor{mk("model.embed_tokens.weight", []int{V, D}, w.Embed), mk("model.norm.weight", []int{D}, w.FinalNorm)}
	if !c.TieEmbeddings {
		ts = append(ts, mk("lm_head.weight", []int{V, D}, w.LMHead))
	}
	for i, l := range w.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		ts = append(ts,
			mk(p+"input_layernorm.weight", []int{D}, l.AttnNorm),
			mk(p+"self_attn.q_proj.weight", []int{q, D}, l.Wq),
			mk(p+"self_attn.k_proj.weight", []int{kv, D}, l.Wk),
			mk(p+"self_attn.v_proj.weight", []int{kv, D}, l.Wv),
			mk(p+"self_attn.o_proj.weight", []int{D, q}, l.Wo),
			mk(p+"post_attention_layernorm.weight", []int{D}, l.MLPNorm),
			mk(p+"mlp.gate_proj.weight", []int{I, D}, l.Wgate),
			mk(p+"mlp.up_proj.weight", []int{I, D}, l.Wup),
			mk(p+"mlp.down_proj.weight", []int{D, I}, l.Wdown))
		if c.AttnBias {
			ts = append(ts, mk(p+"self_attn.q_proj.bias", []int{q}, l.Bq), mk(p+"self_attn.k_proj.bias", []int{kv}, l.Bk),
				mk(p+"self_attn.v_proj.bias", []int{kv}, l.Bv))
		}
	}
	if err := safetensors.WriteFile(filepath.Join(tmp, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	// MkdirTemp and the safetensors writer make private files; a model directory is
	// read by whoever serves it.
	if err := os.Chmod(filepath.Join(tmp, "model.safetensors"), 0o644); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}
