package kern

import (
	"runtime"
	"testing"
)

// TestKernelPaths names the path the kernels take here and the one withGeneric forces,
// so a run's log (scripts/test-arm64.sh prints it) shows that both were exercised: the
// vector assembly where this build has it (amd64 with AVX2, arm64 without purego), and the
// portable Go path everywhere; and the integer tiles' kernel ("vnni", "sdot" or
// "portable"; scripts/test-arm64.sh runs qemu with a CPU that has the dot product).
func TestKernelPaths(t *testing.T) {
	native := Path()
	var generic string
	withGeneric(func() { generic = Path() })
	t.Logf("GOARCH=%s: kernel path %q, forced portable path %q, integer tiles %q, 12×16 AVX-512 GEMM tile measured faster: %v",
		runtime.GOARCH, native, generic, q8Levels()[0], wideTile())
	if (native == "avx512") != (useAVX2 && wideTile()) {
		t.Fatalf("path %q with the wide tile %v", native, wideTile())
	}
	if generic != "go" {
		t.Fatalf("withGeneric left path %q, want go", generic)
	}
	if runtime.GOARCH == "arm64" && useAVX2 != (native == "neon") {
		t.Fatalf("arm64 path %q with the assembly switch %v", native, useAVX2)
	}
}
