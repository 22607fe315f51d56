//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"math"
	"strings"
	"testing"
	"unsafe"
)

// Small uploads and downloads go through the page-locked buffer on the copy stream: many
// of them, more than the buffer holds, interleaved with kernels that read and write the
// same tensors, give what synchronous copies give.
func TestSmallTransfersKeepOrder(t *testing.T) {
	d := openOrSkip(t, Options{})
	defer d.Close()
	const n = 5000 // 20 kB: 100 rounds pass the upload half of the buffer twice
	x := d.Alloc(n)
	src, got := make([]float32, n), make([]float32, n)
	for round := 0; round < 100; round++ {
		for i := range src {
			src[i] = float32(round*n + i)
		}
		d.Upload(x, src)
		d.Scale(x, 2) // queued on the compute stream: must see this round's upload
		ids := d.Ints([]int32{int32(round), 1, 2})
		y := d.Alloc(3)
		d.Embed(y, x, ids, 1) // gathers x[round], x[1], x[2] with the ids just uploaded
		row := make([]float32, 3)
		d.Download(row, y)
		d.Download(got, x)
		for i := range got {
			if got[i] != 2*src[i] {
				t.Fatalf("round %d: element %d is %v, want %v", round, i, got[i], 2*src[i])
			}
		}
		if row[0] != 2*src[round] || row[1] != 2*src[1] || row[2] != 2*src[2] {
			t.Fatalf("round %d: gathered %v", round, row)
		}
		d.Free(y)
		d.FreeInts(ids)
	}
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
}

// The ordering rules the device relies on are ones the emulation enforces: a kernel that
// does not wait for the copy stream can read the old values, a host read of a download not
// waited for reads poison, and asynchronous copies take only page-locked memory. (On a
// GPU these are races; the test checks the emulation, so it runs only there.)
func TestEmulationEnforcesStreamOrder(t *testing.T) {
	d := openOrSkip(t, Options{})
	defer d.Close()
	if !strings.HasPrefix(d.Name(), "cuda:0 (CPU emulation") {
		t.Skip("not the emulation")
	}
	x := d.Alloc(4)
	d.Upload(x, []float32{1, 2, 3, 4})
	d.Err()
	host := d.pin[:16]
	copy(host, unsafe.Slice((*byte)(unsafe.Pointer(&[]float32{10, 20, 30, 40}[0])), 16))
	d.enter()
	// A copy on the copy stream, then a kernel on the compute stream without the event.
	r := call(d.drv.cuMemcpyHtoDAsync, x.Ptr(), uintptr(unsafe.Pointer(&host[0])), 16, d.xs)
	d.launch("scale", 1, 1, 256, pArg(x), fArg(2), lArg(4))
	d.exit()
	if r != 0 {
		t.Fatalf("cuMemcpyHtoDAsync: %d", r)
	}
	// Synchronising the context runs the compute stream first: the kernel doubles the old
	// values, then the copy lands (ordered, the kernel would have doubled the copy's).
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 4)
	d.Download(got, x)
	if got[0] != 10 {
		t.Fatalf("x[0] = %v: the kernel that did not wait for the copy ran after it", got[0])
	}
	// A download read before its stream is waited for.
	d.enter()
	down := d.pin[pinBytes : pinBytes+16]
	r = call(d.drv.cuMemcpyDtoHAsync, uintptr(unsafe.Pointer(&down[0])), x.Ptr(), 16, d.xs)
	early := math.Float32frombits(*(*uint32)(unsafe.Pointer(&down[0])))
	call(d.drv.cuStreamSynchronize, d.xs)
	late := math.Float32frombits(*(*uint32)(unsafe.Pointer(&down[0])))
	// Pageable memory is refused.
	pageable := make([]byte, 16)
	r2 := call(d.drv.cuMemcpyDtoHAsync, uintptr(unsafe.Pointer(&pageable[0])), x.Ptr(), 16, d.xs)
	d.exit()
	if r != 0 || early == 10 || late != 10 {
		t.Fatalf("download: status %d, read before the wait %v, after %v", r, early, late)
	}
	if r2 == 0 {
		t.Fatal("an asynchronous copy into pageable memory was accepted")
	}
}
