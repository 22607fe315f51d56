//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tuft-go/tuft/engine/device"
)

// Device is one NVIDIA GPU. Every operation is queued on the device's compute stream in
// call order, small transfers on its copy stream (stream.go); Download, Gather,
// SumSquares, Sample, TopK and Err wait for the queue. It is safe for concurrent use
// (operations are serialised).
type Device struct {
	*core
	// graphView: this Device is the view Graph hands its step function (graph.go): its
	// operations run under the lock Graph holds, and only while core.view is this view.
	graphView bool
}

// core is the device's state, shared by the Device and the views Graph makes of it.
type core struct {
	mu     sync.Mutex
	drv    *driverAPI
	blas   *blasAPI
	handle uintptr // cuBLAS
	ord    int32
	ctx    uintptr
	name   string
	cc     int // compute capability, major·10 + minor
	sms    int
	mem    *allocator
	bf16   bool
	err    error
	fn     map[string]uintptr
	ropes  map[*device.Rope][2]uintptr

	// Launch arguments: each parameter gets a slot, the driver reads the slot's leading
	// bytes. They are fields so that their addresses stay put while C reads them.
	args  [maxKernelParameters]uint64
	argp  [maxKernelParameters]uintptr
	alpha float32
	beta  float32
	cast  uintptr // bfloat16 copy of an activation operand
	castN uintptr // its capacity in elements
	stage []byte  // page-locked staging of WeightFrom (upload.go); nil outside a load

	// Streams, their events and the page-locked buffer of small transfers (stream.go).
	cs, xs, evC, evX uintptr
	pin              []byte
	pinOff           int // next free byte of the upload half of pin

	// CUDA graphs of decode steps (graph.go).
	graphsOn  bool
	gemv      bool // one-row products with bfloat16 weights by gemv_bf16 (Options.NoGEMV)
	graphMax  int
	graphs    map[string]*graph
	seen      map[string]uint64 // shapes asked for once, not captured yet
	gmode     graphMode
	cur       *graph                 // the graph being captured or replayed
	view      atomic.Pointer[Device] // the view whose operations run under Graph's lock
	owned     map[uintptr]bool       // blocks graphs hold: a Free of one is ignored
	retired   []uintptr              // cast buffers a graph may still name
	graphTick uint64
	gstats    Stats // the graph counts of Stats
	graphErr  error // why the driver refused a capture (graphs are off since)
	closed    bool

	// launches counts kernel launches and cuBLAS products since Open (Launches).
	launches uint64
}

var (
	_ device.Device[float32]       = (*Device)(nil)
	_ device.BF16Operands[float32] = (*Device)(nil)
)

// Open initialises the driver, picks GPU o.Ordinal, loads cuBLAS and the kernels.
func Open(o Options) (*Device, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	drv, drvPath, err := loadDriver(o.LibDirs)
	if err != nil {
		return nil, err
	}
	if err := drv.check("cuInit", call(drv.cuInit, 0)); err != nil {
		return nil, fmt.Errorf("%s: %w", drvPath, err)
	}
	out := newOut()
	call(drv.cuDriverGetVersion, out.at(0))
	r := call(drv.cuDeviceGetCount, out.at(1))
	out.keep()
	ver, n := out.i32(0), out.i32(1)
	if err := drv.check("cuDeviceGetCount", r); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errNoDevice
	}
	if o.Ordinal < 0 || o.Ordinal >= int(n) {
		return nil, fmt.Errorf("cuda:%d requested, but the driver sees %d GPU(s)", o.Ordinal, n)
	}
	d := &Device{core: &core{drv: drv, fn: map[string]uintptr{}, ropes: map[*device.Rope][2]uintptr{},
		graphsOn: o.Graphs, graphMax: o.GraphLimit, gemv: !o.NoGEMV, graphs: map[string]*graph{}, seen: map[string]uint64{}, owned: map[uintptr]bool{}}}
	r = call(drv.cuDeviceGet, out.reset().at(0), uintptr(o.Ordinal))
	out.keep()
	if err := drv.check("cuDeviceGet", r); err != nil {
		return nil, err
	}
	d.ord = out.i32(0)
	nameBuf := heapBytes(256)
	call(drv.cuDeviceGetName, ptr(&nameBuf[0]), uintptr(len(nameBuf)), uintptr(d.ord))
	runtime.KeepAlive(nameBuf)
	out.reset()
	call(drv.cuDeviceGetAttribute, out.at(0), attrCCMajor, uintptr(d.ord))
	call(drv.cuDeviceGetAttribute, out.at(1), attrCCMinor, uintptr(d.ord))
	call(drv.cuDeviceGetAttribute, out.at(2), attrSMCount, uintptr(d.ord))
	call(drv.cuDeviceTotalMem, out.at(3), uintptr(d.ord))
	out.keep()
	major, minor, sms, total := out.i32(0), out.i32(1), out.i32(2), out.u64(3)
	d.cc, d.sms = int(major*10+minor), int(sms)
	if d.cc < 70 {
		return nil, fmt.Errorf("cuda:%d has compute capability %d.%d; the kernels need 7.0 or later", o.Ordinal, major, minor)
	}
	d.bf16 = !o.FP32Weights && d.cc >= 80
	blas, _, err := loadBLAS(o.LibDirs)
	if err != nil {
		return nil, err
	}
	d.blas = blas
	r = call(drv.cuDevicePrimaryCtxRetain, out.reset().at(0), uintptr(d.ord))
	out.keep()
	if err := drv.check("cuDevicePrimaryCtxRetain", r); err != nil {
		return nil, err
	}
	d.ctx = out.uptr(0)
	if err := drv.check("cuCtxSetCurrent", call(drv.cuCtxSetCurrent, d.ctx)); err != nil {
		return nil, err
	}
	src := PTX
	if d.cc >= 80 {
		src = PTX80
	}
	image := cbytes(src)
	r = call(drv.cuModuleLoadData, out.reset().at(0), ptr(&image[0]))
	runtime.KeepAlive(image)
	out.keep()
	if err := drv.check("load the kernels (cuModuleLoadData)", r); err != nil {
		return nil, err
	}
	mod := out.uptr(0)
	for _, k := range Kernels {
		name := cbytes(k)
		r := call(drv.cuModuleGetFunction, out.reset().at(0), mod, ptr(&name[0]))
		runtime.KeepAlive(name)
		out.keep()
		if err := drv.check("cuModuleGetFunction "+k, r); err != nil {
			return nil, err
		}
		d.fn[k] = out.uptr(0)
	}
	r = call(blas.create, out.reset().at(0))
	out.keep()
	if r != 0 {
		return nil, fmt.Errorf("cublasCreate: status %d", r)
	}
	d.handle = out.uptr(0)
	if err := d.openStreams(); err != nil {
		d.closeStreams()
		return nil, err
	}
	d.mem = newAllocator(func(b uintptr) (uintptr, error) {
		o := newOut()
		r := call(drv.cuMemAlloc, o.at(0), b)
		o.keep()
		return o.uptr(0), drv.check("cuMemAlloc", r)
	}, func(p uintptr) error { return drv.check("cuMemFree", call(drv.cuMemFree, p)) }, o.MemoryLimit)
	weights := "bfloat16"
	if !d.bf16 {
		weights = "float32"
	}
	d.name = fmt.Sprintf("cuda:%d (%s, compute capability %d.%d, %d SMs, %.1f GiB, driver %d.%d, cuBLAS %s, %s weights)",
		o.Ordinal, string(nameBuf[:max(0, strings.IndexByte(string(nameBuf), 0))]), major, minor, sms, float64(total)/(1<<30), ver/1000, ver%1000/10, blas.version, weights)
	return d, nil
}

// Name implements device.Device.
func (d *Device) Name() string { return d.name }

// HostMemory implements device.Device: tensors live on the GPU.
func (d *Device) HostMemory() bool { return false }

// Stats reports the allocator's figures.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.mem.stats()
	st.Graphs, st.GraphCaptures, st.GraphLaunches, st.GraphFallbacks = int64(len(d.graphs)), d.gstats.GraphCaptures,
		d.gstats.GraphLaunches, d.gstats.GraphFallbacks
	return st
}

// Err implements device.Device. It waits for the queued work, so errors of kernels that
// ran asynchronously surface here.
func (d *Device) Err() error {
	defer d.exit()
	if d.gmode != eager {
		d.graphBad("Err")
		return nil
	}
	if d.enter() {
		d.fail(d.drv.check("synchronize", call(d.drv.cuCtxSynchronize)))
	}
	err := d.err
	d.err = nil
	return err
}

// enter locks the device and makes its context current on this thread; false once an
// error is pending (the operation is then skipped). exit undoes it; call it always.
func (d *Device) enter() bool {
	if d.graphView && d.view.Load() == d {
		return d.err == nil // Graph holds the lock and the thread
	}
	d.mu.Lock()
	runtime.LockOSThread()
	if d.err != nil {
		return false
	}
	return d.fail(d.drv.check("cuCtxSetCurrent", call(d.drv.cuCtxSetCurrent, d.ctx)))
}

func (d *Device) exit() {
	if d.graphView && d.view.Load() == d {
		return
	}
	runtime.UnlockOSThread()
	d.mu.Unlock()
}

// fail records err (the first one wins) and reports whether there was none.
func (d *Device) fail(err error) bool {
	if err != nil && d.err == nil {
		d.err = err
	}
	return err == nil
}

// get allocates bytes from the cache (zeroed when zero is set).
func (d *Device) get(bytes uintptr, zero bool) uintptr {
	if bytes == 0 || d.err != nil {
		return 0
	}
	if d.gmode != eager {
		return d.graphGet(bytes, zero)
	}
	p, err := d.mem.get(bytes)
	if !d.fail(err) {
		return 0
	}
	if zero {
		d.memset(p, bytes)
	}
	return p
}

// memset queues the zeroing of bytes at p on the compute stream.
func (d *Device) memset(p, bytes uintptr) {
	if !d.record(opMemset, uint64(p), uint64(bytes)) {
		return
	}
	d.fail(d.drv.check("cuMemsetD8Async", call(d.drv.cuMemsetD8Async, p, 0, bytes, d.cs)))
}

func (d *Device) put(p uintptr) {
	if p != 0 && !d.owned[p] {
		d.fail(d.mem.put(p))
	}
}

// upload copies n bytes at host address src to a new allocation.
func (d *Device) upload(src unsafe.Pointer, bytes uintptr) uintptr {
	if d.gmode != eager {
		return d.graphInput(src, bytes)
	}
	p := d.get(bytes, false)
	if p != 0 {
		d.toDevice(p, src, bytes)
	}
	return p
}

func uploadSlice[E any](d *Device, v []E) uintptr {
	if len(v) == 0 {
		return 0
	}
	var e E
	p := d.upload(unsafe.Pointer(&v[0]), uintptr(len(v))*unsafe.Sizeof(e))
	runtime.KeepAlive(v)
	return p
}

func downloadSlice[E any](d *Device, dst []E, src uintptr) {
	if len(dst) == 0 || d.err != nil {
		return
	}
	var e E
	d.toHost(unsafe.Pointer(&dst[0]), src, uintptr(len(dst))*unsafe.Sizeof(e))
	runtime.KeepAlive(dst)
}

// Kernel arguments, each in an 8-byte slot.
func pArg[E device.Elem](t device.Tensor[E]) uint64 { return uint64(t.Ptr()) }
func iArg(v int) uint64                             { return uint64(uint32(int32(v))) }
func lArg(v int) uint64                             { return uint64(int64(v)) }
func fArg(v float32) uint64                         { return uint64(math.Float32bits(v)) }
func dArg(v float64) uint64                         { return math.Float64bits(v) }

// launch runs kernel name on a grid of gx×gy blocks of bx threads.
func (d *Device) launch(name string, gx, gy, bx int, args ...uint64) {
	if d.err != nil || gx == 0 || gy == 0 {
		return
	}
	if d.gmode != eager && !d.recordLaunch(d.fn[name], gx, gy, bx, args) {
		return
	}
	for i, a := range args {
		d.args[i] = a
		d.argp[i] = uintptr(unsafe.Pointer(&d.args[i]))
	}
	d.launches++
	r := call(d.drv.cuLaunchKernel, d.fn[name], uintptr(gx), uintptr(gy), 1, uintptr(bx), 1, 1, 0, d.cs, uintptr(unsafe.Pointer(&d.argp[0])), 0)
	d.fail(d.drv.check("launch "+name, r))
}

// stride is the grid of a grid-stride kernel over n elements.
func (d *Device) stride(n int) int {
	return max(1, min((n+255)/256, d.sms*16))
}

// Launches is the number of kernel launches and cuBLAS products queued since Open: what
// docs/gpu.md's per-layer launch counts are measured with.
func (d *Device) Launches() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.launches
}

// Close releases the cuBLAS handle and the context; the Device is unusable afterwards.
func (d *Device) Close() {
	defer d.exit()
	if d.enter() && !d.closed {
		d.closed = true
		d.dropGraphs()
		d.closeStreams()
		d.mem.releaseAll()
		call(d.blas.destroy, d.handle)
		call(d.drv.cuDevicePrimaryCtxRelease, uintptr(d.ord))
	}
	d.err = errors.New("cuda: device closed")
}
