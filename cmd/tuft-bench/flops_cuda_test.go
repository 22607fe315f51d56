//go:build cuda

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tuft-go/tuft/engine"
)

// The card's GEMM probe runs its bfloat16 products (no cast) and reports a rate; on the
// CPU emulation (TUFT_CUDA_LIB_DIRS) a small one.
func TestDeviceGEMMPeak(t *testing.T) {
	d, _, err := engine.OpenDevice("cuda", engine.DeviceOptions{CUDALibDirs: filepath.SplitList(os.Getenv("TUFT_CUDA_LIB_DIRS"))})
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	defer d.(interface{ Close() }).Close()
	tf, err := deviceGEMMPeak(d, 64)
	if err != nil || !(tf > 0) {
		t.Fatalf("deviceGEMMPeak: %v TFLOP/s, %v", tf, err)
	}
	r := &benchReport{TrainFLOPs: 2e12, Go: benchSide{DeviceGEMMTFlops: 400}}
	r.Go.Train.MedianS = 0.01
	gemmFraction(&r.Go, r)
	if f := r.Go.Train.GEMMFraction; f < 0.4999 || f > 0.5001 {
		t.Fatalf("2 TFLOP in 10 ms against 400 TFLOP/s: share %v, want 0.5", f)
	}
}
