package engine

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tuft-go/tuft/engine/gguf"
	"github.com/tuft-go/tuft/engine/kern"
	"github.com/tuft-go/tuft/engine/tokenizer"
)

// IsGGUF reports whether a model path names a GGUF file (by its extension) rather than a
// HuggingFace-layout directory.
func IsGGUF(path string) bool { return strings.EqualFold(filepath.Ext(path), ".gguf") }

// GGUFModel is a GGUF file converted to the engine's terms: the architecture, float32
// weights in HuggingFace's layout (llama.cpp's rotary row order undone), the tokenizer as
// a tokenizer.json document, and the chat template and special tokens from the metadata.
type GGUFModel struct {
	Cfg           Config
	W             *Weights[float32]
	TokenizerJSON []byte
	ChatTemplate  string
	// BOS, EOS and Pad are the special tokens' strings ("" when the file names none).
	BOS, EOS, Pad string
	AddBOS        bool // tokenizer.ggml.add_bos_token
	// native are the file's blocks a CPU in q4_k keeps as they are (ggufnative.go).
	native map[*float32]*kern.Frozen
}

// LoadGGUF loads a model from a GGUF file (llama or qwen2 architecture): weights
// dequantised to float32, the tokenizer, special tokens, chat template, and the rope and
// norm parameters from its metadata. A file that is malformed, truncated or of another
// architecture is an error naming the key or tensor; nothing is kept on error. On a CPU
// holding weights in q4_k the file's Q4_K, Q6_K, Q5_0, Q8_0 and Q4_1 matrices keep their
// blocks (ggufnative.go).
func LoadGGUF(path, name string, opts ...Option) (*Model, error) {
	o := options{}
	for _, f := range opts {
		f(&o)
	}
	g, err := readGGUF(path, o.dev != nil && keepsGGUFBlocks(o.dev))
	if err != nil {
		return nil, err
	}
	if g.native != nil {
		opts = append(opts, withNative(g.native))
	}
	tok, err := tokenizer.Parse(g.TokenizerJSON)
	if err != nil {
		return nil, fmt.Errorf("load model %s: tokenizer from the GGUF metadata: %w", path, err)
	}
	m, err := NewModel(name, g.Cfg, g.W, tok, opts...)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", path, err)
	}
	m.ChatTemplate = g.ChatTemplate
	m.TokenizerJSON = g.TokenizerJSON
	m.Dir = path
	return m, nil
}

// ReadGGUF reads and converts a GGUF file without placing it on a device (`tuft model
// import` writes the result as a HuggingFace directory).
func ReadGGUF(path string) (*GGUFModel, error) { return readGGUF(path, false) }

// readGGUF is ReadGGUF, also keeping the file's blocks (GGUFModel.native) when native.
func readGGUF(path string, native bool) (*GGUFModel, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	defer f.Close()
	out, err := convertGGUF(f)
	if err == nil && native {
		out.native, err = ggufNative(f, out.Cfg, out.W)
	}
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", path, err)
	}
	return out, nil
}

func convertGGUF(f *gguf.File) (*GGUFModel, error) {
	cfg, err := ggufConfig(f)
	if err != nil {
		return nil, err
	}
	tj, sp, err := ggufTokenizer(f, cfg.Arch)
	if err != nil {
		return nil, err
	}
	if sp.vocab != cfg.VocabSize {
		return nil, fmt.Errorf("gguf: tokenizer.ggml.tokens has %d entries, token_embd.weight %d rows", sp.vocab, cfg.VocabSize)
	}
	cfg.BOSTokenID, cfg.EOSTokenIDs = sp.bosID, sp.eosIDs
	w, err := ggufWeights(f, cfg)
	if err != nil {
		return nil, err
	}
	g := &GGUFModel{Cfg: cfg, W: w, TokenizerJSON: tj, BOS: sp.bos, EOS: sp.eos, Pad: sp.pad, AddBOS: sp.addBOS}
	if tpl, err := f.String("tokenizer.chat_template"); err == nil {
		g.ChatTemplate = tpl
	} else if !errors.Is(err, gguf.ErrMissing) {
		return nil, err
	}
	return g, nil
}

// f32Decimal gives a float32 metadata value back the short decimal it was written from
// (1e-05, not 9.999999747378752e-06), as HuggingFace's config.json has it.
func f32Decimal(v float64) float64 {
	d, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', -1, 32), 64)
	if err != nil {
		return v
	}
	return d
}

// ggufConfig reads the architecture from the metadata, keyed by general.architecture.
func ggufConfig(f *gguf.File) (Config, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return Config{}, err
	}
	if arch != "llama" && arch != "qwen2" {
		return Config{}, fmt.Errorf("gguf: general.architecture %q is not supported (llama or qwen2)", arch)
	}
	var errs []error
	num := func(key string, def int) int {
		v, err := f.Uint(arch + "." + key)
		if errors.Is(err, gguf.ErrMissing) && def >= 0 {
			return def
		}
		if err != nil {
			errs = append(errs, err)
			return 0
		}
		if v > math.MaxInt32 {
			errs = append(errs, fmt.Errorf("gguf: metadata key %q is %d, too large", arch+"."+key, v))
			return 0
		}
		return int(v)
	}
	flt := func(key string, def float64) float64 {
		v, err := f.Float(arch + "." + key)
		if errors.Is(err, gguf.ErrMissing) && def >= 0 {
			return def
		}
		if err != nil {
			errs = append(errs, err)
			return 0
		}
		return f32Decimal(v)
	}
	c := Config{Arch: arch, BOSTokenID: -1}
	c.Hidden = num("embedding_length", -1)
	c.Intermediate = num("feed_forward_length", -1)
	c.Layers = num("block_count", -1)
	c.Heads = num("attention.head_count", -1)
	c.KVHeads = num("attention.head_count_kv", c.Heads)
	c.MaxPositions = num("context_length", -1)
	c.RopeTheta = flt("rope.freq_base", 10000)
	c.RMSNormEps = flt("attention.layer_norm_rms_epsilon", -1)
	if c.Heads > 0 {
		c.HeadDim = num("attention.key_length", c.Hidden/c.Heads)
		if v := num("attention.value_length", c.HeadDim); v != c.HeadDim {
			errs = append(errs, fmt.Errorf("gguf: %s.attention.value_length %d differs from key_length %d (not supported)", arch, v, c.HeadDim))
		}
		if rd := num("rope.dimension_count", c.HeadDim); rd != c.HeadDim {
			errs = append(errs, fmt.Errorf("gguf: %s.rope.dimension_count %d is not the head size %d (partial rotary is not supported)", arch, rd, c.HeadDim))
		}
	}
	if kv, ok := f.Lookup(arch + ".rope.scaling.type"); ok {
		if s, _ := kv.Value.(string); s != "none" && s != "" {
			errs = append(errs, fmt.Errorf("gguf: %s.rope.scaling.type %q is not supported (none)", arch, s))
		}
	}
	if _, ok := f.Tensor("rope_freqs.weight"); ok {
		errs = append(errs, fmt.Errorf("gguf: tensor rope_freqs.weight (per-frequency rope factors, as Llama 3.1 files carry) is not supported"))
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	// Every layer has at least 9 tensors: a block_count the file cannot back is refused
	// before anything is sized by it.
	if c.Layers*9 > len(f.Tensors) {
		return Config{}, fmt.Errorf("gguf: %s.block_count %d needs at least %d tensors, the file has %d", arch, c.Layers, c.Layers*9, len(f.Tensors))
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok {
		return Config{}, fmt.Errorf("gguf: tensor token_embd.weight is missing")
	}
	if len(emb.Dims) != 2 || emb.Dims[0] != uint64(c.Hidden) {
		return Config{}, fmt.Errorf("gguf: tensor token_embd.weight has dims %v, want [%d, vocab]", emb.Dims, c.Hidden)
	}
	c.VocabSize = int(emb.Dims[1])
	if v := num("vocab_size", c.VocabSize); v != c.VocabSize {
		return Config{}, fmt.Errorf("gguf: %s.vocab_size %d differs from token_embd.weight's %d rows", arch, v, c.VocabSize)
	}
	_, hasOut := f.Tensor("output.weight")
	c.TieEmbeddings = !hasOut
	_, c.AttnBias = f.Tensor("blk.0.attn_q.bias")
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("gguf: %w", err)
	}
	return c, nil
}

// ggufWeights reads every tensor into Weights, HF names and shapes, undoing llama.cpp's
// rotary permutation of q/k rows for the llama architecture. Every tensor of the file
// must be used.
func ggufWeights(f *gguf.File, c Config) (*Weights[float32], error) {
	used := map[string]bool{}
	get := func(name string, shape ...int) ([]float32, error) {
		ti, ok := f.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("gguf: tensor %s is missing", name)
		}
		used[name] = true
		if !sameShape(ti.Shape(), shape) {
			return nil, fmt.Errorf("gguf: tensor %s has shape %v, the metadata implies %v", name, ti.Shape(), shape)
		}
		return f.Float32(ti)
	}
	D, I, V := c.Hidden, c.Intermediate, c.VocabSize
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	w := &Weights[float32]{Layers: make([]Layer[float32], c.Layers)}
	var err error
	must := func(dst *[]float32, name string, shape ...int) {
		if err == nil {
			*dst, err = get(name, shape...)
		}
	}
	must(&w.Embed, "token_embd.weight", V, D)
	must(&w.FinalNorm, "output_norm.weight", D)
	if c.TieEmbeddings {
		w.LMHead = w.Embed
	} else {
		must(&w.LMHead, "output.weight", V, D)
	}
	for i := range w.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		L := &w.Layers[i]
		must(&L.AttnNorm, p+"attn_norm.weight", D)
		must(&L.Wq, p+"attn_q.weight", q, D)
		must(&L.Wk, p+"attn_k.weight", kv, D)
		must(&L.Wv, p+"attn_v.weight", kv, D)
		must(&L.Wo, p+"attn_output.weight", D, q)
		if c.AttnBias {
			must(&L.Bq, p+"attn_q.bias", q)
			must(&L.Bk, p+"attn_k.bias", kv)
			must(&L.Bv, p+"attn_v.bias", kv)
		}
		must(&L.MLPNorm, p+"ffn_norm.weight", D)
		must(&L.Wgate, p+"ffn_gate.weight", I, D)
		must(&L.Wup, p+"ffn_up.weight", I, D)
		must(&L.Wdown, p+"ffn_down.weight", D, I)
		if err != nil {
			return nil, err
		}
		if c.Arch == "llama" {
			// llama.cpp's converter interleaves each head's two rotary halves (its
			// kernel rotates adjacent pairs); HF's rotate_half wants them split.
			L.Wq = unpermuteRotary(L.Wq, c.Heads, c.HeadDim, D)
			L.Wk = unpermuteRotary(L.Wk, c.KVHeads, c.HeadDim, D)
			if L.Bq != nil {
				L.Bq = unpermuteRotary(L.Bq, c.Heads, c.HeadDim, 1)
				L.Bk = unpermuteRotary(L.Bk, c.KVHeads, c.HeadDim, 1)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	for _, t := range f.Tensors {
		if !used[t.Name] {
			return nil, fmt.Errorf("gguf: unexpected tensor %s (not part of a %s model with this metadata)", t.Name, c.Arch)
		}
	}
	return w, nil
}

// unpermuteRotary reorders the rows of a [heads·hd, cols] matrix from llama.cpp's
// layout, where row 2j+s of a head holds HF's row s·hd/2+j, back to HF's: rows of values,
// or rows of a block format's bytes (cols: the bytes of a row).
func unpermuteRotary[E any](w []E, heads, hd, cols int) []E {
	out := make([]E, len(w))
	half := hd / 2
	for h := 0; h < heads; h++ {
		for j := 0; j < half; j++ {
			for s := 0; s < 2; s++ {
				src := (h*hd + 2*j + s) * cols
				dst := (h*hd + s*half + j) * cols
				copy(out[dst:dst+cols], w[src:src+cols])
			}
		}
	}
	return out
}
