//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"errors"

	"github.com/tuft-go/tuft/engine/device"
)

// Built reports whether this binary has the CUDA device (the cuda build tag).
const Built = true

// ErrNotBuilt is OpenDevice's error in builds without the cuda tag (never returned here).
var ErrNotBuilt = errors.New("this tuft was built without CUDA support")

// OpenDevice is Open, as a device.Device.
func OpenDevice(o Options) (device.Device[float32], error) {
	d, err := Open(o)
	if err != nil {
		return nil, err
	}
	return d, nil
}
