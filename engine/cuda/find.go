package cuda

import (
	"path/filepath"
	"sort"
)

// Options configure Open.
type Options struct {
	// Ordinal is the GPU to use (CUDA's numbering, after CUDA_VISIBLE_DEVICES).
	Ordinal int
	// LibDirs are searched first for libcuda and cuBLAS.
	LibDirs []string
	// FP32Weights keeps frozen weights in float32 instead of bfloat16 (twice the memory,
	// and products in full float32 precision).
	FP32Weights bool
	// MemoryLimit caps the device memory the allocator holds (0: none).
	MemoryLimit int64
	// Graphs runs decode steps as CUDA graphs (Device.Graph), at most GraphLimit of them
	// kept (engine.cuda_graphs, engine.cuda_graphs_max).
	Graphs     bool
	GraphLimit int
	// NoGEMV keeps one-row products with bfloat16 weights on cuBLAS instead of the
	// gemv_bf16 kernel (engine.cuda_gemv false).
	NoGEMV bool
}

// driverNames are the driver library's names.
var driverNames = []string{"libcuda.so.1"}

// searchEnv is where library searches read the environment and the file system (tests
// pass their own).
type searchEnv struct {
	getenv func(string) string
	glob   func(string) ([]string, error)
}

// driverCandidates lists where libcuda.so.1 may be, most specific first. The bare name
// (last) lets the dynamic loader search its own paths (ld.so.cache, LD_LIBRARY_PATH).
// CUDA_HOME is not searched: a toolkit's libcuda is a stub that cannot run anything.
func driverCandidates(dirs []string) []string {
	var out []string
	for _, n := range driverNames {
		for _, d := range dirs {
			out = append(out, filepath.Join(d, n))
		}
		out = append(out, n)
		for _, d := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib"} {
			out = append(out, filepath.Join(d, n))
		}
	}
	return dedupe(out)
}

// libCandidates lists where a CUDA library (one of names, e.g. cuBLAS) may be: the
// configured directories, $CUDA_HOME, the toolkit's usual place, the nvidia-* Python
// wheels' directories (wheelDir is the library's directory inside the wheel, e.g.
// "nvidia/cublas/lib"), and finally the bare names for the dynamic loader.
func (e searchEnv) libCandidates(dirs []string, names []string, wheelDirs []string) []string {
	var roots []string
	roots = append(roots, dirs...)
	if h := e.getenv("CUDA_HOME"); h != "" {
		roots = append(roots, filepath.Join(h, "lib64"), filepath.Join(h, "lib"))
	}
	if h := e.getenv("CUDA_PATH"); h != "" {
		roots = append(roots, filepath.Join(h, "lib64"))
	}
	roots = append(roots, "/usr/local/cuda/lib64")
	for _, sp := range e.sitePackages() {
		for _, wd := range wheelDirs {
			roots = append(roots, filepath.Join(sp, wd))
		}
	}
	var out []string
	for _, n := range names {
		for _, r := range roots {
			out = append(out, filepath.Join(r, n))
		}
	}
	out = append(out, names...)
	return dedupe(out)
}

// sitePackages lists Python package directories where nvidia-* wheels may be
// installed: the active virtual environment or conda environment, the user's, and the
// system's.
func (e searchEnv) sitePackages() []string {
	var pats []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := e.getenv(v); p != "" {
			pats = append(pats, filepath.Join(p, "lib", "python3*", "site-packages"))
		}
	}
	if h := e.getenv("HOME"); h != "" {
		pats = append(pats, filepath.Join(h, ".local", "lib", "python3*", "site-packages"))
	}
	pats = append(pats, "/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
		"/usr/lib/python3/dist-packages", "/opt/conda/lib/python3*/site-packages")
	var out []string
	for _, p := range pats {
		m, _ := e.glob(p)
		sort.Sort(sort.Reverse(sort.StringSlice(m))) // newest Python first
		out = append(out, m...)
	}
	return out
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	out := xs[:0]
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
