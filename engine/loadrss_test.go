package engine

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine/safetensors"
)

// Loading streams (loadstream.go): the host's peak resident memory while loading is what
// the device keeps plus about one tensor, not the file plus a float32 copy of it. The
// load runs in a child process that reports its own VmHWM: a high-water mark of this
// process would include everything the tests before it did, and ru_maxrss is inherited
// across fork and exec.

// loadRSSFixedMiB is what a load may take beyond the model's resident form and its
// largest tensor: the test binary and Go runtime, the tokenizer, RoPE tables, the
// GPU's staging buffer (64 MiB). Loading the old way (the whole file read, then a
// float32 copy) exceeds the bound by the file's size, 270 MB here.
const loadRSSFixedMiB = 160

// loadPeakRSS loads dir in a child process on the device open(…) gives and returns its
// VmHWM in bytes.
func loadPeakRSS(t *testing.T, dir, device string) int64 {
	t.Helper()
	return loadPeakRSSFormat(t, dir, device, "")
}

// loadPeakRSSFormat is loadPeakRSS with the CPU storing its matrices in format (""
// leaves DeviceOptions' zero value: f32).
func loadPeakRSSFormat(t *testing.T, dir, device, format string) int64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLoadPeakRSSChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TUFT_LOAD_RSS_DIR="+dir, "TUFT_LOAD_RSS_DEVICE="+device, "TUFT_LOAD_RSS_FORMAT="+format)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child load: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "load-vmhwm-bytes "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	t.Fatalf("child printed no VmHWM:\n%s", out)
	return 0
}

// TestLoadPeakRSSChild is the child of loadPeakRSS (skipped when run directly).
func TestLoadPeakRSSChild(t *testing.T) {
	dir := os.Getenv("TUFT_LOAD_RSS_DIR")
	if dir == "" {
		t.Skip("run by TestLoadPeakRSS")
	}
	o := DeviceOptions{CUDALibDirs: filepath.SplitList(os.Getenv("TUFT_CUDA_LIB_DIRS"))}
	if f := os.Getenv("TUFT_LOAD_RSS_FORMAT"); f != "" {
		wf, err := ParseWeightFormat(f)
		if err != nil {
			t.Fatal(err)
		}
		o.CPUWeightFormat = wf
	}
	dev, _, err := OpenDevice(os.Getenv("TUFT_LOAD_RSS_DEVICE"), o)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir, "rss", OnDevice(dev))
	if err != nil {
		t.Fatal(err)
	}
	hwm, err := vmHWM()
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(m)
	fmt.Printf("load-vmhwm-bytes %d\n", hwm)
}

// vmHWM reads this process's peak resident set size from /proc/self/status.
func vmHWM() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kib << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}

// modelBytes is what a model's weights take in the file, and its largest tensor.
func modelBytes(t *testing.T, dir string) (params, largest int64) {
	t.Helper()
	m, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, x := range m.Tensors {
		params += int64(x.Elements())
		largest = max(largest, int64(len(x.Data)))
	}
	return params, largest
}

// TestLoadPeakRSS loads smollm2-135m-shape (270 MB of bfloat16) on the CPU, where the
// kernels compute in float32 so the float32 expansion is the model: peak ≤ 4 bytes per
// parameter + the largest tensor + loadRSSFixedMiB.
func TestLoadPeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	if raceOn {
		t.Skip("the race detector's shadow memory is in the RSS")
	}
	dir := rssModel(t)
	params, largest := modelBytes(t, dir)
	checkPeak(t, loadPeakRSS(t, dir, "cpu"), 4*params, largest, "float32 weights")
}

// TestLoadPeakRSSNarrowCPU loads smollm2-135m-shape on a CPU storing its matrices as
// bf16 (the default engine.cpu_weight_format): each matrix is built row by row from the
// mapped bytes (device.WeightLoader) and no tensor exists in float32, so the peak is the
// model's 2 bytes per parameter plus its largest tensor and a fixed part of
// narrowCPUFixedMiB — which the old way (each tensor expanded to float32 first: 394 MiB
// against 275 here) exceeds.
func TestLoadPeakRSSNarrowCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	if raceOn {
		t.Skip("the race detector's shadow memory is in the RSS")
	}
	dir := rssModel(t)
	params, largest := modelBytes(t, dir)
	checkPeakFixed(t, loadPeakRSSFormat(t, dir, "cpu", "bf16"), 2*params, largest, narrowCPUFixedMiB, "bfloat16 weights")
}

// narrowCPUFixedMiB is loadRSSFixedMiB without the GPU's staging buffer and with the
// tokenizer and runtime measured at about 20 MiB: what a CPU load in a narrow format may
// take beyond the model and its largest tensor.
const narrowCPUFixedMiB = 64

// checkPeak fails when peak > kept + largest + loadRSSFixedMiB.
func checkPeak(t *testing.T, peak, kept, largest int64, what string) {
	t.Helper()
	checkPeakFixed(t, peak, kept, largest, loadRSSFixedMiB, what)
}

// checkPeakFixed fails when peak > kept + largest + fixed MiB.
func checkPeakFixed(t *testing.T, peak, kept, largest, fixed int64, what string) {
	t.Helper()
	bound := kept + largest + fixed<<20
	t.Logf("peak RSS while loading: %.0f MiB (%s %.0f MiB + largest tensor %.0f MiB + %d MiB fixed = bound %.0f MiB)",
		float64(peak)/(1<<20), what, float64(kept)/(1<<20), float64(largest)/(1<<20), fixed, float64(bound)/(1<<20))
	if peak > bound {
		t.Fatalf("peak RSS while loading %d MiB > bound %d MiB", peak>>20, bound>>20)
	}
}

var rssModelDir string

// rssModel writes smollm2-135m-shape once per test binary.
func rssModel(t *testing.T) string {
	t.Helper()
	if rssModelDir == "" {
		dir, err := os.MkdirTemp("", "tuft-rss-")
		if err != nil {
			t.Fatal(err)
		}
		if err := WritePreset("smollm2-135m-shape", dir); err != nil {
			os.RemoveAll(dir)
			t.Fatal(err)
		}
		rssModelDir = dir
	}
	return rssModelDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if rssModelDir != "" {
		os.RemoveAll(rssModelDir)
	}
	os.Exit(code)
}
