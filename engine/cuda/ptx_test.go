package cuda

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// Every kernel the device launches is in the embedded PTX, every kernel in the source
// is in the PTX, and the PTX is the generated file (gen.sh --check compares its content
// with a fresh compile; that needs the NVRTC wheel and runs in scripts/test-all.sh).
func TestPTXHasEveryKernel(t *testing.T) {
	have := ptxEntries(PTX)
	for _, k := range Kernels {
		if !slices.Contains(have, k) {
			t.Errorf("kernel %s is launched but not in kernels.ptx", k)
		}
	}
	src, err := os.ReadFile("kernels/kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`extern "C" __global__ void (\w+)\(`).FindAllStringSubmatch(string(src), -1) {
		if !slices.Contains(have, m[1]) {
			t.Errorf("kernel %s is in kernels.cu but not in kernels.ptx: run kernels/gen.sh", m[1])
		}
		if !slices.Contains(Kernels, m[1]) {
			t.Errorf("kernel %s is in kernels.cu but the device never loads it", m[1])
		}
	}
	if !regexp.MustCompile(`(?m)^\.target sm_70$`).MatchString(PTX) {
		t.Error("kernels.ptx is not for the baseline architecture compute_70")
	}
}
