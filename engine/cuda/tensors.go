//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"math"
	"runtime"
	"unsafe"

	"github.com/tuft-go/tuft/engine/device"
)

// Device memory: tensors, their transfers, and bfloat16 weights.

// Alloc implements device.Device.
func (d *Device) Alloc(n int) device.Tensor[float32] {
	defer d.exit()
	if !d.enter() || n == 0 {
		return device.Tensor[float32]{}
	}
	return device.OnDevice[float32](d.get(uintptr(n)*4, true), n, false)
}

// AllocBF16 implements device.BF16Operands: n bfloat16 elements (zeroed) where weights
// are bfloat16, the empty tensor where they are float32.
func (d *Device) AllocBF16(n int) device.Tensor[float32] {
	defer d.exit()
	if !d.enter() || n == 0 || !d.bf16 {
		return device.Tensor[float32]{}
	}
	return device.OnDevice[float32](d.get(uintptr(n)*2, true), n, true)
}

// Free implements device.Device.
func (d *Device) Free(t device.Tensor[float32]) {
	defer d.exit()
	d.enter()
	d.put(t.Ptr())
}

// AllocInts implements device.Device.
func (d *Device) AllocInts(n int) device.Tensor[int32] {
	defer d.exit()
	if !d.enter() || n == 0 {
		return device.Tensor[int32]{}
	}
	return device.OnDevice[int32](d.get(uintptr(n)*4, true), n, false)
}

// FreeInts implements device.Device.
func (d *Device) FreeInts(t device.Tensor[int32]) {
	defer d.exit()
	d.enter()
	d.put(t.Ptr())
}

// Upload implements device.Device.
func (d *Device) Upload(dst device.Tensor[float32], src []float32) {
	defer d.exit()
	if !d.enter() || len(src) == 0 {
		return
	}
	d.toDevice(dst.Ptr(), unsafe.Pointer(&src[0]), uintptr(len(src))*4)
	runtime.KeepAlive(src)
}

// Download implements device.Device.
func (d *Device) Download(dst []float32, src device.Tensor[float32]) {
	defer d.exit()
	if d.enter() {
		downloadSlice(d, dst, src.Ptr())
	}
}

// Ints implements device.Device.
func (d *Device) Ints(src []int32) device.Tensor[int32] {
	defer d.exit()
	if !d.enter() || len(src) == 0 {
		return device.Tensor[int32]{}
	}
	return device.OnDevice[int32](uploadSlice(d, src), len(src), false)
}

// Copy implements device.Device.
func (d *Device) Copy(dst, src device.Tensor[float32]) {
	defer d.exit()
	if d.enter() && src.Len() > 0 && d.record(opCopy, uint64(dst.Ptr()), uint64(src.Ptr()), uint64(src.Len())*uint64(src.ElemSize())) {
		d.fail(d.drv.check("cuMemcpyDtoDAsync", call(d.drv.cuMemcpyDtoDAsync, dst.Ptr(), src.Ptr(), uintptr(src.Len())*src.ElemSize(), d.cs)))
	}
}

// Weight implements device.Device: bfloat16 (rounded to nearest even) on GPUs of compute
// capability 8.0 and later unless Options.FP32Weights, float32 otherwise.
func (d *Device) Weight(src []float32) device.Tensor[float32] {
	defer d.exit()
	if !d.enter() || len(src) == 0 {
		return device.Tensor[float32]{}
	}
	if !d.bf16 {
		return device.OnDevice[float32](uploadSlice(d, src), len(src), false)
	}
	h := make([]uint16, len(src))
	for i, v := range src {
		h[i] = toBF16(v)
	}
	return device.OnDevice[float32](uploadSlice(d, h), len(src), true)
}

// toBF16 rounds to the nearest bfloat16 (ties to even); NaN stays NaN.
func toBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16 | 0x40)
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}
