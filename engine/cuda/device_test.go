//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine/device/devicetest"
)

// openOrSkip opens GPU 0, or checks that the failure says what is missing and skips
// (fails with TUFT_REQUIRE_GPU set).
func openOrSkip(t *testing.T, o Options) *Device {
	t.Helper()
	o.LibDirs = testLibDirs()
	d, err := Open(o)
	if err == nil {
		t.Logf("device: %s", d.Name())
		return d
	}
	msg := err.Error()
	if !strings.Contains(msg, "no NVIDIA driver: libcuda.so.1 not found") && !errors.Is(err, errNoDevice) &&
		!strings.Contains(msg, "cuInit") && !strings.Contains(msg, "cuBLAS") {
		t.Fatalf("Open failed without naming what is missing: %v", err)
	}
	if os.Getenv("TUFT_REQUIRE_GPU") != "" {
		t.Fatalf("TUFT_REQUIRE_GPU is set and no GPU opened: %v", err)
	}
	t.Skipf("no GPU: %v", err)
	return nil
}

// Without a driver (CI), Open says so; with one, a GPU that does not exist is named.
func TestOpenErrors(t *testing.T) {
	_, err := Open(Options{LibDirs: []string{t.TempDir()}})
	if err != nil {
		t.Logf("Open: %v", err)
		if !strings.Contains(err.Error(), "libcuda.so.1") && !strings.Contains(err.Error(), "cu") {
			t.Fatalf("Open's error does not name the driver: %v", err)
		}
		return
	}
	if _, err := Open(Options{Ordinal: 4096, LibDirs: testLibDirs()}); err == nil || !strings.Contains(err.Error(), "cuda:4096") {
		t.Fatalf("opening GPU 4096: %v", err)
	}
}

func TestConformance(t *testing.T) {
	t.Run("fp32-weights", func(t *testing.T) {
		devicetest.Run(t, openOrSkip(t, Options{FP32Weights: true}), devicetest.Float32)
	})
	t.Run("bf16-weights", func(t *testing.T) {
		d := openOrSkip(t, Options{})
		tol := devicetest.BF16Weights
		if !d.bf16 {
			tol = devicetest.Float32
		}
		devicetest.Run(t, d, tol)
	})
}

// testLibDirs are the directories in TUFT_CUDA_LIB_DIRS (for example the CPU emulation
// that emu/build.sh makes).
func testLibDirs() []string { return filepath.SplitList(os.Getenv("TUFT_CUDA_LIB_DIRS")) }
