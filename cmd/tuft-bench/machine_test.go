package main

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine"
	"golang.org/x/sys/cpu"
)

// smallMachine makes the machine figures quick (and not the machine's) for a test.
func smallMachine(t *testing.T) {
	n, b, f := gemmPeakN, minBufBytes, llcFactor
	gemmPeakN, minBufBytes, llcFactor = 192, 8<<20, 0
	t.Cleanup(func() { gemmPeakN, minBufBytes, llcFactor = n, b, f })
}

// The machine figures are measured with every thread, name the kernels' path and the
// CPU's SIMD as the CPU reports it, and the theoretical peak says what it assumed.
func TestMeasureMachine(t *testing.T) {
	smallMachine(t)
	m := measureMachine()
	if m.Read1GBs <= 0 || m.Read2GBs <= 0 || m.ReadGBs != max(m.Read1GBs, m.Read2GBs) || m.TriadGBs <= 0 || m.BandwidthGBs != max(m.ReadGBs, m.TriadGBs) || m.GEMMGFlops <= 0 || m.Threads != runtime.GOMAXPROCS(0) || m.BufferMiB != 8 || m.CPUModel == "" {
		t.Fatalf("figures %+v", m)
	}
	if runtime.GOARCH == "amd64" {
		if cpu.X86.HasAVX2 != slices.Contains(m.SIMD, "avx2") || cpu.X86.HasAVX512F != slices.Contains(m.SIMD, "avx512f") {
			t.Fatalf("SIMD %v disagrees with the CPU", m.SIMD)
		}
	}
	if m.PeakBasis == "" {
		t.Fatalf("the theoretical peak neither given nor explained: %+v", m)
	}
	// The bandwidth is read over weight memory, and the line says how it was paged.
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err == nil && !strings.Contains(string(b), "["+m.HugePages+"]") {
		t.Errorf("THP mode %q, the kernel says %q", m.HugePages, b)
	}
	var out strings.Builder
	printMachine(&out, m)
	if !strings.Contains(out.String(), "MiB of weight memory") || m.HugePages != "" && !strings.Contains(out.String(), "THP "+m.HugePages) {
		t.Errorf("machine lines do not say what memory the bandwidth was read over:\n%s", out.String())
	}
}

// The theoretical peak is given only from a maximum clock the kernel exposes, and never
// below what was measured.
func TestTheoreticalPeak(t *testing.T) {
	m := machineFigures{Threads: 2, Kernels: "avx2", MHz: 3000, MHzFrom: mhzCpufreq, GEMMGFlops: 100}
	if p, basis := theoreticalPeak(m); p != 2*2*8*2*3 || !strings.Contains(basis, "assumed") {
		t.Fatalf("peak %v (%s)", p, basis)
	}
	z := m
	z.Kernels = "avx512"
	if p, basis := theoreticalPeak(z); p != 2*2*16*2*3 || !strings.Contains(basis, "16 float32 lanes") {
		t.Fatalf("avx512 peak %v (%s)", p, basis)
	}
	for _, c := range []struct {
		change func(*machineFigures)
		want   string
	}{
		{func(m *machineFigures) { m.MHzFrom = "/proc/cpuinfo cpu MHz" }, "no maximum clock"},
		{func(m *machineFigures) { m.GEMMGFlops = 200 }, "measured GEMM beats"},
		{func(m *machineFigures) { m.Kernels = "go" }, "no vector width"},
	} {
		x := m
		c.change(&x)
		if p, basis := theoreticalPeak(x); p != 0 || !strings.Contains(basis, c.want) {
			t.Errorf("peak %v (%s), want none: %s", p, basis, c.want)
		}
	}
}

func TestParseCPUInfoAndCacheSize(t *testing.T) {
	ci := parseCPUInfo(strings.NewReader("processor\t: 0\nmodel name\t: AMD EPYC 9B14\ncpu MHz\t\t: 2596.000\n\nprocessor\t: 1\nmodel name\t: other\n"))
	if ci["model name"] != "AMD EPYC 9B14" || ci["cpu MHz"] != "2596.000" {
		t.Fatalf("%v", ci)
	}
	for in, want := range map[string]int64{"32768K": 32 << 20, "2M": 2 << 20, "1024": 1024, "x": 0, "1G": 1 << 30} {
		if got := parseCacheSize(in); got != want {
			t.Errorf("parseCacheSize(%q) = %d, want %d", in, got, want)
		}
	}
}

// loraStepFLOPs against a count made matrix by matrix on a small model.
func TestLoraStepFLOPs(t *testing.T) {
	c := engine.Config{VocabSize: 50, Hidden: 8, Intermediate: 12, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 2}
	const T, r = 5, 3
	var want float64
	mat := func(in, out int) { // a frozen projection with a rank-r adapter
		want += 2 * T * float64(in*out) * 2     // forward and input gradient
		want += 3 * 2 * T * float64(r*in+r*out) // adapter: forward, input and weight gradients
	}
	for l := 0; l < c.Layers; l++ {
		mat(8, 8) // q
		mat(8, 4) // k
		mat(8, 4) // v
		mat(8, 8) // o
		mat(8, 12)
		mat(8, 12)
		mat(12, 8)
		for i := 0; i < T; i++ { // query i attends to keys 0..i: QKᵀ and PV, forward ×3 with backward
			want += 3 * 2 * 2 * float64(i+1) * float64(c.Heads*c.HeadDim)
		}
	}
	want += 2 * 2 * T * float64(c.VocabSize*c.Hidden) // LM head forward and input gradient
	if got := loraStepFLOPs(c, T, r); got != want {
		t.Fatalf("loraStepFLOPs = %v, want %v", got, want)
	}
}

// OpenBLAS's core names rank as the CPU flags do: a core below the flags' rank makes the
// bench name the flags' core for the reference (openBLASCore).
func TestOpenBLASCoreRank(t *testing.T) {
	for core, want := range map[string]int{"Prescott": 0, "Sandybridge": 0, "Haswell": 1, "ZEN": 1, "SkylakeX": 2, "cooperlake": 2, "SapphireRapids": 2} {
		if got := openBLASCoreRank(core); got != want {
			t.Errorf("openBLASCoreRank(%q) = %d, want %d", core, got, want)
		}
	}
	if r, name := cpuVectorRank(); (r == 2) != (name == "SkylakeX") || (r == 1) != (name == "Haswell") || (r == 0) != (name == "") {
		t.Fatalf("cpuVectorRank = %d, %q", r, name)
	}
}

// The machine probe hands its buffers back and restarts the peak RSS (Linux), so the
// engine's peak measured after it is not the probe's: here a 256 MiB buffer dropped
// before the probe is gone from the peak after it.
func TestMeasureMachineRestartsPeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("VmHWM and clear_refs are Linux's")
	}
	smallMachine(t)
	held := func() float64 {
		big := make([]byte, 256<<20)
		for i := 0; i < len(big); i += 4096 {
			big[i] = 1
		}
		return maxRSSMiB()
	}()
	m := measureMachine()
	after := maxRSSMiB()
	if !m.PeakRSSReset || after > held-128 {
		t.Fatalf("peak RSS %.0f MiB with the buffer held, %.0f after the probe (restarted: %v)", held, after, m.PeakRSSReset)
	}
}

// gemmFraction: the median step against the run's best probe, and each step against the
// probe beside it (a slow step beside a slow probe is a full share, not a low one).
func TestGEMMFractionBeside(t *testing.T) {
	r := &benchReport{TrainFLOPs: 100e9, Machine: &machineFigures{GEMMGFlops: 200}}
	s := &benchSide{Train: benchTrain{StepS: []float64{1, 2, 4}, MedianS: 2, GEMMBeside: []float64{100, 50, 100}}}
	gemmFraction(s, r)
	// Shares beside: 100/1/100 = 1, 100/2/50 = 1, 100/4/100 = 0.25; median 1.
	if s.Train.GEMMFraction != 0.25 || s.Train.GEMMFractionBeside != 1 {
		t.Fatalf("fractions %v (want 0.25), beside %v (want 1)", s.Train.GEMMFraction, s.Train.GEMMFractionBeside)
	}
	// A side without probes (the reference) gets none.
	s = &benchSide{Train: benchTrain{StepS: []float64{1}, MedianS: 1}}
	if gemmFraction(s, r); s.Train.GEMMFractionBeside != 0 {
		t.Fatalf("beside share without probes: %v", s.Train.GEMMFractionBeside)
	}
}
