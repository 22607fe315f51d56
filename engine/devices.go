package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tuft-go/tuft/engine/cuda"
	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// WeightFormat is how the CPU device stores base weight matrices: F32, BF16, Q8_0, Q4_1
// or Q4_K (engine/kern's Frozen; docs/models.md gives their speed and accuracy).
type WeightFormat = kern.WeightFormat

// The CPU weight formats.
const (
	WeightsF32  = kern.F32
	WeightsBF16 = kern.BF16
	WeightsQ8_0 = kern.Q8_0
	WeightsQ4_1 = kern.Q4_1
	WeightsQ4_K = kern.Q4_K
)

// ParseWeightFormat reads a CPU weight format name (engine.cpu_weight_format): f32,
// bf16, q8_0, q4_1 or q4_k.
func ParseWeightFormat(s string) (WeightFormat, error) { return kern.ParseWeightFormat(s) }

// DeviceOptions configure OpenDevice.
type DeviceOptions struct {
	CUDALibDirs     []string // searched first for libcuda and cuBLAS
	CUDAFP32Weights bool     // keep frozen weights in float32 on the GPU
	CUDAMemoryLimit int64    // bytes of GPU memory the engine may hold (0: no limit)
	CUDAGraphs      bool     // decode steps as CUDA graphs (engine.cuda_graphs)
	CUDAGraphsMax   int      // graphs kept per device (engine.cuda_graphs_max)
	CUDANoGEMV      bool     // one-row products on cuBLAS, not gemv_bf16 (engine.cuda_gemv false)
	// CPUWeightFormat is how the CPU stores base weight matrices (the zero value, F32,
	// keeps them as loaded, in float32).
	CPUWeightFormat WeightFormat
	// CPUPrepackBytes is the process's budget of packed weight panels (kern.SetPackBudget,
	// engine.cpu_prepack_bytes); set when a CPU device opens.
	CPUPrepackBytes int64
	// CPUDecodeNoSpin turns off kern.Burst's spinning cores in decode steps
	// (engine.cpu_decode_spin false); set when a CPU device opens.
	CPUDecodeNoSpin bool
}

// ParseDevice checks a device name: "auto", "cpu", "cuda" or "cuda:N".
func ParseDevice(spec string) (kind string, ordinal int, err error) {
	switch {
	case spec == "" || spec == "auto":
		return "auto", 0, nil
	case spec == "cpu":
		return "cpu", 0, nil
	case spec == "cuda":
		return "cuda", 0, nil
	case strings.HasPrefix(spec, "cuda:"):
		n, err := strconv.Atoi(spec[len("cuda:"):])
		if err == nil && n >= 0 {
			return "cuda", n, nil
		}
	}
	return "", 0, fmt.Errorf("device %q: want auto, cpu, cuda or cuda:N", spec)
}

// OpenDevice opens the device spec names (see ParseDevice) and says why it is the one,
// for the log. auto takes the first GPU when this build has CUDA support and the
// machine a usable GPU, and the CPU otherwise; cuda that cannot be opened is an error.
func OpenDevice(spec string, o DeviceOptions) (Device, string, error) {
	kind, ord, err := ParseDevice(spec)
	if err != nil {
		return nil, "", err
	}
	if kind == "cpu" {
		kern.SetPackBudget(o.CPUPrepackBytes)
		kern.SetBurstSpin(!o.CPUDecodeNoSpin)
		return device.NewCPUWeights[float32](o.CPUWeightFormat), "configured", nil
	}
	d, err := cuda.OpenDevice(cuda.Options{Ordinal: ord, LibDirs: o.CUDALibDirs, FP32Weights: o.CUDAFP32Weights, MemoryLimit: o.CUDAMemoryLimit,
		Graphs: o.CUDAGraphs, GraphLimit: o.CUDAGraphsMax, NoGEMV: o.CUDANoGEMV})
	switch {
	case err == nil && kind == "auto":
		return d, "auto: found a usable GPU", nil
	case err == nil:
		return d, "configured", nil
	case kind == "auto":
		why := "no usable GPU (" + err.Error() + ")"
		if errors.Is(err, cuda.ErrNotBuilt) {
			why = "built without CUDA support (-tags cuda)"
		}
		kern.SetPackBudget(o.CPUPrepackBytes)
		kern.SetBurstSpin(!o.CPUDecodeNoSpin)
		return device.NewCPUWeights[float32](o.CPUWeightFormat), "auto: " + why + ", using the CPU", nil
	}
	return nil, "", fmt.Errorf("device %s: %w", spec, err)
}
