//go:build cuda

package engine

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine/safetensors"
)

// bf16Copy writes a copy of model directory src whose weights are stored as bfloat16.
func bf16Copy(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	for _, f := range []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sf, err := safetensors.ReadFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, x := range sf.Tensors {
		v, err := x.Float32()
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.FromFloat32AsBF16(x.Name, x.Shape, v))
	}
	if err := safetensors.WriteFile(filepath.Join(dst, "model.safetensors"), ts, sf.Metadata); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestGPUStreamedLoadEqualsHostUpload: a model streamed from the mapped file to the GPU
// (WeightFrom: F32 and BF16 sources, bfloat16 and float32 device weights) computes
// bit-identical losses to the same weights expanded on the host and uploaded, and keeps
// no host copy.
func TestGPUStreamedLoadEqualsHostUpload(t *testing.T) {
	tiny := filepath.Join(t.TempDir(), "tiny")
	if err := WritePreset("tiny", tiny); err != nil {
		t.Fatal(err)
	}
	req := ceRequest([]int32{3, 4, 5, 6, 7, 8, 9, 10, 11})
	loss := func(m *Model) float64 {
		t.Helper()
		a, err := m.NewAdapter(LoraConfig{Rank: 4, Seed: 1, TrainAttn: true, TrainMLP: true})
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.ForwardBackward(context.Background(), a, req)
		if err != nil {
			t.Fatal(err)
		}
		return res.Metrics["loss:sum"]
	}
	for _, mode := range gpuModes {
		for _, src := range []struct{ name, dir string }{{"f32-file", tiny}, {"bf16-file", bf16Copy(t, tiny)}} {
			t.Run(mode.name+"/"+src.name, func(t *testing.T) {
				streamed, err := Load(src.dir, "s", OnDevice(openGPU(t, mode.fp32)))
				if err != nil {
					t.Fatal(err)
				}
				if streamed.W != nil {
					t.Fatal("a model streamed to the GPU kept a host copy of its weights")
				}
				host, err := Load(src.dir, "h")
				if err != nil {
					t.Fatal(err)
				}
				uploaded, err := NewModel("u", host.Cfg, host.W, nil, OnDevice(openGPU(t, mode.fp32)))
				if err != nil {
					t.Fatal(err)
				}
				if a, b := loss(streamed), loss(uploaded); a != b {
					t.Fatalf("streamed load: loss %v, host upload: %v", a, b)
				}
			})
		}
	}
}

// TestGPULoadPeakRSS loads smollm2-135m-shape on the GPU in a child process: the host
// never holds the model, so the peak is the device's copy where device memory is host
// memory (the CPU emulation: 2 bytes per parameter), the largest tensor and a fixed
// amount — on a real GPU the driver and cuBLAS take more of their own, up to 1 GiB.
func TestGPULoadPeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	d := openGPU(t, false)
	kept := int64(0)
	dir := rssModel(t)
	params, largest := modelBytes(t, dir)
	if strings.Contains(d.Name(), "CPU emulation") {
		kept = 2 * params
	} else {
		kept = 1<<30 - loadRSSFixedMiB<<20
	}
	checkPeak(t, loadPeakRSS(t, dir, "cuda"), kept, largest, "device copy")
}
