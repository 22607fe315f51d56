package export

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/safetensors"
)

// tokenizerFiles are the files of a Hugging Face model directory that describe its
// tokenizer and chat template; a merged export copies those the base has.
var tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
	"vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json"}

// writeHF writes the merged model into dir in Hugging Face layout: config.json and
// generation_config.json from the engine's configuration, model.safetensors in
// bfloat16, and the base's tokenizer files. It returns the names written.
func writeHF(g merger, baseDir, dir string) ([]string, error) {
	c := g.m.Cfg
	head, untied := g.lmHead()
	names := []string{"config.json", "generation_config.json", "model.safetensors"}
	cfg := hfConfig(c, !untied)
	if err := writeJSON(filepath.Join(dir, "config.json"), cfg); err != nil {
		return nil, err
	}
	gen := map[string]any{"eos_token_id": c.EOSTokenIDs}
	if c.BOSTokenID >= 0 {
		gen["bos_token_id"] = c.BOSTokenID
	}
	if err := writeJSON(filepath.Join(dir, "generation_config.json"), gen); err != nil {
		return nil, err
	}
	var ts []safetensors.Tensor
	bf := func(name string, shape []int, v []float32) {
		ts = append(ts, safetensors.FromFloat32AsBF16(name, shape, v))
	}
	D := c.Hidden
	bf("model.embed_tokens.weight", []int{c.VocabSize, D}, g.m.W.Embed)
	if untied {
		bf("lm_head.weight", []int{c.VocabSize, D}, head)
	}
	bf("model.norm.weight", []int{D}, g.m.W.FinalNorm)
	for l := range g.m.W.Layers {
		L := &g.m.W.Layers[l]
		p := fmt.Sprintf("model.layers.%d.", l)
		bf(p+"input_layernorm.weight", []int{D}, L.AttnNorm)
		bf(p+"post_attention_layernorm.weight", []int{D}, L.MLPNorm)
		for pr := engine.Proj(0); pr < engine.NumLayerProj; pr++ {
			w, out, in := g.proj(l, pr)
			mod := "self_attn."
			if pr >= engine.ProjGate {
				mod = "mlp."
			}
			bf(p+mod+pr.ModuleName()+".weight", []int{out, in}, w)
		}
		if c.AttnBias {
			bf(p+"self_attn.q_proj.bias", []int{len(L.Bq)}, L.Bq)
			bf(p+"self_attn.k_proj.bias", []int{len(L.Bk)}, L.Bk)
			bf(p+"self_attn.v_proj.bias", []int{len(L.Bv)}, L.Bv)
		}
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		return nil, fmt.Errorf("export hf: %w", err)
	}
	for _, f := range tokenizerFiles {
		b, err := os.ReadFile(filepath.Join(baseDir, f))
		if err != nil {
			continue // the base has no such file
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return nil, fmt.Errorf("export hf: %w", err)
		}
		names = append(names, f)
	}
	return names, nil
}

// hfConfig is config.json for c (the keys transformers reads for Llama and Qwen2).
func hfConfig(c engine.Config, tied bool) map[string]any {
	arch := map[string]string{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[c.Arch]
	cfg := map[string]any{
		"architectures": []string{arch}, "model_type": c.Arch, "vocab_size": c.VocabSize, "hidden_size": c.Hidden,
		"intermediate_size": c.Intermediate, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim, "rope_theta": c.RopeTheta, "rms_norm_eps": c.RMSNormEps,
		"tie_word_embeddings": tied, "max_position_embeddings": c.MaxPositions, "hidden_act": "silu",
		"torch_dtype": "bfloat16", "use_cache": true,
	}
	if c.Arch == "llama" {
		cfg["attention_bias"] = c.AttnBias
		cfg["mlp_bias"] = false
	} else {
		cfg["use_sliding_window"] = false
	}
	if c.BOSTokenID >= 0 {
		cfg["bos_token_id"] = c.BOSTokenID
	}
	switch len(c.EOSTokenIDs) {
	case 0:
	case 1:
		cfg["eos_token_id"] = c.EOSTokenIDs[0]
	default:
		cfg["eos_token_id"] = c.EOSTokenIDs
	}
	if rs := c.RopeScaling; rs != nil {
		cfg["rope_scaling"] = map[string]any{"rope_type": rs.Type, "factor": rs.Factor, "low_freq_factor": rs.LowFreqFactor,
			"high_freq_factor": rs.HighFreqFactor, "original_max_position_embeddings": rs.OriginalMaxPositions}
	}
	return cfg
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}
