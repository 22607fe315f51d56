package engine

import (
	"fmt"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/gguf"
	"github.com/tuft-go/tuft/engine/kern"
)

// A GGUF file's quantised matrices kept as their own blocks. A CPU holding weights in
// q4_k (engine.cpu_weight_format) keeps every matrix of a GGUF file that is in a block
// format the kernels compute with (Q4_K, Q6_K, Q5_0, Q8_0, Q4_1) as the file's bytes, so
// a llama.cpp Q4_K_M file (Q4_K mixed with Q6_K, Q5_0 and Q8_0) computes with the very
// weights llama.cpp computes with; its other matrices (F32, F16, BF16, Q4_0, Q5_1, Q5_K)
// are quantised into q4_k as any other model's. Other formats re-quantise at load, as
// before (a file already in their format keeps its blocks: re-quantising is the identity).

// ggufKernFormats maps the GGUF types the CPU keeps as blocks to their kern formats.
var ggufKernFormats = map[gguf.TensorType]kern.WeightFormat{
	gguf.Q4_K: kern.Q4_K, gguf.Q6_K: kern.Q6_K, gguf.Q5_0: kern.Q5_0, gguf.Q8_0: kern.Q8_0, gguf.Q4_1: kern.Q4_1,
}

// keepsGGUFBlocks reports whether loading onto d keeps a GGUF file's blocks.
func keepsGGUFBlocks(d Device) bool {
	c, ok := d.(*device.CPU[float32])
	return ok && c.WeightFormat() == kern.Q4_K
}

// ggufNative reads the blocks of every matrix of w (ggufWeights' result for f) that
// the file holds in a kern block format, keyed by the first element of w's float32
// copy of it (the slice placeMatrix is handed): llama's q and k rows are reordered as
// ggufWeights reorders the floats, a row's blocks moving with it.
func ggufNative(f *gguf.File, c Config, w *Weights[float32]) (map[*float32]*kern.Frozen, error) {
	D, I, V := c.Hidden, c.Intermediate, c.VocabSize
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	out := map[*float32]*kern.Frozen{}
	add := func(dst []float32, name string, rows, cols, heads int) error {
		ti, ok := f.Tensor(name)
		if !ok || len(dst) == 0 {
			return nil
		}
		kf, ok := ggufKernFormats[ti.Type]
		if !ok {
			return nil
		}
		raw, err := f.Raw(ti)
		if err != nil {
			return err
		}
		if heads > 0 && c.Arch == "llama" {
			raw = unpermuteRotary(raw, heads, c.HeadDim, len(raw)/rows)
		}
		fz, err := kern.FrozenBlocks(kf, raw, rows, cols)
		if err != nil {
			return fmt.Errorf("gguf: tensor %s: %w", name, err)
		}
		out[&dst[0]] = fz
		return nil
	}
	var errs []error
	keep := func(dst []float32, name string, rows, cols, heads int) {
		if err := add(dst, name, rows, cols, heads); err != nil {
			errs = append(errs, err)
		}
	}
	keep(w.Embed, "token_embd.weight", V, D, 0)
	if !c.TieEmbeddings {
		keep(w.LMHead, "output.weight", V, D, 0)
	}
	for i := range w.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		L := &w.Layers[i]
		keep(L.Wq, p+"attn_q.weight", q, D, c.Heads)
		keep(L.Wk, p+"attn_k.weight", kv, D, c.KVHeads)
		keep(L.Wv, p+"attn_v.weight", kv, D, 0)
		keep(L.Wo, p+"attn_output.weight", D, q, 0)
		keep(L.Wgate, p+"ffn_gate.weight", I, D, 0)
		keep(L.Wup, p+"ffn_up.weight", I, D, 0)
		keep(L.Wdown, p+"ffn_down.weight", D, I, 0)
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return out, nil
}

// withNative hands NewModel the blocks ggufNative kept, placed instead of quantising
// the float32 copy of those matrices.
func withNative(n map[*float32]*kern.Frozen) Option { return func(o *options) { o.native = n } }
