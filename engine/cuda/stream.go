//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"unsafe"
)

// Two streams: the compute stream (d.cs) runs every kernel, cuBLAS product and memset;
// the copy stream (d.xs) runs the small transfers of a step (token ids, positions, slot
// and block tables, LoRA run tables in; sampled tokens, log-probabilities, gathered
// values out) from and to a page-locked buffer, so that an upload no longer waits for
// the device to finish what is queued (a synchronous cuMemcpy from pageable memory
// does). Two events order them:
//
//   - before a copy, the copy stream waits for the compute stream's work queued so far
//     (evC): the destination may be a block that queued kernels still read, freed by the
//     engine and handed out again by the caching allocator;
//   - after an upload, the compute stream waits for the copy (evX), so the kernels queued
//     next read the new values.
//
// A download waits for its copy (cuStreamSynchronize of the copy stream) before the host
// reads the page-locked buffer. Transfers larger than half the buffer (weights, adapters,
// whole logits) stay synchronous cuMemcpy calls on the legacy default stream, which waits
// for both streams (they are created blocking).

// pinBytes is each half of the page-locked buffer: uploads are laid one after another
// in the first half until it is full (then the copy stream is waited for), a download
// uses the second.
const pinBytes = 1 << 20

// pinAlign keeps every upload's host and device offsets aligned for 8-byte elements.
const pinAlign = 64

// openStreams creates the streams, the events and the page-locked buffer, and puts
// cuBLAS on the compute stream.
func (d *Device) openStreams() error {
	out := newOut()
	for i, what := range []string{"cuStreamCreate (compute)", "cuStreamCreate (copy)"} {
		if err := d.drv.check(what, call(d.drv.cuStreamCreate, out.at(i), 0)); err != nil {
			return err
		}
	}
	for i, what := range []string{"cuEventCreate", "cuEventCreate"} {
		if err := d.drv.check(what, call(d.drv.cuEventCreate, out.at(2+i), 2)); err != nil { // CU_EVENT_DISABLE_TIMING
			return err
		}
	}
	out.keep()
	d.cs, d.xs, d.evC, d.evX = out.uptr(0), out.uptr(1), out.uptr(2), out.uptr(3)
	r := call(d.drv.cuMemAllocHost, out.reset().at(0), 2*pinBytes)
	out.keep()
	if err := d.drv.check("cuMemAllocHost", r); err != nil {
		return err
	}
	d.pin = unsafe.Slice((*byte)(cptr(out.uptr(0))), 2*pinBytes)
	if r := call(d.blas.setStream, d.handle, d.cs); r != 0 {
		return fmt.Errorf("cublasSetStream: status %d", r)
	}
	return nil
}

// closeStreams waits for both streams and releases them.
func (d *Device) closeStreams() {
	call(d.drv.cuCtxSynchronize)
	for _, s := range []uintptr{d.cs, d.xs} {
		if s != 0 {
			call(d.drv.cuStreamDestroy, s)
		}
	}
	for _, e := range []uintptr{d.evC, d.evX} {
		if e != 0 {
			call(d.drv.cuEventDestroy, e)
		}
	}
	if d.pin != nil {
		call(d.drv.cuMemFreeHost, uintptr(unsafe.Pointer(&d.pin[0])))
		d.pin = nil
	}
}

// copyAfterCompute makes the copy stream's next work wait for the compute stream's
// work queued so far.
func (d *Device) copyAfterCompute() bool {
	return d.fail(d.drv.check("cuEventRecord", call(d.drv.cuEventRecord, d.evC, d.cs))) &&
		d.fail(d.drv.check("cuStreamWaitEvent", call(d.drv.cuStreamWaitEvent, d.xs, d.evC, 0)))
}

// computeAfterCopy makes the compute stream's next work wait for the copy stream's work
// queued so far.
func (d *Device) computeAfterCopy() bool {
	return d.fail(d.drv.check("cuEventRecord", call(d.drv.cuEventRecord, d.evX, d.xs))) &&
		d.fail(d.drv.check("cuStreamWaitEvent", call(d.drv.cuStreamWaitEvent, d.cs, d.evX, 0)))
}

// toDevice copies bytes at host address src to device address dst, in order with the
// compute stream's work (see above).
func (d *Device) toDevice(dst uintptr, src unsafe.Pointer, bytes uintptr) {
	if d.err != nil || bytes == 0 {
		return
	}
	if d.gmode != eager {
		d.graphBad("an upload into a given tensor")
		return
	}
	if bytes > pinBytes/2 {
		d.fail(d.drv.check("cuMemcpyHtoD", call(d.drv.cuMemcpyHtoD, dst, uintptr(src), bytes)))
		return
	}
	if d.pinOff+int(bytes) > pinBytes {
		// Every upload's copy has to have run before the buffer is written again.
		if !d.fail(d.drv.check("cuStreamSynchronize (copy)", call(d.drv.cuStreamSynchronize, d.xs))) {
			return
		}
		d.pinOff = 0
	}
	host := d.pin[d.pinOff : d.pinOff+int(bytes)]
	copy(host, unsafe.Slice((*byte)(src), bytes))
	if !d.copyAfterCompute() {
		return
	}
	r := call(d.drv.cuMemcpyHtoDAsync, dst, uintptr(unsafe.Pointer(&host[0])), bytes, d.xs)
	if d.fail(d.drv.check("cuMemcpyHtoDAsync", r)) {
		d.computeAfterCopy()
	}
	d.pinOff += (int(bytes) + pinAlign - 1) / pinAlign * pinAlign
}

// toHost copies bytes at device address src to host address dst once the compute
// stream's queued work has run, and returns when they are there.
func (d *Device) toHost(dst unsafe.Pointer, src uintptr, bytes uintptr) {
	if d.err != nil || bytes == 0 {
		return
	}
	if d.gmode != eager {
		d.graphBad("a download")
		return
	}
	if bytes > pinBytes {
		d.fail(d.drv.check("cuMemcpyDtoH", call(d.drv.cuMemcpyDtoH, uintptr(dst), src, bytes)))
		return
	}
	host := d.pin[pinBytes : pinBytes+int(bytes)]
	if !d.copyAfterCompute() {
		return
	}
	r := call(d.drv.cuMemcpyDtoHAsync, uintptr(unsafe.Pointer(&host[0])), src, bytes, d.xs)
	if !d.fail(d.drv.check("cuMemcpyDtoHAsync", r)) ||
		!d.fail(d.drv.check("cuStreamSynchronize (copy)", call(d.drv.cuStreamSynchronize, d.xs))) {
		return
	}
	copy(unsafe.Slice((*byte)(dst), bytes), host)
	d.pinOff = 0 // the copy stream has run every upload queued before
}
