package engine

import (
	"runtime"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// TestCPUDecodeSpinOption: a CPU device opened with CPUDecodeNoSpin (engine.cpu_decode_spin
// false) runs its bursts without partners, and one opened without it has them.
func TestCPUDecodeSpinOption(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	defer kern.SetBurstSpin(true)
	for _, noSpin := range []bool{true, false} {
		dev, _, err := OpenDevice("cpu", DeviceOptions{CPUDecodeNoSpin: noSpin})
		if err != nil {
			t.Fatal(err)
		}
		b, ok := dev.(device.Burster)
		if !ok {
			t.Fatal("the CPU device is not a device.Burster")
		}
		var bursting bool
		b.Burst(func() { bursting = kern.Bursting() })
		if bursting == noSpin {
			t.Fatalf("CPUDecodeNoSpin %v: bursting = %v", noSpin, bursting)
		}
	}
}
