package kern

import "runtime"

// Path names the float32 path the kernels take on this machine: "avx512" (the assembly
// in kern_amd64.s and gemm_amd64.s with the GEMM's 16-wide tiles, on a CPU with AVX-512
// where they are faster: wideTile),
// "avx2" (the same assembly with 8-wide tiles, on a CPU with AVX2 and FMA), "neon" (the
// assembly in kern_arm64.s, on every arm64) or "go" (the portable fallback). Benchmarks
// print it, and read the theoretical peak off its vector width.
func Path() string {
	switch {
	case !useAVX2:
		return "go"
	case runtime.GOARCH == "arm64":
		return "neon"
	case wideTile():
		return "avx512"
	}
	return "avx2"
}
