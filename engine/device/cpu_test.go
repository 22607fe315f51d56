package device_test

import (
	"testing"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/device/devicetest"
)

// The CPU device in float32 passes the conformance suite against itself in float64.
func TestCPUConformance(t *testing.T) {
	devicetest.Run(t, device.NewCPU[float32](), devicetest.Float32)
}
