package kern

// Path names the float32 path the kernels take on this machine: "avx2" (the assembly in
// kern_amd64.s, on a CPU with AVX2 and FMA) or "go" (the portable fallback). Benchmarks
// print it, and read the theoretical peak off its vector width.
func Path() string {
	if useAVX2 {
		return "avx2"
	}
	return "go"
}
