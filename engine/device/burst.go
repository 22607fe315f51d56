package device

import "github.com/tuft-go/tuft/engine/kern"

// Burster is a device that runs a stretch of short operations faster when told they
// come together: the CPU keeps its other cores spinning through the stretch instead of
// waking them for each product (kern.Burst). The engine's decode steps use it when the
// device has it; f runs on the calling goroutine either way.
type Burster interface {
	Burst(f func())
}

var _ Burster = (*CPU[float32])(nil)

// Burst implements Burster with kern.Burst.
func (*CPU[T]) Burst(f func()) { kern.Burst(f) }
