package backend

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine/cuda"
)

// Where no GPU can be used (CI: no driver, or a build without the cuda tag), device
// auto loads the models on the CPU and logs why; device cuda refuses to start, saying
// what is missing.
func TestLoadModelsChoosesDeviceAndSaysWhy(t *testing.T) {
	cfg := config.Default(t.TempDir())
	cfg.Engine.CUDALibDirs = []string{t.TempDir()} // nothing there: only the system's driver could load
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	models, _, err := LoadModels(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	line := logs.String()
	if !strings.Contains(line, "engine device") || !strings.Contains(line, "reason=") {
		t.Fatalf("no device log line: %q", line)
	}
	if models[0].Device().Name() == "cpu" {
		want := "built without CUDA support"
		if cuda.Built {
			want = "no usable GPU"
		}
		if !strings.Contains(line, "device=cpu") || !strings.Contains(line, want) {
			t.Fatalf("auto fell back to the CPU without saying %q: %q", want, line)
		}
		// The CPU stores the base weights in engine.cpu_weight_format (bf16 by default)
		// and keeps no float32 copy.
		if !strings.Contains(line, "engine.cpu_weight_format=bf16") || models[0].W != nil {
			t.Fatalf("the CPU's weight format is not the configured bf16: %q (float32 copy kept: %v)", line, models[0].W != nil)
		}
	} else {
		t.Logf("a GPU was found: %s", line)
	}

	cfg.Engine.Device = "cuda"
	_, _, err = LoadModels(cfg, log)
	if models[0].Device().Name() != "cpu" {
		return // a GPU is present: cuda opens
	}
	if err == nil || !strings.Contains(err.Error(), "engine.device") {
		t.Fatalf("device cuda without a usable GPU: %v", err)
	}
	if !cuda.Built && !strings.Contains(err.Error(), "-tags cuda") {
		t.Fatalf("the error does not say how to get CUDA support: %v", err)
	}
	if cuda.Built && !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Fatalf("the error does not name the missing driver: %v", err)
	}
	t.Logf("device cuda: %v", err)
}
