package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/tuft-go/tuft/engine/safetensors"
	"github.com/tuft-go/tuft/engine/tokenizer"
)

// Load reads a model directory in HuggingFace layout: config.json, model.safetensors (or
// shards listed in model.safetensors.index.json) in F32, BF16 or F16, tokenizer.json, and
// the chat template from tokenizer_config.json (or chat_template.jinja). name is what
// clients call the model.
func Load(dir, name string) (*Model, error) {
	cb, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	cfg, err := ParseHFConfig(cb)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	if gb, err := os.ReadFile(filepath.Join(dir, "generation_config.json")); err == nil {
		var g struct {
			EOS json.RawMessage `json:"eos_token_id"`
		}
		if json.Unmarshal(gb, &g) == nil {
			if ids, err := tokenIDs(g.EOS); err == nil && len(ids) > 0 {
				cfg.EOSTokenIDs = ids
			}
		}
	}
	files, err := weightFiles(dir)
	if err != nil {
		return nil, err
	}
	tensors := map[string]safetensors.Tensor{}
	owner := map[string]string{}
	for _, f := range files {
		sf, err := safetensors.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("load model: %w", err)
		}
		for _, t := range sf.Tensors {
			if prev, dup := owner[t.Name]; dup {
				return nil, fmt.Errorf("load model: tensor %s is in both %s and %s", t.Name, prev, f)
			}
			tensors[t.Name], owner[t.Name] = t, f
		}
	}
	w, err := mapWeights(cfg, tensors, owner)
	if err != nil {
		return nil, err
	}
	var tok *tokenizer.Tokenizer
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		if tok, err = tokenizer.Load(filepath.Join(dir, "tokenizer.json")); err != nil {
			return nil, fmt.Errorf("load model: %w", err)
		}
	}
	m, err := NewModel(name, cfg, w, nil)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	if tok != nil {
		m.Tok = tok
	}
	m.ChatTemplate = readChatTemplate(dir)
	return m, nil
}

func weightFiles(dir string) ([]string, error) {
	idx := filepath.Join(dir, "model.safetensors.index.json")
	if b, err := os.ReadFile(idx); err == nil {
		var ix struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &ix); err != nil {
			return nil, fmt.Errorf("load model: %s: %w", idx, err)
		}
		set := map[string]bool{}
		for _, f := range ix.WeightMap {
			if filepath.Base(f) != f {
				return nil, fmt.Errorf("load model: %s: shard name %q must be a plain file name", idx, f)
			}
			set[f] = true
		}
		var out []string
		for f := range set {
			out = append(out, filepath.Join(dir, f))
		}
		sort.Strings(out)
		if len(out) == 0 {
			return nil, fmt.Errorf("load model: %s lists no shards", idx)
		}
		return out, nil
	}
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(single); err != nil {
		return nil, fmt.Errorf("load model: no model.safetensors or model.safetensors.index.json in %s", dir)
	}
	return []string{single}, nil
}

// mapWeights converts HF tensors into Weights, one tensor at a time.
func mapWeights(c Config, ts map[string]safetensors.Tensor, owner map[string]string) (*Weights[float32], error) {
	used := map[string]bool{}
	get := func(name string, shape ...int) ([]float32, error) {
		t, ok := ts[name]
		if !ok {
			return nil, fmt.Errorf("load model: tensor %s is missing", name)
		}
		used[name] = true
		if !sameShape(t.Shape, shape) {
			return nil, fmt.Errorf("load model: %s: tensor %s has shape %v, config.json implies %v", owner[name], name, t.Shape, shape)
		}
		v, err := t.Float32()
		if err != nil {
			return nil, fmt.Errorf("load model: %s: %w", owner[name], err)
		}
		return v, nil
	}
	D, I, V := c.Hidden, c.Intermediate, c.VocabSize
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	w := &Weights[float32]{Layers: make([]Layer[float32], c.Layers)}
	var errs []error
	must := func(dst *[]float32, name string, shape ...int) {
		v, err := get(name, shape...)
		if err != nil {
			errs = append(errs, err)
		}
		*dst = v
	}
	must(&w.Embed, "model.embed_tokens.weight", V, D)
	must(&w.FinalNorm, "model.norm.weight", D)
	if _, ok := ts["lm_head.weight"]; ok && !c.TieEmbeddings {
		must(&w.LMHead, "lm_head.weight", V, D)
	} else if !c.TieEmbeddings {
		errs = append(errs, fmt.Errorf("load model: tensor lm_head.weight is missing and tie_word_embeddings is false"))
	} else {
		w.LMHead = w.Embed
		used["lm_head.weight"] = true
	}
	for i := range w.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		L := &w.Layers[i]
		must(&L.AttnNorm, p+"input_layernorm.weight", D)
		must(&L.Wq, p+"self_attn.q_proj.weight", q, D)
		must(&L.Wk, p+"self_attn.k_proj.weight", kv, D)
		must(&L.Wv, p+"self_attn.v_proj.weight", kv, D)
		must(&L.Wo, p+"self_attn.o_proj.weight", D, q)
		if c.AttnBias {
			must(&L.Bq, p+"self_attn.q_proj.bias", q)
			must(&L.Bk, p+"self_attn.k_proj.bias", kv)
			must(&L.Bv, p+"self_attn.v_proj.bias", kv)
		}
		must(&L.MLPNorm, p+"post_attention_layernorm.weight", D)
		must(&L.Wgate, p+"mlp.gate_proj.weight", I, D)
		must(&L.Wup, p+"mlp.up_proj.weight", I, D)
		must(&L.Wdown, p+"mlp.down_proj.weight", D, I)
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for name := range ts {
		if !used[name] && !isIgnorable(name) {
			return nil, fmt.Errorf("load model: %s: unexpected tensor %s (not part of a %s model with this config)", owner[name], name, c.Arch)
		}
	}
	return w, nil
}

// isIgnorable accepts buffers some checkpoints carry that the model recomputes.
func isIgnorable(name string) bool {
	return filepath.Ext(name) == ".inv_freq" || name == "lm_head.weight"
}

func readChatTemplate(dir string) string {
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		return string(b)
	}
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return ""
	}
	var tc struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if json.Unmarshal(b, &tc) != nil || len(tc.ChatTemplate) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(tc.ChatTemplate, &s) == nil {
		return s
	}
	var list []struct{ Name, Template string }
	if json.Unmarshal(tc.ChatTemplate, &list) == nil {
		for _, t := range list {
			if t.Name == "default" {
				return t.Template
			}
		}
		if len(list) > 0 {
			return list[0].Template
		}
	}
	return ""
}
