package export

import (
	"fmt"
	"math"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/gguf"
)

// ggufNames are llama.cpp's tensor names of a layer's projections.
var ggufNames = [engine.NumLayerProj]string{"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}

// permuteRows reorders the rows of a q or k projection (or its bias, or a LoRA B) from
// Hugging Face's rotary layout (each head's first half of dimensions rotates with its
// second half) to llama.cpp's for the llama architecture (adjacent pairs rotate): row
// h·hd + j·hd/2 + i moves to h·hd + 2i + j. cols is the row length (1 for a bias).
func permuteRows(w []float32, heads, cols int) []float32 {
	rows := len(w) / cols
	hd := rows / heads
	out := make([]float32, len(w))
	for h := range heads {
		for j := range 2 {
			for i := range hd / 2 {
				src, dst := h*hd+j*hd/2+i, h*hd+2*i+j
				copy(out[dst*cols:(dst+1)*cols], w[src*cols:(src+1)*cols])
			}
		}
	}
	return out
}

// rotary reports the heads whose rows projection p's output must be permuted for (0: none).
func rotary(c engine.Config, p engine.Proj) int {
	if c.Arch != "llama" {
		return 0 // qwen2 runs NeoX-style rotary in llama.cpp: Hugging Face's layout as it is
	}
	switch p {
	case engine.ProjQ:
		return c.Heads
	case engine.ProjK:
		return c.KVHeads
	}
	return 0
}

// setArch writes the general.* and <arch>.* hyper-parameters of c.
func setArch(w *gguf.Writer, c engine.Config, name, typ string) error {
	a := c.Arch
	kv := []struct {
		k string
		v any
	}{
		{"general.architecture", a}, {"general.type", typ}, {"general.name", name},
		{a + ".vocab_size", uint32(c.VocabSize)}, {a + ".context_length", uint32(c.MaxPositions)},
		{a + ".embedding_length", uint32(c.Hidden)}, {a + ".block_count", uint32(c.Layers)},
		{a + ".feed_forward_length", uint32(c.Intermediate)}, {a + ".attention.head_count", uint32(c.Heads)},
		{a + ".attention.head_count_kv", uint32(c.KVHeads)}, {a + ".attention.key_length", uint32(c.HeadDim)},
		{a + ".attention.value_length", uint32(c.HeadDim)}, {a + ".rope.dimension_count", uint32(c.HeadDim)},
		{a + ".rope.freq_base", float32(c.RopeTheta)}, {a + ".attention.layer_norm_rms_epsilon", float32(c.RMSNormEps)},
	}
	for _, x := range kv {
		if err := w.Set(x.k, x.v); err != nil {
			return err
		}
	}
	return nil
}

// ropeFreqs are llama.cpp's rope_freqs.weight for Llama-3's rotary scaling: per rotary
// frequency, the factor its wavelength is divided by (Hugging Face's "llama3" rope_type).
func ropeFreqs(c engine.Config) []float32 {
	rs := c.RopeScaling
	lowWave := float64(rs.OriginalMaxPositions) / rs.LowFreqFactor
	highWave := float64(rs.OriginalMaxPositions) / rs.HighFreqFactor
	out := make([]float32, c.HeadDim/2)
	for i := range out {
		freq := 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.HeadDim))
		wave := 2 * math.Pi / freq
		switch {
		case wave < highWave:
			out[i] = 1
		case wave > lowWave:
			out[i] = float32(rs.Factor)
		default:
			smooth := (float64(rs.OriginalMaxPositions)/wave - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
			out[i] = float32(1 / ((1-smooth)/rs.Factor + smooth))
		}
	}
	return out
}

// modelWriter describes the merged model (a nil adapter: the base) as GGUF with matrices
// in type t; vectors (norms, biases) stay F32, as llama.cpp's converter keeps them.
func modelWriter(g merger, base, name string, t gguf.TensorType) (*gguf.Writer, error) {
	c := g.m.Cfg
	w := gguf.NewWriter()
	if err := setArch(w, c, name, "model"); err != nil {
		return nil, err
	}
	if err := w.Set("general.file_type", ggufFileType(t)); err != nil {
		return nil, err
	}
	if t == gguf.Q8_0 {
		if err := w.Set("general.quantization_version", uint32(2)); err != nil {
			return nil, err
		}
	}
	if err := setTokenizer(w, g.m, base); err != nil {
		return nil, err
	}
	add := func(name string, typ gguf.TensorType, shape []int, v func() []float32) error {
		return w.AddTensor(name, typ, shape, func() ([]byte, error) { return gguf.Encode(typ, v()) })
	}
	// matType is t for a matrix whose rows fit t's blocks, F16 otherwise (as llama.cpp's
	// quantiser falls back for odd row lengths).
	matType := func(cols int) gguf.TensorType {
		if cols%t.BlockSize() != 0 {
			return gguf.F16
		}
		return t
	}
	D, V := c.Hidden, c.VocabSize
	var errs []error
	must := func(err error) { errs = append(errs, err) }
	must(add("token_embd.weight", matType(D), []int{V, D}, func() []float32 { return g.m.W.Embed }))
	if c.RopeScaling != nil && c.RopeScaling.Type == "llama3" {
		must(add("rope_freqs.weight", gguf.F32, []int{c.HeadDim / 2}, func() []float32 { return ropeFreqs(c) }))
	}
	for l := range g.m.W.Layers {
		L := &g.m.W.Layers[l]
		p := fmt.Sprintf("blk.%d.", l)
		must(add(p+"attn_norm.weight", gguf.F32, []int{D}, func() []float32 { return L.AttnNorm }))
		for pr := engine.Proj(0); pr < engine.NumLayerProj; pr++ {
			out, in := projDims(c, pr)
			must(add(p+ggufNames[pr]+".weight", matType(in), []int{out, in}, func() []float32 {
				v, _, _ := g.proj(l, pr)
				if h := rotary(c, pr); h > 0 {
					v = permuteRows(v, h, in)
				}
				return v
			}))
		}
		if c.AttnBias {
			for _, b := range []struct {
				name  string
				v     []float32
				heads int
			}{{"attn_q.bias", L.Bq, rotary(c, engine.ProjQ)}, {"attn_k.bias", L.Bk, rotary(c, engine.ProjK)}, {"attn_v.bias", L.Bv, 0}} {
				must(add(p+b.name, gguf.F32, []int{len(b.v)}, func() []float32 {
					if b.heads > 0 {
						return permuteRows(b.v, b.heads, 1)
					}
					return b.v
				}))
			}
		}
		must(add(p+"ffn_norm.weight", gguf.F32, []int{D}, func() []float32 { return L.MLPNorm }))
	}
	must(add("output_norm.weight", gguf.F32, []int{D}, func() []float32 { return g.m.W.FinalNorm }))
	if _, untied := g.lmHead(); untied {
		// Tied embeddings have no output tensor: llama.cpp then uses token_embd.
		must(add("output.weight", matType(D), []int{V, D}, func() []float32 { v, _ := g.lmHead(); return v }))
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return w, nil
}

// loraWriter describes an adapter as a GGUF LoRA adapter for llama.cpp's --lora: general.type
// "adapter", adapter.type "lora", adapter.lora.alpha, and per adapted projection the
// tensors "<base tensor>.lora_a" ([r, in]) and ".lora_b" ([out, r]) in F32, with B's rows
// in llama.cpp's rotary order for q and k (the adapter applies to a base converted the
// same way).
func loraWriter(m *engine.Model, a *engine.Adapter, name string) (*gguf.Writer, error) {
	if err := Check(GGUFLoRA, Modules(a.Config)); err != nil {
		return nil, err
	}
	c := m.Cfg
	w := gguf.NewWriter()
	if err := setArch(w, c, name, "adapter"); err != nil {
		return nil, err
	}
	// The engine scales by W.Scale = alpha/r; llama.cpp by adapter.lora.alpha / r.
	alpha := float64(a.W.Scale) * float64(a.Config.Rank)
	for _, kv := range []struct {
		k string
		v any
	}{{"adapter.type", "lora"}, {"adapter.lora.alpha", float32(alpha)}, {"general.file_type", uint32(0)}} {
		if err := w.Set(kv.k, kv.v); err != nil {
			return nil, err
		}
	}
	r := a.Config.Rank
	for l := range a.W.Layers {
		for pr := engine.Proj(0); pr < engine.NumLayerProj; pr++ {
			q := a.W.Layers[l][pr]
			if q == nil {
				continue
			}
			base := fmt.Sprintf("blk.%d.%s.weight", l, ggufNames[pr])
			if err := w.AddTensor(base+".lora_a", gguf.F32, []int{r, q.In}, func() ([]byte, error) { return gguf.Encode(gguf.F32, q.A) }); err != nil {
				return nil, err
			}
			heads := rotary(c, pr)
			if err := w.AddTensor(base+".lora_b", gguf.F32, []int{q.Out, r}, func() ([]byte, error) {
				b := q.B
				if heads > 0 {
					b = permuteRows(b, heads, r)
				}
				return gguf.Encode(gguf.F32, b)
			}); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}
