package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/tuft-go/tuft/engine/kern"
)

// The machine figures every `tuft-bench engine` run measures first, so each speed can be
// read as a fraction of what the hardware gives: memory bandwidth (decode streams every
// weight once per step, so its ceiling is bandwidth ÷ bytes of weights) and GEMM peak
// (training and prompt processing are matrix products).

// machineFigures describes the CPU and what it measured at.
type machineFigures struct {
	CPUModel string   `json:"cpu_model"`
	SIMD     []string `json:"simd"`    // of avx2, fma, avx512f, asimd (NEON): what the CPU has
	Kernels  string   `json:"kernels"` // the float32 path engine/kern takes here
	Threads  int      `json:"threads"` // GOMAXPROCS: the engine's threads and the references'
	MHz      float64  `json:"mhz,omitempty"`
	MHzFrom  string   `json:"mhz_from,omitempty"`
	LLCBytes int64    `json:"llc_bytes,omitempty"`
	// Memory bandwidth, GB/s (10⁹ bytes), best of memRepeats, all threads, over two
	// float32 buffers of BufferMiB each: read = the better of two read-only passes,
	// kern.Dot(x, y) (two read streams a thread, Read2GBs) and kern.Dot(x, x) over x (one
	// stream, as a decode product reads its rows, Read1GBs); triad = kern.Axpy (y += a·x:
	// two reads and one write, counted as three streams). The buffers are the memory the
	// engine keeps frozen weights in (kern.WeightMemory: outside the heap, advised for
	// transparent huge pages), so decode is read against what that memory gives;
	// HugePages is the kernel's THP mode and HugeMiB how much of the process's memory it
	// had backed with huge pages once the buffers were written (Linux).
	BufferMiB int     `json:"buffer_mib"`
	HugePages string  `json:"transparent_hugepages,omitempty"`
	HugeMiB   int     `json:"huge_page_mib"`
	ReadGBs   float64 `json:"mem_read_gb_s"`
	Read1GBs  float64 `json:"mem_read_one_stream_gb_s"`
	Read2GBs  float64 `json:"mem_read_two_streams_gb_s"`
	TriadGBs  float64 `json:"mem_triad_gb_s"`
	// BandwidthGBs, the larger of the two, is what decode speeds are read against: as
	// STREAM reports its best kernel, the machine streams at least that fast. (On the
	// shared VM of docs/performance.md the triad beat the read-only pass.)
	BandwidthGBs  float64 `json:"mem_bandwidth_gb_s"`
	GEMMSize      int     `json:"gemm_size"`
	GEMMGFlops    float64 `json:"gemm_gflops"` // kern.MatMulNT n×n×n, best of gemmRepeats: the measured peak
	PeakGFlops    float64 `json:"peak_gflops,omitempty"`
	PeakBasis     string  `json:"peak_basis,omitempty"`
	MeasuredInSec float64 `json:"measured_in_s"`
	Passes        int     `json:"passes"` // 1, or 2 when measured before and after the implementations (best kept)
	// PeakRSSReset says the process's peak RSS was restarted after the bandwidth buffers
	// were handed back (Linux), so the engine's peak RSS does not count them.
	PeakRSSReset bool `json:"peak_rss_reset"`
}

const (
	memRepeats  = 10
	gemmRepeats = 20 // short products, many: the best catches a window nobody else used
)

// Sizes of the machine figures' work, variables so that tests measure a small machine
// quickly (the figures are then not the machine's).
var (
	gemmPeakN           = 1024
	besideRepeats       = 5         // the probe after each training step (benchTrain.GEMMBeside): ~50 ms
	minBufBytes   int64 = 256 << 20 // per buffer: far beyond any last-level cache we meet
	llcFactor     int64 = 4         // buffers are at least this many times the LLC
)

// measureMachine reads the CPU's description and measures bandwidth and GEMM speed with
// the engine's own kernels on GOMAXPROCS threads.
func measureMachine() machineFigures {
	t0 := time.Now()
	m := machineFigures{Threads: runtime.GOMAXPROCS(0), CPUModel: cpuModel(), SIMD: simdFlags(), Kernels: kern.Path()}
	m.MHz, m.MHzFrom = cpuMHz()
	m.LLCBytes = llcBytes()
	buf := max(minBufBytes, llcFactor*m.LLCBytes)
	m.BufferMiB = int(buf >> 20)
	m.HugePages = thpMode()
	m.Read1GBs, m.Read2GBs, m.TriadGBs, m.HugeMiB = memBandwidth(int(buf/4), m.Threads)
	m.ReadGBs = max(m.Read1GBs, m.Read2GBs)
	m.BandwidthGBs = max(m.ReadGBs, m.TriadGBs)
	m.GEMMSize = gemmPeakN
	m.GEMMGFlops = gemmGFlops(gemmPeakN, gemmRepeats, true)
	m.PeakGFlops, m.PeakBasis = theoreticalPeak(m)
	m.MeasuredInSec = time.Since(t0).Seconds()
	m.Passes = 1
	// The bandwidth buffers (2 × BufferMiB, 2 GiB on a 260 MiB LLC) are the largest
	// thing this process has held so far: hand them back and restart the peak, so the
	// engine's peak RSS measured next is its own (it counted them before: 4050 MiB for a
	// 512-token step that needs under 2 GiB).
	runtime.GC()
	debug.FreeOSMemory()
	m.PeakRSSReset = resetPeakRSS()
	return m
}

// remeasure runs the bandwidth and GEMM passes again and keeps the best of both runs
// (and recomputes nothing else): a bench measures the machine before and after the
// implementations, so that a burst of load from elsewhere during one set of passes does
// not lower the figures every speed is divided by.
func (m *machineFigures) remeasure() {
	t0 := time.Now()
	r1, r2, t, _ := memBandwidth(int(int64(m.BufferMiB)<<20/4), m.Threads)
	m.Read1GBs, m.Read2GBs, m.TriadGBs = max(m.Read1GBs, r1), max(m.Read2GBs, r2), max(m.TriadGBs, t)
	m.ReadGBs = max(m.Read1GBs, m.Read2GBs)
	m.BandwidthGBs = max(m.ReadGBs, m.TriadGBs)
	m.GEMMGFlops = max(m.GEMMGFlops, gemmGFlops(m.GEMMSize, gemmRepeats, true))
	m.PeakGFlops, m.PeakBasis = theoreticalPeak(*m)
	m.MeasuredInSec += time.Since(t0).Seconds()
	m.Passes++
}

// memBandwidth returns the bandwidth in GB/s of a read-only pass of one stream a thread
// (x alone) and of two (x and y), and of the triad, over two buffers of n float32 in
// weight memory, each pass split into one contiguous chunk per thread, and the MiB of
// the process's memory on huge pages once they were written. Weight memory on 2 MiB
// pages read 12 % faster than the heap's 4 KiB ones on the Zen 4 KVM guest (31 against
// 35 GB/s), and decode's products read from it. On the KVM guests of
// docs/performance.md one stream read 15 % faster than two, and the triad's time was
// the two-stream pass's: its write cost nothing, so counted as a third stream it reports
// half as much again as its reads ran at.
func memBandwidth(n, threads int) (read1, read2, triad float64, huge int) {
	x, freeX := kern.WeightMemory(n)
	defer freeX()
	y, freeY := kern.WeightMemory(n)
	defer freeY()
	for i := range x { // touch every page before timing
		x[i], y[i] = 1, 0
	}
	huge = hugeMiB()
	pass := func(f func(x, y []float32)) float64 {
		best := 0.0
		for r := 0; r < memRepeats; r++ {
			var wg sync.WaitGroup
			t := time.Now()
			for w := 0; w < threads; w++ {
				lo, hi := n*w/threads, n*(w+1)/threads
				wg.Add(1)
				go func() {
					defer wg.Done()
					f(x[lo:hi], y[lo:hi])
				}()
			}
			wg.Wait()
			if s := time.Since(t).Seconds(); best == 0 || s < best {
				best = s
			}
		}
		return best
	}
	var sink [64]float32
	var mu sync.Mutex
	read := func(x, y []float32) {
		s := kern.Dot(x, y)
		mu.Lock()
		sink[0] += s
		mu.Unlock()
	}
	read2S := pass(read)
	read1S := pass(func(x, _ []float32) { read(x, x) })
	triadS := pass(func(x, y []float32) { kern.Axpy(1e-9, x, y) })
	_ = sink
	return 4 * float64(n) / read1S / 1e9, 2 * 4 * float64(n) / read2S / 1e9, 3 * 4 * float64(n) / triadS / 1e9, huge
}

// thpMode is Linux's transparent huge page mode (always, madvise or never), or "".
func thpMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	s := string(b)
	if i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']'); i >= 0 && j > i {
		return s[i+1 : j]
	}
	return ""
}

// hugeMiB is the MiB of this process's memory on transparent huge pages (Linux's
// AnonHugePages), or 0.
func hugeMiB() int {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "AnonHugePages:" {
			kb, _ := strconv.Atoi(f[1])
			return kb >> 10
		}
	}
	return 0
}

// gemmGFlops is kern.MatMulNT's speed on an n×n×n float32 product after one warm-up:
// the best of reps when best, else the median.
func gemmGFlops(n, reps int, best bool) float64 {
	rng := rand.New(rand.NewPCG(1, 2))
	a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], b[i] = rng.Float32(), rng.Float32()
	}
	kern.MatMulNT(c, a, b, n, n, n, false)
	times := make([]float64, reps)
	for i := range times {
		t0 := time.Now()
		kern.MatMulNT(c, a, b, n, n, n, false)
		times[i] = time.Since(t0).Seconds()
	}
	s := median(times)
	if best {
		s = times[0]
		for _, t := range times {
			s = min(s, t)
		}
	}
	return 2 * float64(n) * float64(n) * float64(n) / s / 1e9
}

// theoreticalPeak is threads × FMA pipes × float32 lanes × 2 × clock for the vector
// width engine/kern computes with here, or 0 and the reason it cannot be given honestly.
// The number of FMA pipes cannot be read from the CPU's flags: two is assumed (every x86
// core since Haswell/Zen 2 and the big arm64 cores have two or more). The clock must be
// cpufreq's maximum: /proc/cpuinfo's "cpu MHz" under a hypervisor is the nominal clock,
// which boost exceeds (on the machine of docs/performance.md one thread's measured GEMM
// beat the peak at that clock by 28%). A peak below the measured GEMM is not printed.
func theoreticalPeak(m machineFigures) (float64, string) {
	lanes := 0
	switch m.Kernels {
	case "avx512":
		lanes = 16
	case "avx2":
		lanes = 8
	case "neon":
		lanes = 4
	}
	const pipes = 2
	switch {
	case lanes == 0:
		return 0, "not given: the kernels' path here (" + m.Kernels + ") has no vector width to count"
	case m.MHzFrom != mhzCpufreq:
		return 0, "not given: no maximum clock is exposed (cpufreq); the nominal clock boost exceeds would understate it"
	}
	peak := float64(m.Threads*pipes*lanes*2) * m.MHz / 1e3
	if m.GEMMGFlops > peak {
		return 0, fmt.Sprintf("not given: the measured GEMM beats %.1f GFLOP/s, the peak at %.0f MHz with %d FMA pipes assumed", peak, m.MHz, pipes)
	}
	return peak, fmt.Sprintf("%d threads × %d FMA pipes (assumed) × %d float32 lanes (%s) × 2 flops × %.0f MHz (%s)",
		m.Threads, pipes, lanes, m.Kernels, m.MHz, m.MHzFrom)
}

func simdFlags() []string {
	var out []string
	add := func(ok bool, name string) {
		if ok {
			out = append(out, name)
		}
	}
	switch runtime.GOARCH {
	case "amd64":
		add(cpu.X86.HasAVX2, "avx2")
		add(cpu.X86.HasFMA, "fma")
		add(cpu.X86.HasAVX512F, "avx512f")
	case "arm64":
		add(cpu.ARM64.HasASIMD, "asimd")
		add(cpu.ARM64.HasSVE, "sve")
	}
	return out
}

// cpuinfo returns the first value of each key in /proc/cpuinfo (nil elsewhere).
func cpuinfo() map[string]string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	return parseCPUInfo(f)
}

func parseCPUInfo(r io.Reader) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		k = strings.TrimSpace(k)
		if _, seen := out[k]; ok && !seen {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func cpuModel() string {
	ci := cpuinfo()
	if v := ci["model name"]; v != "" {
		// A hypervisor may pass a bare "AMD EPYC": the family and model numbers still
		// name the generation (family 25 model 17 is Zen 4).
		if f, m := ci["cpu family"], ci["model"]; f != "" && m != "" {
			v += fmt.Sprintf(" (family %s model %s)", f, m)
		}
		return v
	}
	for _, k := range []string{"Model", "Hardware"} {
		if v := ci[k]; v != "" {
			return v
		}
	}
	if part := ci["CPU part"]; part != "" { // arm64 Linux: implementer and part numbers only
		return fmt.Sprintf("%s CPU implementer %s part %s", runtime.GOARCH, ci["CPU implementer"], part)
	}
	return runtime.GOARCH + " (model unknown)"
}

const mhzCpufreq = "cpufreq cpuinfo_max_freq"

// cpuMHz is the clock the theoretical peak is computed at: cpufreq's maximum where the
// kernel exposes it, else /proc/cpuinfo's "cpu MHz" (the nominal clock in a VM).
func cpuMHz() (float64, string) {
	if b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"); err == nil {
		if khz, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err == nil && khz > 0 {
			return khz / 1e3, mhzCpufreq
		}
	}
	if v := cpuinfo()["cpu MHz"]; v != "" {
		if mhz, err := strconv.ParseFloat(v, 64); err == nil && mhz > 0 {
			return mhz, "/proc/cpuinfo cpu MHz"
		}
	}
	return 0, ""
}

// llcBytes is the largest cache's size from sysfs (0 when unknown).
func llcBytes() int64 {
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu0/cache/index*")
	var best int64
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "size"))
		if err != nil {
			continue
		}
		if n := parseCacheSize(strings.TrimSpace(string(b))); n > best {
			best = n
		}
	}
	return best
}

// parseCacheSize reads sysfs's "32768K" / "2M" / "1024" forms.
func parseCacheSize(s string) int64 {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n * mult
}

func printMachine(w io.Writer, m machineFigures) {
	fmt.Fprintf(w, "machine: %s; %s/%s; SIMD %s; kernels %s; %d threads", m.CPUModel, runtime.GOOS, runtime.GOARCH,
		strings.Join(m.SIMD, ","), m.Kernels, m.Threads)
	if m.MHz > 0 {
		fmt.Fprintf(w, "; %.0f MHz (%s)", m.MHz, m.MHzFrom)
	}
	if m.LLCBytes > 0 {
		fmt.Fprintf(w, "; LLC %d MiB", m.LLCBytes>>20)
	}
	fmt.Fprintln(w)
	pages := "weight memory"
	if m.HugePages != "" {
		pages += fmt.Sprintf(", %d MiB on huge pages, THP %s", m.HugeMiB, m.HugePages)
	}
	fmt.Fprintf(w, "memory bandwidth (2×%d MiB of %s, %d threads, best of %d): read %.1f GB/s (one stream a thread %.1f, two %.1f), triad %.1f GB/s (its two reads at %.1f); decode is read against %.1f GB/s\n",
		m.BufferMiB, pages, m.Threads, memRepeats*m.Passes, m.ReadGBs, m.Read1GBs, m.Read2GBs, m.TriadGBs, m.TriadGBs*2/3, m.BandwidthGBs)
	fmt.Fprintf(w, "GEMM peak (engine sgemm %d³ float32, best of %d): %.1f GFLOP/s", m.GEMMSize, gemmRepeats*m.Passes, m.GEMMGFlops)
	if m.PeakGFlops > 0 {
		fmt.Fprintf(w, " = %.0f%% of the theoretical %.1f GFLOP/s (%s)", 100*m.GEMMGFlops/m.PeakGFlops, m.PeakGFlops, m.PeakBasis)
	} else if m.PeakBasis != "" {
		fmt.Fprintf(w, "; theoretical peak %s", m.PeakBasis)
	}
	fmt.Fprintln(w)
}
