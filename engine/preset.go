package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"

	"github.com/tuft-go/tuft/engine/safetensors"
	"github.com/tuft-go/tuft/engine/tokenizer"
)

// preset is a built-in model: an architecture with deterministic random weights and a
// byte-level BPE tokenizer learned from a small embedded corpus.
type preset struct {
	arch                      string
	hidden, inter, layers     int
	heads, kv, headDim, vocab int
	theta, eps                float64
	tied, bias                bool
	maxPos, merges            int
	bf16                      bool
	// legacy: seed 0 draws the weights from one sequential stream (Box–Muller over
	// math/rand's PCG) as the first presets did, because the PyTorch reference fixtures
	// (engine/testdata/torchref) were computed from those bytes. Only for small presets.
	legacy bool
}

var presets = map[string]preset{
	"tiny": {arch: "llama", hidden: 256, inter: 768, layers: 4, heads: 4, kv: 2, headDim: 64, vocab: 512,
		theta: 10000, eps: 1e-5, tied: true, maxPos: 2048, merges: 253, legacy: true},
	"smollm2-135m-shape": {arch: "llama", hidden: 576, inter: 1536, layers: 30, heads: 9, kv: 3, headDim: 64, vocab: 49152,
		theta: 100000, eps: 1e-5, tied: true, maxPos: 8192, merges: 2000, bf16: true},
	"qwen2.5-0.5b-shape": {arch: "qwen2", hidden: 896, inter: 4864, layers: 24, heads: 14, kv: 2, headDim: 64, vocab: 151936,
		theta: 1e6, eps: 1e-6, tied: true, bias: true, maxPos: 32768, merges: 2000, bf16: true},
	// Llama-2-7B's shape (6.7B parameters, 13.5 GB in bfloat16), for GPU benchmarks; 8192
	// positions (Llama 2 has 4096), since issue 25 measures steps of 8192 tokens.
	"llama2-7b-shape": {arch: "llama", hidden: 4096, inter: 11008, layers: 32, heads: 32, kv: 32, headDim: 128, vocab: 32000,
		theta: 10000, eps: 1e-5, maxPos: 8192, merges: 2000, bf16: true},
}

// Presets lists the built-in model presets.
func Presets() []string {
	out := make([]string, 0, len(presets))
	for n := range presets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

const presetCorpus = `The quick brown fox jumps over the lazy dog. A model learns from the data it is given, one token at a time.
Training a language model means predicting the next token: the loss goes down as the predictions improve.
Low-rank adapters add a small update to each weight matrix, so many users can share one frozen base model.
In reinforcement learning, the model samples answers, a reward scores them, and the policy moves toward the better ones.
Hello, world! How are you today? I'm fine, thanks. We're going to the market; they'll be there at 10:30.
Numbers like 1, 2, 3, 42, 100 and 2026 appear in text, as do dates, prices ($9.99) and percentages (50%).
def add(a, b):
    return a + b
for i in range(10):
    print(i * i)
<|im_start|>user
What is the capital of France?<|im_end|>
<|im_start|>assistant
The capital of France is Paris.<|im_end|>
Observability means traces, metrics and logs: every request leaves a trail that an operator can follow.
The server keeps every record on disk, so nothing is lost when a process dies and starts again.
`

const chatMLTemplate = `{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

// WritePreset writes the named preset into dir in HuggingFace layout with seed 0 (see
// WritePresetSeed).
func WritePreset(name, dir string) error { return WritePresetSeed(name, dir, 0) }

// WritePresetSeed writes the named preset into dir in HuggingFace layout. The output is
// deterministic: the same seed gives the same bytes, whatever the number of cores. The
// weights are streamed to model.safetensors in their stored dtype (presetwrite.go).
func WritePresetSeed(name, dir string, seed uint64) error {
	p, ok := presets[name]
	if !ok {
		return fmt.Errorf("unknown preset %q (available: %v)", name, Presets())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tj, special, err := tokenizer.Train(tokenizer.TrainSpec{Corpus: presetCorpus, Merges: p.merges, VocabSize: p.vocab,
		Special: []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}})
	if err != nil {
		return fmt.Errorf("preset %s: %w", name, err)
	}
	eos := special["<|endoftext|>"]
	imEnd := special["<|im_end|>"]
	cfg := map[string]any{
		"architectures":           []string{map[string]string{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[p.arch]},
		"model_type":              p.arch,
		"vocab_size":              p.vocab,
		"hidden_size":             p.hidden,
		"intermediate_size":       p.inter,
		"num_hidden_layers":       p.layers,
		"num_attention_heads":     p.heads,
		"num_key_value_heads":     p.kv,
		"head_dim":                p.headDim,
		"rope_theta":              p.theta,
		"rms_norm_eps":            p.eps,
		"tie_word_embeddings":     p.tied,
		"max_position_embeddings": p.maxPos,
		"hidden_act":              "silu",
		"bos_token_id":            eos,
		"eos_token_id":            eos,
		"torch_dtype":             map[bool]string{true: "bfloat16", false: "float32"}[p.bf16],
	}
	if p.arch == "llama" {
		cfg["attention_bias"] = p.bias
	}
	files := map[string]any{
		"config.json":            cfg,
		"generation_config.json": map[string]any{"bos_token_id": eos, "eos_token_id": []int32{eos, imEnd}},
		"tokenizer_config.json": map[string]any{"chat_template": chatMLTemplate, "bos_token": nil, "eos_token": "<|im_end|>",
			"pad_token": "<|endoftext|>", "model_max_length": p.maxPos, "tokenizer_class": "PreTrainedTokenizerFast"},
	}
	for fn, v := range files {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, fn), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644); err != nil {
		return err
	}
	path := filepath.Join(dir, "model.safetensors")
	if p.legacy && seed == 0 {
		return writeLegacyWeights(p, name, path)
	}
	return writePresetStreamed(p, name, path, seed)
}

// writeLegacyWeights draws every value from one sequential stream, holding the model in
// memory (see preset.legacy).
func writeLegacyWeights(p preset, name string, path string) error {
	rng := rand.New(rand.NewPCG(0x7475667400, uint64(len(name))))
	normal := func(n int, std float64) []float32 {
		out := make([]float32, n)
		for i := 0; i < n; i += 2 {
			// Box–Muller: two normals from two uniforms.
			u1, u2 := rng.Float64(), rng.Float64()
			r := math.Sqrt(-2*math.Log(1-u1)) * std
			out[i] = float32(r * math.Cos(2*math.Pi*u2))
			if i+1 < n {
				out[i+1] = float32(r * math.Sin(2*math.Pi*u2))
			}
		}
		return out
	}
	ones := func(n int) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = 1
		}
		return out
	}
	mk := safetensors.FromFloat32
	if p.bf16 {
		mk = safetensors.FromFloat32AsBF16
	}
	D, I, V := p.hidden, p.inter, p.vocab
	q, kv := p.heads*p.headDim, p.kv*p.headDim
	std := 0.02
	out := std / math.Sqrt(2*float64(p.layers)) // GPT-2's scaled init of residual outputs
	ts := []safetensors.Tensor{
		mk("model.embed_tokens.weight", []int{V, D}, normal(V*D, std)),
		mk("model.norm.weight", []int{D}, ones(D)),
	}
	if !p.tied {
		ts = append(ts, mk("lm_head.weight", []int{V, D}, normal(V*D, std)))
	}
	for l := 0; l < p.layers; l++ {
		pre := fmt.Sprintf("model.layers.%d.", l)
		ts = append(ts,
			mk(pre+"input_layernorm.weight", []int{D}, ones(D)),
			mk(pre+"self_attn.q_proj.weight", []int{q, D}, normal(q*D, std)),
			mk(pre+"self_attn.k_proj.weight", []int{kv, D}, normal(kv*D, std)),
			mk(pre+"self_attn.v_proj.weight", []int{kv, D}, normal(kv*D, std)),
			mk(pre+"self_attn.o_proj.weight", []int{D, q}, normal(D*q, out)),
			mk(pre+"post_attention_layernorm.weight", []int{D}, ones(D)),
			mk(pre+"mlp.gate_proj.weight", []int{I, D}, normal(I*D, std)),
			mk(pre+"mlp.up_proj.weight", []int{I, D}, normal(I*D, std)),
			mk(pre+"mlp.down_proj.weight", []int{D, I}, normal(D*I, out)),
		)
		if p.bias {
			ts = append(ts,
				mk(pre+"self_attn.q_proj.bias", []int{q}, normal(q, std)),
				mk(pre+"self_attn.k_proj.bias", []int{kv}, normal(kv, std)),
				mk(pre+"self_attn.v_proj.bias", []int{kv}, normal(kv, std)))
		}
	}
	return safetensors.WriteFile(path, ts, map[string]string{"format": "pt", "preset": name})
}
