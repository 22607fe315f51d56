package device_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// A matrix the CPU builds from its stored bytes (WeightFrom, row by row) is the one it
// builds from the float32 values (WeightMatrix), bit for bit, for every stored dtype and
// weight format, including rows too short for a block format (stored as bf16); with
// float32 weights, or bytes of the wrong size, it declines.
func TestCPUWeightFromEqualsWeightMatrix(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, shape := range [][2]int{{7, 64}, {33, 96}, {5, 40}, {1, 32}} {
		rows, cols := shape[0], shape[1]
		vals := make([]float32, rows*cols)
		for i := range vals {
			vals[i] = float32(rng.NormFloat64() * 0.05)
		}
		for _, dtype := range []string{"F32", "BF16", "F16"} {
			data, want := encode(dtype, vals)
			for _, f := range []kern.WeightFormat{kern.BF16, kern.Q8_0, kern.Q4_1} {
				d := device.NewCPUWeights[float32](f)
				got, ok := d.WeightFrom(dtype, data, rows, cols)
				if !ok {
					t.Fatalf("%s into %s: declined", dtype, f)
				}
				ref := d.WeightMatrix(want, rows, cols)
				g, r := got.Frozen(), ref.Frozen()
				if g == nil || r == nil || g.Format != r.Format || g.Bytes() != r.Bytes() {
					t.Fatalf("%s into %s %dx%d: got %+v, want %+v", dtype, f, rows, cols, g, r)
				}
				a, b := make([]float32, cols), make([]float32, cols)
				for i := 0; i < rows; i++ {
					g.Row(a, i)
					r.Row(b, i)
					for j := range a {
						if math.Float32bits(a[j]) != math.Float32bits(b[j]) {
							t.Fatalf("%s into %s %dx%d: [%d,%d] = %g, want %g", dtype, f, rows, cols, i, j, a[j], b[j])
						}
					}
				}
			}
		}
		data, _ := encode("BF16", vals)
		if _, ok := device.NewCPUWeights[float32](kern.F32).WeightFrom("BF16", data, rows, cols); ok {
			t.Error("a CPU keeping float32 weights took stored bytes (its float32 values are the model)")
		}
		if _, ok := device.NewCPUWeights[float32](kern.BF16).WeightFrom("BF16", data[:len(data)-2], rows, cols); ok {
			t.Error("took bytes of the wrong size")
		}
		if _, ok := device.NewCPUWeights[float32](kern.BF16).WeightFrom("I8", data, rows, cols); ok {
			t.Error("took a dtype that is not a float type")
		}
	}
}

// encode stores vals as dtype, little-endian, and returns the bytes and the float32
// values they hold.
func encode(dtype string, vals []float32) ([]byte, []float32) {
	held := make([]float32, len(vals))
	switch dtype {
	case "F32":
		b := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		copy(held, vals)
		return b, held
	case "BF16", "F16":
		b := make([]byte, 2*len(vals))
		for i, v := range vals {
			h := kern.ToBF16(v)
			held[i] = kern.FromBF16(h)
			if dtype == "F16" {
				h = kern.ToF16(v)
				held[i] = kern.FromF16(h)
			}
			binary.LittleEndian.PutUint16(b[2*i:], h)
		}
		return b, held
	}
	panic(dtype)
}
