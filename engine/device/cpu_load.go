package device

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tuft-go/tuft/engine/kern"
)

// Loading frozen matrices on the CPU from their stored bytes (safetensors F32, BF16 or
// F16). In a weight format narrower than float32 a matrix is built row by row from the
// mapping (kern.NewFrozenRows), so no float32 copy of a tensor ever exists: the peak while
// loading is the model in its format plus a row per worker. With float32 weights the
// float32 values are the model, which the loader builds as before (ok is false).

var _ WeightLoader[float32] = (*CPU[float32])(nil)

// WeightFrom implements WeightLoader for F32, BF16 and F16 data when the device stores
// float32 matrices narrower than float32.
func (c *CPU[T]) WeightFrom(dtype string, data []byte, rows, cols int) (Tensor[T], bool) {
	if _, isF32 := any(c).(*CPU[float32]); !isF32 || c.format == kern.F32 {
		return Tensor[T]{}, false
	}
	width := map[string]int{"F32": 4, "BF16": 2, "F16": 2}[dtype]
	if width == 0 || rows <= 0 || cols <= 0 || len(data) != rows*cols*width {
		// The caller's float32 path reports a wrong size with the tensor's name.
		return Tensor[T]{}, false
	}
	row := func(dst []float32, r int) {
		b := data[r*cols*width : (r+1)*cols*width]
		switch dtype {
		case "F32":
			for i := range dst {
				dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
		case "BF16":
			for i := range dst {
				dst[i] = kern.FromBF16(binary.LittleEndian.Uint16(b[2*i:]))
			}
		case "F16":
			for i := range dst {
				dst[i] = kern.FromF16(binary.LittleEndian.Uint16(b[2*i:]))
			}
		default:
			panic(fmt.Sprintf("device: WeightFrom: dtype %s", dtype))
		}
	}
	return FrozenMatrix[T](kern.NewFrozenRows(rows, cols, c.format, row)), true
}

// EndWeights implements WeightLoader: the CPU keeps nothing between weights.
func (*CPU[T]) EndWeights() {}
