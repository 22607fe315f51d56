//go:build !(cuda && linux && (amd64 || arm64))

package cuda

import (
	"errors"

	"github.com/tuft-go/tuft/engine/device"
)

// Built reports whether this binary has the CUDA device (the cuda build tag).
const Built = false

// ErrNotBuilt is OpenDevice's error in builds without the cuda tag.
var ErrNotBuilt = errors.New("this tuft was built without CUDA support (build with -tags cuda, on linux/amd64 or linux/arm64)")

// OpenDevice reports ErrNotBuilt.
func OpenDevice(Options) (device.Device[float32], error) { return nil, ErrNotBuilt }
