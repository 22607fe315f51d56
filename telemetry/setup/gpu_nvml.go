//go:build linux && cgo && nvml

package setup

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Built with `-tags nvml` (and cgo), the resource gauges read GPUs through NVML. NVML is
// loaded at run time (dlopen of libnvidia-ml.so.1): without a driver or a GPU, Init fails
// and the GPU gauges are skipped with one log line.
func init() { gpuFactory = newNVMLSource }

type nvmlDevice struct {
	id  string
	dev nvml.Device
}

type nvmlSource struct{ devs []nvmlDevice }

func nvmlError(what string, ret nvml.Return) error {
	return fmt.Errorf("GPU metrics disabled: NVML %s: %s", what, nvml.ErrorString(ret))
}

func newNVMLSource() (GPUSource, error) {
	// Every other NVML call after a failed Init aborts the process (an unresolved
	// symbol), so nothing else is called unless Init succeeded.
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil, nvmlError("init", ret)
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		nvml.Shutdown()
		return nil, nvmlError("device count", ret)
	}
	if n == 0 {
		nvml.Shutdown()
		return nil, errors.New("GPU metrics disabled: NVML found no GPU")
	}
	s := &nvmlSource{}
	for i := 0; i < n; i++ {
		dev, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			nvml.Shutdown()
			return nil, nvmlError(fmt.Sprintf("device %d", i), ret)
		}
		// gpu_id is the index, the name CUDA_VISIBLE_DEVICES and nvidia-smi use.
		s.devs = append(s.devs, nvmlDevice{id: fmt.Sprint(i), dev: dev})
	}
	return s, nil
}

// Sample implements GPUSource with NVML's oldest, universally present queries.
func (s *nvmlSource) Sample() ([]GPUSample, error) {
	out := make([]GPUSample, 0, len(s.devs))
	for _, d := range s.devs {
		u, ret := d.dev.GetUtilizationRates()
		if ret != nvml.SUCCESS {
			return nil, nvmlError("utilization of GPU "+d.id, ret)
		}
		m, ret := d.dev.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return nil, nvmlError("memory of GPU "+d.id, ret)
		}
		out = append(out, GPUSample{ID: d.id, UtilizationPct: float64(u.Gpu),
			MemoryUsedBytes: int64(m.Used), MemoryTotalBytes: int64(m.Total)})
	}
	return out, nil
}

// Close implements GPUSource.
func (s *nvmlSource) Close() { nvml.Shutdown() }
