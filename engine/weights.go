package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
	"github.com/tuft-go/tuft/engine/tokenizer"
)

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

// devLayer is a Layer's weights on a device.
type devLayer[T kern.Float] struct {
	AttnNorm, Wq, Wk, Wv, Wo, Bq, Bk, Bv, MLPNorm, Wgate, Wup, Wdown device.Tensor[T]
}

// devWeights are a model's frozen weights on a device: views of Weights on the CPU
// (matrices possibly stored in a narrower format: device.CPU's weight format), copies
// elsewhere (matrices possibly narrowed to bfloat16); norms and biases at full precision.
type devWeights[T kern.Float] struct {
	Embed     device.Tensor[T]
	Layers    []devLayer[T]
	FinalNorm device.Tensor[T]
	LMHead    device.Tensor[T]
}

// place puts host data on d at full precision (a view on a host device).
func place[T kern.Float](d device.Device[T], src []T) device.Tensor[T] {
	if src == nil {
		return device.Tensor[T]{}
	}
	if d.HostMemory() {
		return device.Host(src)
	}
	t := d.Alloc(len(src))
	d.Upload(t, src)
	return t
}

// placeMatrix puts the frozen [rows×cols] matrix src on d: in d's own format where it
// has one (device.MatrixPlacer), else through Weight.
func placeMatrix[T kern.Float](d device.Device[T], native map[*T]*kern.Frozen, src []T, rows, cols int) device.Tensor[T] {
	if len(src) > 0 && d.HostMemory() {
		if fz := native[&src[0]]; fz != nil && fz.Rows == rows && fz.Cols == cols {
			return device.FrozenMatrix[T](fz)
		}
	}
	if mp, ok := d.(device.MatrixPlacer[T]); ok {
		return mp.WeightMatrix(src, rows, cols)
	}
	return d.Weight(src)
}

// placeEmbed is placeMatrix for the embedding table and the LM head, the matrices a
// model is most sensitive to: on a CPU in q4_k they take q6_k, or q8_0 where rows are
// not whole 256-blocks, as llama.cpp's Q4_K_M gives its output matrix (kern.NewFrozen
// makes that fallback).
func placeEmbed[T kern.Float](d device.Device[T], native map[*T]*kern.Frozen, src []T, rows, cols int) device.Tensor[T] {
	return placeMore(d, native, src, rows, cols, true)
}

// placeMore is placeMatrix for a matrix that llama.cpp's Q4_K_M gives more bits when
// more is set (q4kMoreBits): on a CPU in q4_k it takes q6_k (q8_0 where rows are not
// whole 256-blocks) instead of q4_k, unless native holds the file's own blocks for it.
func placeMore[T kern.Float](d device.Device[T], native map[*T]*kern.Frozen, src []T, rows, cols int, more bool) device.Tensor[T] {
	if more && cpuInQ4K(d) && len(src) > 0 && native[&src[0]] == nil {
		return device.FrozenMatrix[T](kern.NewFrozen(any(src).([]float32), rows, cols, kern.Q6_K))
	}
	return placeMatrix(d, native, src, rows, cols)
}

// cpuInQ4K reports whether d is a CPU holding weights in q4_k, which mixes formats per
// matrix as llama.cpp's Q4_K_M does (placeMore).
func cpuInQ4K[T kern.Float](d device.Device[T]) bool {
	c, ok := any(d).(*device.CPU[float32])
	return ok && c.WeightFormat() == kern.Q4_K
}

// q4kMoreBits is llama.cpp's use_more_bits(i, n): whether layer i of n is one whose
// attn_v and ffn_down Q4_K_M stores in Q6_K rather than Q4_K (the first and last eighth
// of the layers, and every third one between).
func q4kMoreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// narrowed reports whether d keeps every matrix of dw in its own storage (a CPU weight
// format other than f32), so that the host float32 matrices are not needed once placed.
func (dw *devWeights[T]) narrowed() bool {
	ts := []device.Tensor[T]{dw.Embed, dw.LMHead}
	for _, l := range dw.Layers {
		ts = append(ts, l.Wq, l.Wk, l.Wv, l.Wo, l.Wgate, l.Wup, l.Wdown)
	}
	for _, t := range ts {
		if !ownCopy(t) {
			return false
		}
	}
	return true
}

// ownCopy reports whether t holds a matrix in storage of its own, so that the host
// float32 matrix it was placed from is not needed: a frozen matrix in a narrower format.
// An f32 Frozen aliases the host matrix, which stays the model's (Model.W: export reads
// it).
func ownCopy[T kern.Float](t device.Tensor[T]) bool {
	return t.Frozen() != nil && t.Frozen().Format != kern.F32
}

// upload places w, of shape c, on d; a matrix native holds (keyed by its first element)
// is placed as that frozen matrix instead.
func uploadWeights[T kern.Float](d device.Device[T], c Config, w *Weights[T], native map[*T]*kern.Frozen) (*devWeights[T], error) {
	D, I, V := c.Hidden, c.Intermediate, c.VocabSize
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	dw := &devWeights[T]{Embed: placeEmbed(d, native, w.Embed, V, D), FinalNorm: place(d, w.FinalNorm), Layers: make([]devLayer[T], len(w.Layers))}
	dw.LMHead = dw.Embed
	if len(w.LMHead) > 0 && len(w.Embed) > 0 && &w.LMHead[0] != &w.Embed[0] {
		dw.LMHead = placeEmbed(d, native, w.LMHead, V, D)
	}
	for i := range w.Layers {
		l := &w.Layers[i]
		more := q4kMoreBits(i, len(w.Layers))
		dw.Layers[i] = devLayer[T]{AttnNorm: place(d, l.AttnNorm), MLPNorm: place(d, l.MLPNorm),
			Wq: placeMatrix(d, native, l.Wq, q, D), Wk: placeMatrix(d, native, l.Wk, kv, D), Wv: placeMore(d, native, l.Wv, kv, D, more), Wo: placeMatrix(d, native, l.Wo, D, q),
			Bq: place(d, l.Bq), Bk: place(d, l.Bk), Bv: place(d, l.Bv),
			Wgate: placeMatrix(d, native, l.Wgate, I, D), Wup: placeMatrix(d, native, l.Wup, I, D), Wdown: placeMore(d, native, l.Wdown, D, I, more)}
	}
	if err := d.Err(); err != nil {
		return nil, fmt.Errorf("place weights on %s: %w", d.Name(), err)
	}
	return dw, nil
}

// Load reads a model directory in HuggingFace layout: config.json, model.safetensors (or
// shards listed in model.safetensors.index.json) in F32, BF16 or F16, tokenizer.json, and
// the chat template from tokenizer_config.json (or chat_template.jinja); or, for a path
// ending in .gguf, a GGUF file (LoadGGUF). name is what clients call the model; opts
// choose the device (the CPU by default).
func Load(dir, name string, opts ...Option) (*Model, error) {
	if IsGGUF(dir) {
		return LoadGGUF(dir, name, opts...)
	}
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
	var tok *tokenizer.Tokenizer
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		if tok, err = tokenizer.Load(filepath.Join(dir, "tokenizer.json")); err != nil {
			return nil, fmt.Errorf("load model: %w", err)
		}
	}
	m, err := loadFiles(name, cfg, files, opts...) // loadstream.go
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	if tok != nil {
		m.Tok = tok
	}
	m.ChatTemplate = readChatTemplate(dir)
	m.Dir = dir
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
