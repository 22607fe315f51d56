package engine

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"

	"github.com/tuft-go/tuft/engine/safetensors"
)

// Preset weights are written straight to the file, chunk by chunk, in the stored dtype
// and in parallel: no tensor is ever held whole (llama2-7b-shape's 13.5 GB would
// otherwise need 27 GB of float32 first). Every value is a pure function of (seed,
// tensor name, element index) — a counter-based generator — so the bytes are the same
// whatever the number of workers or the order in which chunks are produced.
//
// The distribution: each value is std·z with z the Irwin–Hall sum of four independent
// 16-bit uniforms (all four from one SplitMix64 hash of the counter), centred and scaled
// to mean 0 and variance 1. It is close to a normal (same mean and variance, kurtosis
// 2.7 instead of 3) but bounded at ±2√3 ≈ 3.46 standard deviations, which is what an
// initialisation needs and costs one hash per value instead of Box–Muller's logarithm,
// square root and sine.

// presetInit is how one preset tensor is filled.
type presetInit struct {
	std  float64 // normal-like with this standard deviation; 0: all ones
	ones bool
}

// irwinHallScale is 1/σ of a sum of four uniforms on {0…65535}: each has variance
// (65536²−1)/12.
var irwinHallScale = 1 / math.Sqrt(4*(65536.0*65536.0-1)/12)

// splitMix64 is SplitMix64's output function: a bijective mix of a 64-bit counter.
func splitMix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// presetSum is element i of the stream key before scaling: the centred Irwin–Hall sum
// (see the distribution above), an integer in [−131070, 131070].
func presetSum(key, i uint64) int32 {
	x := splitMix64(key + i*0x9e3779b97f4a7c15)
	return int32(x&0xffff+x>>16&0xffff+x>>32&0xffff+x>>48) - 2*65535
}

// presetNormal is element i of the stream key with unit variance.
func presetNormal(key, i uint64) float32 {
	return float32(presetSum(key, i)) * float32(irwinHallScale)
}

// presetKey is the stream of one tensor: the seed mixed with a hash of its name, so a
// tensor's values do not depend on which other tensors the preset has.
func presetKey(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return splitMix64(seed ^ splitMix64(h.Sum64()))
}

// fillPreset writes elements first… of a tensor into dst in dtype (BF16 or F32). It is
// the hot loop of writing a preset: one hash, one multiply and one rounding per value.
func fillPreset(dtype string, in presetInit, key uint64, first int64, dst []byte) error {
	mul := float32(in.std * irwinHallScale)
	k := uint64(first)
	switch dtype {
	case "BF16":
		for j := 0; j+1 < len(dst); j += 2 {
			u := uint32(0x3f800000) // 1.0
			if !in.ones {
				u = math.Float32bits(float32(presetSum(key, k)) * mul)
				u += 0x7fff + (u>>16)&1 // round to nearest even (the values are finite)
			}
			dst[j], dst[j+1] = byte(u>>16), byte(u>>24)
			k++
		}
	case "F32":
		for j := 0; j+3 < len(dst); j += 4 {
			v := float32(1)
			if !in.ones {
				v = float32(presetSum(key, k)) * mul
			}
			binary.LittleEndian.PutUint32(dst[j:], math.Float32bits(v))
			k++
		}
	default:
		return fmt.Errorf("preset dtype %s", dtype)
	}
	return nil
}

// presetTensors lists a preset's tensors and how each is initialised.
func presetTensors(p preset) ([]safetensors.Entry, []presetInit) {
	D, I, V := p.hidden, p.inter, p.vocab
	q, kv := p.heads*p.headDim, p.kv*p.headDim
	std := 0.02
	out := std / math.Sqrt(2*float64(p.layers)) // GPT-2's scaled init of residual outputs
	dtype := "F32"
	if p.bf16 {
		dtype = "BF16"
	}
	var es []safetensors.Entry
	var ins []presetInit
	add := func(name string, in presetInit, shape ...int) {
		es = append(es, safetensors.Entry{Name: name, DType: dtype, Shape: shape})
		ins = append(ins, in)
	}
	normal, ones := func(s float64) presetInit { return presetInit{std: s} }, presetInit{ones: true}
	add("model.embed_tokens.weight", normal(std), V, D)
	add("model.norm.weight", ones, D)
	if !p.tied {
		add("lm_head.weight", normal(std), V, D)
	}
	for l := 0; l < p.layers; l++ {
		pre := fmt.Sprintf("model.layers.%d.", l)
		add(pre+"input_layernorm.weight", ones, D)
		add(pre+"self_attn.q_proj.weight", normal(std), q, D)
		add(pre+"self_attn.k_proj.weight", normal(std), kv, D)
		add(pre+"self_attn.v_proj.weight", normal(std), kv, D)
		add(pre+"self_attn.o_proj.weight", normal(out), D, q)
		add(pre+"post_attention_layernorm.weight", ones, D)
		add(pre+"mlp.gate_proj.weight", normal(std), I, D)
		add(pre+"mlp.up_proj.weight", normal(std), I, D)
		add(pre+"mlp.down_proj.weight", normal(out), D, I)
		if p.bias {
			add(pre+"self_attn.q_proj.bias", normal(std), q)
			add(pre+"self_attn.k_proj.bias", normal(std), kv)
			add(pre+"self_attn.v_proj.bias", normal(std), kv)
		}
	}
	return es, ins
}

// writePresetStreamed writes p's weights to path with the counter-based generator.
func writePresetStreamed(p preset, name, path string, seed uint64) error {
	es, ins := presetTensors(p)
	keys := make([]uint64, len(es))
	for i, e := range es {
		keys[i] = presetKey(seed, e.Name)
	}
	meta := map[string]string{"format": "pt", "preset": name, "preset_seed": fmt.Sprint(seed)}
	return safetensors.WriteParallel(path, es, meta, 0, func(i int, first int64, dst []byte) error {
		return fillPreset(es[i].DType, ins[i], keys[i], first, dst)
	})
}
