//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"fmt"

	"github.com/tuft-go/tuft/engine/device"
)

// The optimizer's operations: sums of squares and AdamW, one tensor or many at once.

// SumSquares implements device.Device: one sumsq_multi launch over every tensor.
func (d *Device) SumSquares(xs []device.Tensor[float32]) float64 {
	defer d.exit()
	if !d.enter() {
		return 0
	}
	acc := d.get(8, true)
	if len(xs) > 0 {
		tab, longest := tensorTable(xs)
		tp := uploadSlice(d, tab)
		gx, gy := multiGrid(len(xs), longest)
		d.launch("sumsq_multi", gx, gy, 256, uint64(tp), iArg(len(xs)), uint64(acc))
		d.put(tp)
	}
	out := make([]float64, 1)
	downloadSlice(d, out, acc)
	d.put(acc)
	return out[0]
}

// tensorTable is what the many-tensor kernels read: per tensor its length and the
// addresses of ws[i] and of each of rest's i-th tensor (5 slots; those not given stay 0),
// and the longest length.
func tensorTable(ws []device.Tensor[float32], rest ...[]device.Tensor[float32]) ([]int64, int) {
	tab, longest := make([]int64, 5*len(ws)), 0
	for i, w := range ws {
		tab[5*i], tab[5*i+1] = int64(w.Len()), int64(w.Ptr())
		for j, r := range rest {
			if r[i].Len() != w.Len() {
				panic(fmt.Sprintf("cuda: tensor %d of a many-tensor operation has lengths %d and %d", i, w.Len(), r[i].Len()))
			}
			tab[5*i+2+j] = int64(r[i].Ptr())
		}
		longest = max(longest, w.Len())
	}
	return tab, longest
}

// multiGrid is the grid of a many-tensor kernel: blocks of 256 over the longest tensor
// (at most 64, then a block strides), one row of them per tensor.
func multiGrid(n, longest int) (int, int) {
	return max(1, min((longest+255)/256, 64)), min(n, 65535)
}

// AdamWIfFinite implements device.AdamWFinite: one launch computes every tensor's update
// and only flags a non-finite result, one download reads the flag, one launch applies the
// updates. An adapter's hundreds of tensors are three operations, where the engine would
// otherwise keep a copy of the state to put back.
func (d *Device) AdamWIfFinite(ws, gs, ms, vs []device.Tensor[float32], s *device.AdamStep) bool {
	defer d.exit()
	if !d.enter() {
		return false
	}
	if len(ws) == 0 {
		return true
	}
	bad := d.get(4, true)
	defer d.put(bad)
	d.adamw(ws, gs, ms, vs, s, bad)
	flag := make([]int32, 1)
	downloadSlice(d, flag, bad)
	if d.err != nil || flag[0] != 0 {
		return false
	}
	d.adamw(ws, gs, ms, vs, s, 0)
	return d.err == nil
}

// AdamW implements device.Device: adamw_multi over one tensor.
func (d *Device) AdamW(w, g, m, v device.Tensor[float32], s *device.AdamStep) {
	defer d.exit()
	if d.enter() {
		d.adamw([]device.Tensor[float32]{w}, []device.Tensor[float32]{g}, []device.Tensor[float32]{m}, []device.Tensor[float32]{v}, s, 0)
	}
}

// adamw launches adamw_multi over the tensors: with a flag address (bad ≠ 0) it only checks,
// setting the flag where a result would not be finite; with none it applies the updates.
func (d *Device) adamw(ws, gs, ms, vs []device.Tensor[float32], s *device.AdamStep, bad uintptr) {
	tab, longest := tensorTable(ws, gs, ms, vs)
	tp := uploadSlice(d, tab)
	gx, gy := multiGrid(len(ws), longest)
	check := 0
	if bad != 0 {
		check = 1
	}
	d.launch("adamw_multi", gx, gy, 256, uint64(tp), iArg(len(ws)), fArg(s.Clip), fArg(s.Decay), fArg(s.B1), fArg(s.B2),
		fArg(s.StepSize), fArg(s.BC2Sqrt), fArg(s.Eps), iArg(check), uint64(bad))
	d.put(tp)
}
