package cuda

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every kernel the device launches is in both embedded PTX modules, every kernel in the
// source is in them, and the PTX is the generated file (gen.sh --check compares its content
// with a fresh compile; that needs the NVRTC wheel and runs in scripts/test-all.sh).
func TestPTXHasEveryKernel(t *testing.T) {
	src, err := os.ReadFile("kernels/kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	// Kernels defined directly, and the tiled ones a macro defines per head_dim.
	var defined []string
	for _, m := range regexp.MustCompile(`extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?([a-z]\w*)\(`).FindAllStringSubmatch(string(src), -1) {
		defined = append(defined, m[1])
	}
	for _, m := range regexp.MustCompile(`(?m)^FLASH_KERNELS\((\d+)\)$`).FindAllStringSubmatch(string(src), -1) {
		defined = append(defined, "flash_fwd_"+m[1], "flash_bwd_dq_"+m[1], "flash_bwd_kv_"+m[1])
	}
	for _, p := range []struct{ name, ptx, target string }{{"kernels.ptx", PTX, "sm_70"}, {"kernels_sm80.ptx", PTX80, "sm_80"}} {
		have := ptxEntries(p.ptx)
		for _, k := range Kernels {
			if !slices.Contains(have, k) {
				t.Errorf("kernel %s is launched but not in %s", k, p.name)
			}
		}
		for _, k := range defined {
			if !slices.Contains(have, k) {
				t.Errorf("kernel %s is in kernels.cu but not in %s: run kernels/gen.sh", k, p.name)
			}
			if !slices.Contains(Kernels, k) {
				t.Errorf("kernel %s is in kernels.cu but the device never loads it", k)
			}
		}
		if !regexp.MustCompile(`(?m)^\.target ` + p.target + `$`).MatchString(p.ptx) {
			t.Errorf("%s is not for %s", p.name, p.target)
		}
	}
	// The tensor-core instructions are in the compute_80 PTX only.
	if !strings.Contains(PTX80, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") {
		t.Error("kernels_sm80.ptx has no bfloat16 mma.sync")
	}
	if strings.Contains(PTX, "mma.sync") {
		t.Error("kernels.ptx (compute_70) has mma.sync")
	}
}
