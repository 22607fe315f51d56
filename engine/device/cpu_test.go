package device_test

import (
	"testing"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/device/devicetest"
	"github.com/tuft-go/tuft/engine/kern"
)

// The CPU device in float32 passes the conformance suite against itself in float64.
func TestCPUConformance(t *testing.T) {
	devicetest.Run(t, device.NewCPU[float32](), devicetest.Float32)
}

// Products that share an activation (MatMulNTShared) equal MatMulNT's, bit for bit, with
// the weights in every CPU weight format.
func TestCPUSharedEveryFormat(t *testing.T) {
	for _, f := range []kern.WeightFormat{kern.F32, kern.BF16, kern.Q8_0, kern.Q4_1, kern.Q4_K} {
		t.Run(f.String(), func(t *testing.T) {
			tol := devicetest.Float32
			tol.Weight = 0.1 // 4-bit weights: the reference multiplies the unquantised values
			devicetest.Shared(t, device.NewCPUWeights[float32](f), tol)
		})
	}
}
