package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/tuft-go/tuft/engine/kern"
	"golang.org/x/sys/cpu"
)

// goGEMMGFlops is the Go kernels' float32 GEMM speed on a 1024×1024×1024 product (the
// median of five), printed beside the reference BLAS's on the same shape.
func goGEMMGFlops() float64 {
	const n = 1024
	rng := rand.New(rand.NewPCG(1, 2))
	a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], b[i] = rng.Float32(), rng.Float32()
	}
	kern.MatMulNT(c, a, b, n, n, n, false)
	times := make([]float64, 5)
	for i := range times {
		t0 := time.Now()
		kern.MatMulNT(c, a, b, n, n, n, false)
		times[i] = time.Since(t0).Seconds()
	}
	return 2 * n * n * n / median(times) / 1e9
}

// referenceEnv is the environment of a reference run: OpenMP threads that wait by
// policy (OMP_WAIT_POLICY=policy; "" leaves libgomp's own spin-then-sleep), unless the
// caller set OMP_WAIT_POLICY, which is kept. And OpenBLAS runs the kernels the CPU's
// flags allow (openBLASCore). The reference must not be slowed by its threading or its
// kernel choice: which policy is faster depends on the machine's load (waitPolicies).
func referenceEnv(python, policy string) []string {
	env := os.Environ()
	if os.Getenv("OMP_WAIT_POLICY") == "" && policy != "" {
		env = append(env, "OMP_WAIT_POLICY="+policy)
	}
	if core, _ := openBLASCore(python); core != "" {
		env = append(env, "OPENBLAS_CORETYPE="+core)
	}
	return env
}

// passiveWait is the OpenMP wait policy of the PyTorch reference. libgomp's threads
// otherwise spin between parallel regions, and beside OpenBLAS's own threads on a
// machine with few cores they starve each other: on 2 busy cores a decode step of the
// reference took 2 s spinning and 0.3 s passive, its prefill 24 s and 2 s.
const passiveWait = "PASSIVE"

// waitPolicies are the OpenMP wait policies a reference whose speed depends on them
// runs under, each figure kept from the faster run: sleeping threads (PASSIVE) are
// faster on a loaded machine, where llama.cpp's F32 batch-1 decode ran at 6.0 tokens/s
// passive and 0.3 spinning, and spinning ones on a quiet machine, where its Q4_K_M
// batch-1 decode ran at 99–113 tokens/s with libgomp's default and 41–43 passive (ggml's
// barriers between operations are OpenMP barriers, and a sleeping thread's wake-up at
// each costs a small operation more than its work). A policy the caller set is the only
// one.
func waitPolicies() []string {
	if p := os.Getenv("OMP_WAIT_POLICY"); p != "" {
		return []string{p}
	}
	return []string{passiveWait, ""}
}

// waitPolicyName is how a report names policy ("" is libgomp's default).
func waitPolicyName(policy string) string {
	if policy == "" {
		return "default"
	}
	return policy
}

var openBLASProbe struct {
	mu        sync.Mutex
	probed    bool
	core, why string
}

// openBLASCore is the OPENBLAS_CORETYPE the reference runs with ("" keeps OpenBLAS's own
// choice) and why, probed once with python; with python "" it returns the choice made so
// far without probing. OpenBLAS picks its kernels by CPU model, and a model newer than the
// library gets an old core's: Debian's 0.3.21 takes an Intel Xeon of family 6 model 207
// (AVX-512) for a Prescott (SSE3), whose GEMM ran at 36 GFLOP/s on 2 threads where our
// kernels ran at 228, and the bench refused the ratios. When the core it reports
// (openblas_get_corename, asked through python's ctypes) has narrower vectors than the
// CPU's flags, the reference runs with the core those flags allow: SkylakeX for AVX-512
// (F, CD, BW, DQ, VL), Haswell for AVX2 with FMA, as newer OpenBLAS releases choose.
// A user's own OPENBLAS_CORETYPE is kept.
func openBLASCore(python string) (core, why string) {
	p := &openBLASProbe
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.probed && python != "" {
		p.probed = true
		p.core, p.why = probeOpenBLASCore(python)
	}
	return p.core, p.why
}

// probeOpenBLASCore is openBLASCore's probe.
func probeOpenBLASCore(python string) (core, why string) {
	if os.Getenv("OPENBLAS_CORETYPE") != "" || runtime.GOARCH != "amd64" {
		return "", ""
	}
	out, err := exec.Command(python, "-c", openBLASCoreProbe).Output()
	if err != nil {
		return "", ""
	}
	detected := strings.TrimSpace(string(out))
	want, name := cpuVectorRank()
	if detected == "" || openBLASCoreRank(detected) >= want {
		return "", ""
	}
	return name, fmt.Sprintf("OPENBLAS_CORETYPE=%s set by the bench: OpenBLAS chose its %s kernels for this CPU, whose flags allow %s's", name, detected, name)
}

// describe names the BLAS and, for OpenBLAS, the core whose kernels it ran and why
// that core when the bench chose it (openBLASCore).
func (b torchBLAS) describe() string {
	s := b.Kind
	if b.Core != "" {
		s += ", core " + b.Core
	}
	if _, why := openBLASCore(""); why != "" && b.CoreTypeEnv != "" {
		s += "; " + why
	}
	return s
}

// openBLASCoreProbe prints the core OpenBLAS picks on this machine, without torch.
const openBLASCoreProbe = `import ctypes, ctypes.util
n = ctypes.util.find_library("openblas")
if n:
    f = ctypes.CDLL(n).openblas_get_corename
    f.restype = ctypes.c_char_p
    print(f().decode())`

// cpuVectorRank is the widest vector ISA the CPU's flags give OpenBLAS kernels for (2:
// AVX-512, 1: AVX2 with FMA, 0: older) and that core's OPENBLAS_CORETYPE name.
func cpuVectorRank() (int, string) {
	x := cpu.X86
	switch {
	case x.HasAVX512F && x.HasAVX512CD && x.HasAVX512BW && x.HasAVX512DQ && x.HasAVX512VL:
		return 2, "SkylakeX"
	case x.HasAVX2 && x.HasFMA:
		return 1, "Haswell"
	}
	return 0, ""
}

// openBLASCoreRank is cpuVectorRank's scale for an OpenBLAS core name.
func openBLASCoreRank(core string) int {
	switch strings.ToLower(core) {
	case "skylakex", "cooperlake", "sapphirerapids":
		return 2
	case "haswell", "zen":
		return 1
	}
	return 0
}

// crippledReference says why a reference's figures must not be compared with ours: it
// runs on the unoptimised reference BLAS, or its GEMM is under a fifth of our kernels'
// speed (some other unoptimised BLAS). "" when it is a fair reference.
func crippledReference(b torchBLAS, goGFlops float64) string {
	switch {
	case b.Kind == "reference":
		return fmt.Sprintf("PyTorch runs on the unoptimised reference BLAS (%s, %.1f GFLOP/s); install an optimised one "+
			"(apt-get install libopenblas0-pthread, as scripts/setup.sh does) and run again", b.Library, b.GEMMGFlops)
	case b.GEMMGFlops <= 0:
		return "the reference did not report its GEMM speed"
	case goGFlops > 0 && b.GEMMGFlops < goGFlops/5:
		return fmt.Sprintf("the reference's GEMM runs at %.1f GFLOP/s (BLAS %s: %s), under a fifth of Go's %.1f: not an optimised BLAS",
			b.GEMMGFlops, b.Kind, b.Library, goGFlops)
	}
	return ""
}

func benchSamplingTorch(python, script, dir string, o samplingOptions, stderr io.Writer) (*torchSampling, error) {
	args := []string{script, "--model", dir, "--requests", fmt.Sprint(o.requests), "--adapters", fmt.Sprint(o.adapters),
		"--rank", fmt.Sprint(o.rank), "--prompt-tokens", fmt.Sprint(o.promptTokens), "--sample-tokens", fmt.Sprint(o.sampleTokens),
		"--seed", fmt.Sprint(o.seed), "--threads", fmt.Sprint(runtime.GOMAXPROCS(0))}
	var ts torchSampling
	last, err := runReference(python, args, stderr, &ts)
	if err != nil {
		return nil, err
	}
	if ts.Batched.TokensPerS <= 0 || ts.Single.TokensPerS <= 0 {
		return nil, errors.New("reference output lacks figures: " + last)
	}
	return &ts, nil
}

// runReference runs the PyTorch reference (args[0] is its script) and decodes the JSON
// of the last line it prints into v.
func runReference(python string, args []string, stderr io.Writer, v any) (last string, _ error) {
	return runReferenceWith(python, passiveWait, args, stderr, v)
}

// runReferenceWith is runReference under the OpenMP wait policy given (referenceEnv).
func runReferenceWith(python, policy string, args []string, stderr io.Writer, v any) (last string, _ error) {
	cmd := exec.Command(python, args...)
	cmd.Env = referenceEnv(python, policy)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w", filepath.Base(python), filepath.Base(args[0]), err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last = lines[len(lines)-1]
	if err := json.Unmarshal([]byte(last), v); err != nil {
		return "", fmt.Errorf("parse reference output: %w\n%s", err, out.String())
	}
	return last, nil
}

// benchModel is the model directory a bench runs on: dir when given, else preset
// written to a temporary directory that cleanup removes.
func benchModel(dir, preset string, logf func(string, ...any)) (_ string, cleanup func(), _ error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "tuft-bench-")
	if err != nil {
		return "", nil, err
	}
	logf("writing preset %s to %s", preset, tmp)
	if err := benchWritePreset(preset, tmp); err != nil {
		os.RemoveAll(tmp)
		return "", nil, err
	}
	return tmp, func() { os.RemoveAll(tmp) }, nil
}

// findTorchRef picks an interpreter that can import what the reference needs and locates
// its script (bench.py, or bench_peft.py for a GPU); why says what is missing when it fails.
func findTorchRef(python, script string, gpu bool) (string, string, string) {
	name, imports := "bench.py", "import torch, numpy"
	if gpu {
		name, imports = "bench_peft.py", "import torch, transformers, peft; assert torch.cuda.is_available(), 'no CUDA GPU for PyTorch'"
	}
	return findPythonScript(python, script, name, imports)
}

// findTorchScript locates a CPU reference script of tools/torchref and an interpreter
// that can import torch and numpy.
func findTorchScript(python, script, name string) (string, string, string) {
	return findPythonScript(python, script, name, "import torch, numpy")
}

// findPythonScript picks an interpreter that can run imports and locates the script
// (tools/torchref/NAME above the working directory unless given).
func findPythonScript(python, script, name, imports string) (string, string, string) {
	if script == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", "", err.Error()
		}
		for d := wd; ; d = filepath.Dir(d) {
			p := filepath.Join(d, "tools", "torchref", name)
			if _, err := os.Stat(p); err == nil {
				script = p
				break
			}
			if filepath.Dir(d) == d {
				return "", "", "tools/torchref/" + name + " not found above " + wd + " (run from the repository or pass --torch-script)"
			}
		}
	} else if _, err := os.Stat(script); err != nil {
		return "", "", err.Error()
	}
	cands := []string{python}
	if python == "" {
		cands = []string{"python3", "/usr/bin/python3"}
	}
	var whys []string
	seen := map[string]bool{}
	for _, c := range cands {
		p, err := exec.LookPath(c)
		if err != nil {
			whys = append(whys, c+": not found")
			continue
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		out, err := exec.Command(p, "-c", imports).CombinedOutput()
		if err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			whys = append(whys, fmt.Sprintf("%s: %q fails (%s)", p, imports, lines[len(lines)-1]))
			continue
		}
		return p, script, ""
	}
	return "", "", strings.Join(whys, "; ")
}
