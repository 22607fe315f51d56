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

// PTX80 is the same source compiled for compute_80, which GPUs of compute capability
// 8.0 and later load instead: there the attention kernels' tile products are tensor-core
// instructions (mma.sync with bfloat16), which compute_70 PTX cannot hold.
//
//go:embed kernels/kernels_sm80.ptx
var PTX80 string

// Kernels are the entry points the device launches; each must be in PTX.
var Kernels = []string{
	"cast_bf16", "add", "scale", "add_rows", "embed_f32", "embed_bf16", "swiglu", "swiglu_back",
	"add_rmsnorm", "rmsnorm_back", "log_softmax", "rope_qk", "attention", "attn_back_q", "attn_back_kv",
	"flash_fwd_64", "flash_bwd_dq_64", "flash_bwd_kv_64", "flash_fwd_128", "flash_bwd_dq_128", "flash_bwd_kv_128",
	"flash_fwd_256", "flash_bwd_dq_256", "flash_bwd_kv_256",
	"kv_write", "attn_rowdot", "gemv_bf16", "gather", "xent_fill", "scatter_add", "head_softmax", "head_dlogits", "head_back_f32", "head_back_bf16", "sumsq_multi", "adamw_multi", "sample", "topk",
	// grouped LoRA products (lora.go)
	"lora_shrink", "lora_expand", "lora_back_dz", "lora_back_dx", "lora_grad", "lora_split_sum",
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
