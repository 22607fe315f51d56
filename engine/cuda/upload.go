//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/tuft-go/tuft/engine/device"
)

// Weights from a mapped checkpoint: WeightFrom converts a tensor's stored bytes chunk by
// chunk into a page-locked staging buffer (bfloat16 or float32, whichever the device
// keeps) and copies each chunk to the device from there, so a load never holds more than
// the staging buffer of converted data on the host, and the copies run at the DMA rate
// of page-locked memory rather than through the driver's own pageable bounce buffer.

// stageBytes is the size of the staging buffer: large enough that a copy's fixed cost is
// small against its transfer, small enough to be a fixed cost of host memory.
const stageBytes = 64 << 20

var _ device.WeightLoader[float32] = (*Device)(nil)

// WeightFrom implements device.WeightLoader for F32 and BF16 data.
func (d *Device) WeightFrom(dtype string, data []byte, rows, cols int) (device.Tensor[float32], bool) {
	n := rows * cols
	var src int
	switch dtype {
	case "F32":
		src = 4
	case "BF16":
		src = 2
	default:
		return device.Tensor[float32]{}, false
	}
	defer d.exit()
	if !d.enter() || n == 0 {
		return device.Tensor[float32]{}, true
	}
	if len(data) != n*src {
		d.fail(fmt.Errorf("weight of %d %s elements given %d bytes", n, dtype, len(data)))
		return device.Tensor[float32]{}, true
	}
	dst := 4
	if d.bf16 {
		dst = 2
	}
	p := d.get(uintptr(n*dst), false)
	stage := d.staging()
	if p == 0 || stage == nil {
		return device.Tensor[float32]{}, true
	}
	per := stageBytes / dst // elements per chunk
	for i := 0; i < n && d.err == nil; i += per {
		k := min(per, n-i)
		convertWeights(stage[:k*dst], data[i*src:(i+k)*src], src == 2, d.bf16)
		d.fail(d.drv.check("cuMemcpyHtoD", call(d.drv.cuMemcpyHtoD, p+uintptr(i*dst), uintptr(unsafe.Pointer(&stage[0])), uintptr(k*dst))))
	}
	return device.OnDevice[float32](p, n, d.bf16), true
}

// EndWeights implements device.WeightLoader: it frees the staging buffer.
func (d *Device) EndWeights() {
	defer d.exit()
	d.enter() // free even after an error
	if d.stage != nil {
		d.fail(d.drv.check("cuMemFreeHost", call(d.drv.cuMemFreeHost, uintptr(unsafe.Pointer(&d.stage[0])))))
		d.stage = nil
	}
}

// staging returns the page-locked staging buffer, allocated on first use (nil after an
// error). The device's lock is held.
func (d *Device) staging() []byte {
	if d.stage == nil && d.err == nil {
		out := newOut()
		r := call(d.drv.cuMemAllocHost, out.at(0), stageBytes)
		out.keep()
		if d.fail(d.drv.check("cuMemAllocHost", r)) {
			d.stage = unsafe.Slice((*byte)(cptr(out.uptr(0))), stageBytes)
		}
	}
	return d.stage
}

// convertWeights writes src (bfloat16 when fromBF16, else float32) into dst as bfloat16
// when narrow, else float32, rounding float32 to bfloat16 to nearest even. The work is
// split over the cores: reading a mapped checkpoint is bound by page faults and copies.
func convertWeights(dst, src []byte, fromBF16, narrow bool) {
	sw, dw := 4, 4
	if fromBF16 {
		sw = 2
	}
	if narrow {
		dw = 2
	}
	n := len(src) / sw
	parts := min(runtime.GOMAXPROCS(0), max(1, n>>20))
	var wg sync.WaitGroup
	for p := range parts {
		a, b := n*p/parts, n*(p+1)/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, o := src[a*sw:b*sw], dst[a*dw:b*dw]
			switch {
			case sw == dw:
				copy(o, s)
			case fromBF16: // to float32: the bfloat16 bits are the high half
				for i := 0; i < b-a; i++ {
					binary.LittleEndian.PutUint32(o[4*i:], uint32(binary.LittleEndian.Uint16(s[2*i:]))<<16)
				}
			default: // float32 to bfloat16
				for i := 0; i < b-a; i++ {
					binary.LittleEndian.PutUint16(o[2*i:], toBF16(math.Float32frombits(binary.LittleEndian.Uint32(s[4*i:]))))
				}
			}
		}()
	}
	wg.Wait()
}
