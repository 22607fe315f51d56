package cuda

import (
	_ "embed"
	"regexp"
)

// PTX is the engine's kernels (kernels/kernels.cu) compiled by kernels/gen.sh for the
// baseline architecture compute_70; the driver JIT-compiles it for newer GPUs.
//
//go:embed kernels/kernels.ptx
var PTX string

// Kernels are the entry points the device launches; each must be in PTX.
var Kernels = []string{
	"cast_bf16", "add", "scale", "add_rows", "embed_f32", "embed_bf16", "swiglu", "swiglu_back",
	"rmsnorm", "rmsnorm_back", "log_softmax", "rope", "attention", "attn_back_q", "attn_back_kv",
	"kv_write", "gather", "xent_fill", "scatter_add", "sumsq", "adamw", "sample", "topk",
}

var entryRE = regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`)

// ptxEntries lists the entry points defined in a PTX module.
func ptxEntries(ptx string) []string {
	var out []string
	for _, m := range entryRE.FindAllStringSubmatch(ptx, -1) {
		out = append(out, m[1])
	}
	return out
}
