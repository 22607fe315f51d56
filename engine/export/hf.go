package export

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/safetensors"
)

// tokenizerFiles are the files of a Hugging Face model directory that describe its
// tokenizer and chat template; a merged export copies those the base has.
var tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
	"vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json"}

// writeHF writes the merged model into dir in Hugging Face layout: config.json and
// generation_config.json from the engine's configuration, model.safetensors in
// bfloat16, and the base's tokenizer files (tokJSON, and a tokenizer_config.json holding
// the chat template, for a base that has none on disk). It returns the names written.
func writeHF(g merger, baseDir string, tokJSON []byte, dir string) ([]string, error) {
	c := g.m.Cfg
	_, untied := g.lmHead()
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
	var ts []lazyTensor
	bf := func(name string, shape []int, v func() []float32) {
		ts = append(ts, lazyTensor{name: name, shape: shape, data: v})
	}
	val := func(v []float32) func() []float32 { return func() []float32 { return v } }
	D := c.Hidden
	bf("model.embed_tokens.weight", []int{c.VocabSize, D}, val(g.m.W.Embed))
	if untied {
		bf("lm_head.weight", []int{c.VocabSize, D}, func() []float32 { v, _ := g.lmHead(); return v })
	}
	bf("model.norm.weight", []int{D}, val(g.m.W.FinalNorm))
	for l := range g.m.W.Layers {
		L := &g.m.W.Layers[l]
		p := fmt.Sprintf("model.layers.%d.", l)
		bf(p+"input_layernorm.weight", []int{D}, val(L.AttnNorm))
		bf(p+"post_attention_layernorm.weight", []int{D}, val(L.MLPNorm))
		for pr := engine.Proj(0); pr < engine.NumLayerProj; pr++ {
			out, in := projDims(c, pr)
			mod := "self_attn."
			if pr >= engine.ProjGate {
				mod = "mlp."
			}
			bf(p+mod+pr.ModuleName()+".weight", []int{out, in}, func() []float32 { v, _, _ := g.proj(l, pr); return v })
		}
		if c.AttnBias {
			bf(p+"self_attn.q_proj.bias", []int{len(L.Bq)}, val(L.Bq))
			bf(p+"self_attn.k_proj.bias", []int{len(L.Bk)}, val(L.Bk))
			bf(p+"self_attn.v_proj.bias", []int{len(L.Bv)}, val(L.Bv))
		}
	}
	if err := writeBF16Safetensors(filepath.Join(dir, HFWeightsName), ts, map[string]string{"format": "pt"}); err != nil {
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
	if !slices.Contains(names, "tokenizer.json") && len(tokJSON) > 0 {
		if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tokJSON, 0o644); err != nil {
			return nil, fmt.Errorf("export hf: %w", err)
		}
		names = append(names, "tokenizer.json")
		if !slices.Contains(names, "tokenizer_config.json") && g.m.ChatTemplate != "" {
			tc := map[string]any{"chat_template": g.m.ChatTemplate, "tokenizer_class": "PreTrainedTokenizerFast"}
			if err := writeJSON(filepath.Join(dir, "tokenizer_config.json"), tc); err != nil {
				return nil, err
			}
			names = append(names, "tokenizer_config.json")
		}
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

// lazyTensor is a tensor of the merged model, computed when it is written.
type lazyTensor struct {
	name  string
	shape []int
	data  func() []float32
}

// writeBF16Safetensors writes tensors as a bfloat16 safetensors file (the layout
// engine/safetensors writes: tensors in name order, the header padded to 8 bytes),
// computing one tensor at a time so that a merged export never holds the whole model
// twice. It writes through a temporary file renamed into place.
func writeBF16Safetensors(path string, ts []lazyTensor, meta map[string]string) error {
	sort.Slice(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
	hdr := map[string]any{"__metadata__": meta}
	var off int64
	for _, t := range ts {
		n := int64(2)
		for _, d := range t.shape {
			n *= int64(d)
		}
		hdr[t.name] = map[string]any{"dtype": "BF16", "shape": t.shape, "data_offsets": [2]int64{off, off + n}}
		off += n
	}
	hb, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	hb = append(hb, bytes.Repeat([]byte(" "), (8-len(hb)%8)%8)...)
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	bw := bufio.NewWriterSize(f, 1<<20)
	werr := binary.Write(bw, binary.LittleEndian, uint64(len(hb)))
	if werr == nil {
		_, werr = bw.Write(hb)
	}
	for _, t := range ts {
		if werr != nil {
			break
		}
		v := t.data()
		buf := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(buf[2*i:], safetensors.BF16FromFloat32(x))
		}
		_, werr = bw.Write(buf)
	}
	if werr == nil {
		werr = bw.Flush()
	}
	if werr == nil {
		werr = f.Chmod(0o644)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return werr
	}
	return os.Rename(f.Name(), path)
}
