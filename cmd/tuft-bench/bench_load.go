package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/cuda"
	"github.com/tuft-go/tuft/internal/cli"
)

// `tuft-bench load` measures loading a model directory: the wall time and this process's
// peak resident memory (its own VmHWM; the process does nothing else, so that is the
// load's peak), beside the size of the weight files. Run it on a fresh process per
// figure, after a first load has put the files in the page cache if the figure is to
// be from the cache.

// loadReport is what `tuft-bench load` prints.
type loadReport struct {
	ModelDir      string  `json:"model_dir"`
	Device        string  `json:"device"`
	WeightBytes   int64   `json:"weight_bytes"`
	LoadS         float64 `json:"load_s"`
	PeakRSSMiB    float64 `json:"peak_rss_mib"`
	DevicePeakMiB float64 `json:"device_peak_mib,omitempty"`
	HostWeights   bool    `json:"host_weights"` // the model keeps a host copy (the CPU's float32 weights)
}

func runBenchLoad(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("bench load", "tuft-bench load --model DIR [--device cpu|cuda[:N]] [--cuda-lib-dirs DIRS] [--json]",
		"Measure loading a model: seconds and this process's peak RSS.")
	dir := fs.String("model", "", "model directory (HuggingFace layout)")
	dev := fs.String("device", "cpu", "device: cpu, cuda, cuda:N or auto")
	libs := fs.String("cuda-lib-dirs", "", "directories searched first for libcuda and cuBLAS")
	jsonOut := fs.Bool("json", false, "print JSON")
	if err := fs.ParseArgs(args); err != nil {
		return err
	}
	if err := fs.CheckArgs(0, 0); err != nil {
		return err
	}
	if *dir == "" {
		return &cli.UsageError{Err: fmt.Errorf("--model is required"), Usage: fs.UsageText()}
	}
	d, why, err := engine.OpenDevice(*dev, engine.DeviceOptions{CUDALibDirs: filepath.SplitList(*libs)})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bench: device %s (%s)\n", d.Name(), why)
	rep := loadReport{ModelDir: *dir, Device: d.Name()}
	if ms, _ := filepath.Glob(filepath.Join(*dir, "*.safetensors")); len(ms) > 0 {
		for _, f := range ms {
			if fi, err := os.Stat(f); err == nil {
				rep.WeightBytes += fi.Size()
			}
		}
	}
	t0 := time.Now()
	m, err := engine.Load(*dir, "bench", engine.OnDevice(d))
	if err != nil {
		return err
	}
	rep.LoadS = time.Since(t0).Seconds()
	rep.PeakRSSMiB = maxRSSMiB()
	rep.HostWeights = m.W != nil
	if s, ok := d.(interface{ Stats() cuda.Stats }); ok {
		rep.DevicePeakMiB = float64(s.Stats().Peak) / (1 << 20)
	}
	runtime.KeepAlive(m)
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(stdout, "%s on %s: %.2f s, %.0f MiB of weight files, peak RSS %.0f MiB", rep.ModelDir, rep.Device,
		rep.LoadS, float64(rep.WeightBytes)/(1<<20), rep.PeakRSSMiB)
	if rep.DevicePeakMiB > 0 {
		fmt.Fprintf(stdout, ", device %.0f MiB", rep.DevicePeakMiB)
	}
	fmt.Fprintln(stdout)
	return nil
}
