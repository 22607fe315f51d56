package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/kern"
)

func runBenchJSON(t *testing.T, args ...string) benchReport {
	t.Helper()
	benchPresetInChild = false // the test binary is not tuft: write the preset in-process
	smallMachine(t)
	var out bytes.Buffer
	if err := runBench(append([]string{"engine", "--preset", "tiny", "--tokens", "32", "--steps", "2", "--sample-tokens", "4", "--json"}, args...), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var r benchReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return r
}

func checkBenchSide(t *testing.T, name string, s *benchSide, sampleTokens int) {
	t.Helper()
	if s.Train.TokensPerS <= 0 || s.Train.MedianS <= 0 || len(s.Train.StepS) != 2 || s.PeakRSSMiB <= 0 {
		t.Fatalf("%s: bad figures %+v", name, s)
	}
	for _, b := range []int{1, 16} {
		x := s.sample(b)
		if x == nil || x.TokensPerS <= 0 || x.OutputTokens != b*sampleTokens {
			t.Fatalf("%s: sample batch %d: %+v", name, b, x)
		}
	}
}

func TestBenchEngineGoOnly(t *testing.T) {
	r := runBenchJSON(t, "--torch", "off")
	checkBenchSide(t, "go", &r.Go, 4)
	// The training step's input gradients take the packed GEMM, whose weight panels are
	// kept (engine.cpu_prepack_bytes) where the kernels are the assembly's.
	if kern.Path() != "go" && r.Go.PackedMiB <= 0 {
		t.Fatalf("no weight panels kept: %v MiB", r.Go.PackedMiB)
	}
	if r.Torch != nil || r.TorchSkipped == "" || r.Tokens != 32 || r.Rank != 16 || r.Layers != 4 {
		t.Fatalf("report: %+v", r)
	}
	if r.Machine == nil || r.Machine.Passes != 2 || r.Machine.ReadGBs <= 0 || r.Machine.GEMMGFlops <= 0 || r.TrainFLOPs <= 0 || r.Go.Train.GEMMFraction <= 0 ||
		len(r.Go.Train.GEMMBeside) != 2 || r.Go.Train.GEMMFractionBeside <= 0 {
		t.Fatalf("machine figures or training's GEMM-peak fraction missing: %+v %v %v", r.Machine, r.TrainFLOPs, r.Go.Train.GEMMFraction)
	}
	// The multi-adapter figure: 16 adapters × 2 tokens in one step against 1 × 32.
	if mu := r.Go.Multi; mu == nil || mu.Adapters != 16 || mu.Tokens != 32 || len(mu.StepS) != 2 || mu.Ratio <= 0 || mu.FwdBwdRatio <= 0 || r.Go.Train.FwdBwdS <= 0 ||
		mu.SameShapeS <= 0 || mu.SameShapeRatio <= 0 {
		t.Fatalf("multi-adapter training figure missing: %+v", mu)
	}
}

func TestBenchEngineWithTorch(t *testing.T) {
	if _, _, why := findTorchRef("", "", false); why != "" {
		t.Skip("PyTorch reference unavailable: " + why)
	}
	// Steps in turn (the default) and each side alone.
	for _, interleave := range []bool{true, false} {
		r := runBenchJSON(t, "--torch", "on", fmt.Sprintf("--interleave=%v", interleave))
		checkBenchSide(t, "go", &r.Go, 4)
		if r.Torch == nil {
			t.Fatalf("no PyTorch figures: %s", r.TorchSkipped)
		}
		checkBenchSide(t, "torch", r.Torch, 4)
		if r.Ratios["train_tokens_per_s"] <= 0 || r.Ratios["peak_rss_mib"] <= 0 || r.Interleaved != interleave {
			t.Fatalf("interleave %v: ratios %v, interleaved %v", interleave, r.Ratios, r.Interleaved)
		}
		// Same model, same tokens, B = 0 at the warm-up step: the losses must agree.
		if g, p := r.Go.Train.FirstLoss, r.Torch.Train.FirstLoss; math.Abs(g-p) > 1e-4*math.Abs(p) {
			t.Fatalf("warm-up loss/token: Go %v, PyTorch %v", g, p)
		}
	}
}

// A reference on the unoptimised reference BLAS, or one whose GEMM is far below ours,
// gets no ratio; an optimised one does.
func TestCrippledReferenceIsRefused(t *testing.T) {
	for _, c := range []struct {
		b      torchBLAS
		go_    float64
		refuse bool
	}{
		{torchBLAS{Library: "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3", Kind: "reference", GEMMGFlops: 7}, 80, true},
		{torchBLAS{Library: "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3", Kind: "openblas", GEMMGFlops: 85}, 80, false},
		{torchBLAS{Kind: "unknown", GEMMGFlops: 9}, 80, true},
		{torchBLAS{Kind: "mkl", GEMMGFlops: 60}, 80, false},
		{torchBLAS{Kind: "openblas"}, 80, true},
	} {
		if why := crippledReference(c.b, c.go_); (why != "") != c.refuse {
			t.Errorf("%+v against Go %.0f GFLOP/s: refusal %q", c.b, c.go_, why)
		}
	}
}

// The sampling benchmark runs the concurrent and single-request phases and reports
// sane figures (the targets themselves are checked on the smollm2-135m shape by hand,
// and recorded in the README).
func TestBenchSamplingGoOnly(t *testing.T) {
	benchPresetInChild = false
	var out bytes.Buffer
	if err := runBench([]string{"sampling", "--preset", "tiny", "--requests", "6", "--adapters", "3", "--tenants", "2",
		"--sample-tokens", "8", "--torch", "off", "--json"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var r samplingReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if r.Single.OutputTokens != 48 || r.Concurrent.OutputTokens != 48 || r.Ratio <= 0 || r.GoGEMMGFlops <= 0 ||
		len(r.Concurrent.TenantTPS) != 2 || r.Concurrent.TenantRatio < 1 || r.Concurrent.TTFTP50Ms <= 0 || r.Concurrent.MaxBatch < 2 ||
		r.Device != "cpu" {
		t.Fatalf("report: %+v", r)
	}
}

// TestBenchLoad: `tuft-bench load` reports the load's time and this process's peak RSS,
// and that the CPU keeps its float32 weights on the host.
func TestBenchLoad(t *testing.T) {
	dir := t.TempDir()
	if err := engine.WritePreset("tiny", dir); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runBench([]string{"load", "--model", dir, "--json"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var r loadReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if r.LoadS <= 0 || r.WeightBytes < 3<<20 || !r.HostWeights || r.Device != "cpu" || (runtime.GOOS == "linux" && r.PeakRSSMiB <= 0) {
		t.Fatalf("report %+v", r)
	}
}

// TestBenchEngineCPUProfile checks --cpuprofile: a pprof file (gzipped protobuf) of the
// timed training steps.
func TestBenchEngineCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "train.prof")
	runBenchJSON(t, "--torch", "off", "--adapters", "0", "--batches", "1", "--cpuprofile", path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("%s: %d bytes, not a gzipped pprof profile", path, len(b))
	}
	// A file that cannot be created is an error naming the flag.
	err = runBench([]string{"engine", "--preset", "tiny", "--tokens", "8", "--steps", "1", "--torch", "off", "--adapters", "0", "--batches", "1",
		"--sample-tokens", "1", "--cpuprofile", filepath.Join(t.TempDir(), "missing", "x.prof")}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--cpuprofile") {
		t.Fatalf("profile in a missing directory: %v", err)
	}
}
