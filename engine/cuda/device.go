//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/tuft-go/tuft/engine/device"
)

// Device is one NVIDIA GPU. Every operation is queued on the device's default stream in
// call order; Download, Gather, SumSquares, Sample, TopK and Err wait for the queue. It
// is safe for concurrent use (operations are serialised).
type Device struct {
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
}

var _ device.Device[float32] = (*Device)(nil)

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
	d := &Device{drv: drv, fn: map[string]uintptr{}, ropes: map[*device.Rope][2]uintptr{}}
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
	image := cbytes(PTX)
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
	return d.mem.stats()
}

// Err implements device.Device. It waits for the queued work, so errors of kernels that
// ran asynchronously surface here.
func (d *Device) Err() error {
	defer d.exit()
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
	d.mu.Lock()
	runtime.LockOSThread()
	if d.err != nil {
		return false
	}
	return d.fail(d.drv.check("cuCtxSetCurrent", call(d.drv.cuCtxSetCurrent, d.ctx)))
}

func (d *Device) exit() {
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
	p, err := d.mem.get(bytes)
	if !d.fail(err) {
		return 0
	}
	if zero {
		d.fail(d.drv.check("cuMemsetD8Async", call(d.drv.cuMemsetD8Async, p, 0, bytes, 0)))
	}
	return p
}

func (d *Device) put(p uintptr) {
	if p != 0 {
		d.fail(d.mem.put(p))
	}
}

// upload copies n bytes at host address src to a new allocation.
func (d *Device) upload(src unsafe.Pointer, bytes uintptr) uintptr {
	p := d.get(bytes, false)
	if p != 0 {
		d.fail(d.drv.check("cuMemcpyHtoD", call(d.drv.cuMemcpyHtoD, p, uintptr(src), bytes)))
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
	d.fail(d.drv.check("cuMemcpyDtoH", call(d.drv.cuMemcpyDtoH, uintptr(unsafe.Pointer(&dst[0])), src, uintptr(len(dst))*unsafe.Sizeof(e))))
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
	for i, a := range args {
		d.args[i] = a
		d.argp[i] = uintptr(unsafe.Pointer(&d.args[i]))
	}
	r := call(d.drv.cuLaunchKernel, d.fn[name], uintptr(gx), uintptr(gy), 1, uintptr(bx), 1, 1, 0, 0, uintptr(unsafe.Pointer(&d.argp[0])), 0)
	d.fail(d.drv.check("launch "+name, r))
}

// stride is the grid of a grid-stride kernel over n elements.
func (d *Device) stride(n int) int {
	return max(1, min((n+255)/256, d.sms*16))
}

// Alloc implements device.Device.
func (d *Device) Alloc(n int) device.Tensor[float32] {
	defer d.exit()
	if !d.enter() || n == 0 {
		return device.Tensor[float32]{}
	}
	return device.OnDevice[float32](d.get(uintptr(n)*4, true), n, false)
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
	d.fail(d.drv.check("cuMemcpyHtoD", call(d.drv.cuMemcpyHtoD, dst.Ptr(), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src))*4)))
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
	if d.enter() && src.Len() > 0 {
		d.fail(d.drv.check("cuMemcpyDtoD", call(d.drv.cuMemcpyDtoD, dst.Ptr(), src.Ptr(), uintptr(src.Len())*src.ElemSize())))
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

// gemm is cuBLAS's column-major C[m×n] (+)= op(A)·op(B) with leading dimensions. A row-major
// product C = X·Y is the column-major Cᵀ = Yᵀ·Xᵀ, so the callers swap the operands.
// A may be bfloat16 (a weight); B then is rounded to bfloat16 on the way in.
func (d *Device) gemm(ta, tb int, m, n, k int, a device.Tensor[float32], lda int, b device.Tensor[float32], ldb int, c device.Tensor[float32], ldc int, acc bool) {
	if d.err != nil || m == 0 || n == 0 {
		return
	}
	if k == 0 {
		if !acc {
			d.fail(d.drv.check("cuMemsetD8Async", call(d.drv.cuMemsetD8Async, c.Ptr(), 0, uintptr(m*n)*4, 0)))
		}
		return
	}
	if b.BF16() {
		d.fail(errors.New("cuda: a product's activation operand is bfloat16"))
		return
	}
	at, bt, bp := uintptr(cudaR32F), uintptr(cudaR32F), b.Ptr()
	if a.BF16() {
		at, bt = cudaR16BF, cudaR16BF
		nb := uintptr(b.Len())
		if nb > d.castN {
			d.put(d.cast)
			d.castN = uintptr(1) << bits.Len64(uint64(nb))
			if d.cast = d.get(d.castN*2, false); d.cast == 0 {
				d.castN = 0
				return
			}
		}
		d.launch("cast_bf16", d.stride(int(nb)), 1, 256, pArg(b), uint64(d.cast), lArg(int(nb)))
		bp = d.cast
	}
	d.alpha, d.beta = 1, 0
	if acc {
		d.beta = 1
	}
	r := call(d.blas.gemmEx, d.handle, uintptr(ta), uintptr(tb), uintptr(m), uintptr(n), uintptr(k),
		uintptr(unsafe.Pointer(&d.alpha)), a.Ptr(), at, uintptr(lda), bp, bt, uintptr(ldb),
		uintptr(unsafe.Pointer(&d.beta)), c.Ptr(), cudaR32F, uintptr(ldc), cublasCompute32F, uintptr(uint32(cublasGemmDefault&0xffffffff)))
	if r != 0 {
		d.fail(fmt.Errorf("cublasGemmEx(%d×%d×%d): status %d", m, n, k, r))
	}
}

// MatMulNT implements device.Device: C = A·Bᵀ is Cᵀ = B·Aᵀ.
func (d *Device) MatMulNT(c, a, b device.Tensor[float32], m, n, k int, acc bool) {
	defer d.exit()
	if d.enter() {
		d.gemm(cublasOpT, cublasOpN, n, m, k, b, k, a, k, c, n, acc)
	}
}

// MatMulNN implements device.Device: C = A·B is Cᵀ = Bᵀ·Aᵀ.
func (d *Device) MatMulNN(c, a, b device.Tensor[float32], m, n, k int, acc bool) {
	defer d.exit()
	if d.enter() {
		d.gemm(cublasOpN, cublasOpN, n, m, k, b, n, a, k, c, n, acc)
	}
}

// MatMulTN implements device.Device: C = Aᵀ·B is Cᵀ = Bᵀ·A.
func (d *Device) MatMulTN(c, a, b device.Tensor[float32], m, n, k int, acc bool) {
	defer d.exit()
	if d.enter() {
		d.gemm(cublasOpN, cublasOpT, n, m, k, b, n, a, m, c, n, acc)
	}
}

// Add implements device.Device.
func (d *Device) Add(out, a, b device.Tensor[float32]) {
	defer d.exit()
	if d.enter() {
		d.launch("add", d.stride(out.Len()), 1, 256, pArg(out), pArg(a), pArg(b), lArg(out.Len()))
	}
}

// Scale implements device.Device.
func (d *Device) Scale(x device.Tensor[float32], s float32) {
	defer d.exit()
	if d.enter() {
		d.launch("scale", d.stride(x.Len()), 1, 256, pArg(x), fArg(s), lArg(x.Len()))
	}
}

// AddRows implements device.Device.
func (d *Device) AddRows(y, b device.Tensor[float32], rows int) {
	defer d.exit()
	if d.enter() {
		d.launch("add_rows", d.stride(rows*b.Len()), 1, 256, pArg(y), pArg(b), lArg(rows), iArg(b.Len()))
	}
}

// Embed implements device.Device.
func (d *Device) Embed(x, table device.Tensor[float32], idx device.Tensor[int32], dim int) {
	defer d.exit()
	if !d.enter() {
		return
	}
	k := "embed_f32"
	if table.BF16() {
		k = "embed_bf16"
	}
	d.launch(k, idx.Len(), 1, 256, pArg(x), pArg(table), pArg(idx), iArg(dim))
}

// RMSNorm implements device.Device.
func (d *Device) RMSNorm(y, rstd, x, w device.Tensor[float32], rows, dim int, eps float64) {
	defer d.exit()
	if d.enter() {
		d.launch("rmsnorm", rows, 1, 256, pArg(y), pArg(rstd), pArg(x), pArg(w), iArg(dim), dArg(eps))
	}
}

// RMSNormBack implements device.Device.
func (d *Device) RMSNormBack(dx, dy, x, w, rstd device.Tensor[float32], rows, dim int) {
	defer d.exit()
	if d.enter() {
		d.launch("rmsnorm_back", rows, 1, 256, pArg(dx), pArg(dy), pArg(x), pArg(w), pArg(rstd), iArg(dim))
	}
}

// rope returns the device copy of RoPE tables (float32), made on first use.
func (d *Device) rope(r *device.Rope) [2]uintptr {
	if t, ok := d.ropes[r]; ok {
		return t
	}
	c, s := make([]float32, len(r.Cos)), make([]float32, len(r.Sin))
	for i := range c {
		c[i], s[i] = float32(r.Cos[i]), float32(r.Sin[i])
	}
	t := [2]uintptr{uploadSlice(d, c), uploadSlice(d, s)}
	if d.err == nil {
		d.ropes[r] = t
	}
	return t
}

// Rope implements device.Device.
func (d *Device) Rope(x device.Tensor[float32], pos device.Tensor[int32], heads int, r *device.Rope, inverse bool) {
	defer d.exit()
	if !d.enter() {
		return
	}
	t := d.rope(r)
	inv := 0
	if inverse {
		inv = 1
	}
	rows := pos.Len()
	d.launch("rope", d.stride(rows*heads*r.Half), 1, 256, pArg(x), pArg(pos), uint64(t[0]), uint64(t[1]), lArg(rows), iArg(heads), iArg(r.Half), iArg(inv))
}

// SwiGLU implements device.Device.
func (d *Device) SwiGLU(a, g, u device.Tensor[float32]) {
	defer d.exit()
	if d.enter() {
		d.launch("swiglu", d.stride(a.Len()), 1, 256, pArg(a), pArg(g), pArg(u), lArg(a.Len()))
	}
}

// SwiGLUBack implements device.Device.
func (d *Device) SwiGLUBack(dg, du, da, g, u device.Tensor[float32]) {
	defer d.exit()
	if d.enter() {
		d.launch("swiglu_back", d.stride(da.Len()), 1, 256, pArg(dg), pArg(du), pArg(da), pArg(g), pArg(u), lArg(da.Len()))
	}
}

func (d *Device) checkAttn(a *device.Attn[float32]) bool {
	switch {
	case a.HeadDim > 256:
		return d.fail(fmt.Errorf("cuda: head_dim %d is above the kernels' 256", a.HeadDim))
	case a.Layout.Desc.Empty() && len(a.Layout.Seqs) > 0:
		return d.fail(errors.New("cuda: attention layout was not uploaded"))
	}
	return true
}

// Attention implements device.Device.
func (d *Device) Attention(a *device.Attn[float32]) {
	defer d.exit()
	if !d.enter() || !d.checkAttn(a) {
		return
	}
	rows := a.Q.Len() / (a.Heads * a.HeadDim)
	shift := 0
	if a.Layout.BlockLen > 0 {
		shift = bits.TrailingZeros(uint(a.Layout.BlockLen))
	}
	d.launch("attention", rows, a.Heads, 128, pArg(a.Q), pArg(a.Out), pArg(a.K), pArg(a.V), pArg(a.P),
		pArg(a.Layout.Desc), iArg(len(a.Layout.Seqs)), pArg(a.Layout.Tab), iArg(shift),
		iArg(a.Heads), iArg(a.KVHeads), iArg(a.HeadDim), fArg(a.Scale))
}

// AttentionBack implements device.Device, for training passes: every sequence's keys are
// its own rows, from position 0.
func (d *Device) AttentionBack(a *device.Attn[float32], dq, dk, dv, dout device.Tensor[float32]) {
	defer d.exit()
	if !d.enter() || !d.checkAttn(a) {
		return
	}
	for _, s := range a.Layout.Seqs {
		if s.Blocks != 0 || s.Pos != 0 || s.KRow != s.Row {
			d.fail(errors.New("cuda: attention backward needs each sequence's own keys from position 0"))
			return
		}
	}
	ds := device.OnDevice[float32](d.get(uintptr(a.P.Len())*4, false), a.P.Len(), false)
	defer d.put(ds.Ptr())
	rows := a.Q.Len() / (a.Heads * a.HeadDim)
	d.launch("attn_back_q", rows, a.Heads, 128, pArg(dq), pArg(ds), pArg(dout), pArg(a.Q), pArg(a.K), pArg(a.V), pArg(a.P),
		pArg(a.Layout.Desc), iArg(len(a.Layout.Seqs)), iArg(a.Heads), iArg(a.KVHeads), iArg(a.HeadDim), fArg(a.Scale))
	d.launch("attn_back_kv", rows, a.KVHeads, min(256, (a.HeadDim+31)/32*32), pArg(dk), pArg(dv), pArg(ds), pArg(a.P), pArg(dout), pArg(a.Q),
		pArg(a.Layout.Desc), iArg(len(a.Layout.Seqs)), iArg(a.Heads), iArg(a.KVHeads), iArg(a.HeadDim))
}

// KVWrite implements device.Device.
func (d *Device) KVWrite(cache, rows device.Tensor[float32], slots device.Tensor[int32], width int) {
	defer d.exit()
	if d.enter() {
		d.launch("kv_write", d.stride(slots.Len()*width), 1, 256, pArg(cache), pArg(rows), pArg(slots), lArg(slots.Len()), iArg(width))
	}
}

// LogSoftmax implements device.Device.
func (d *Device) LogSoftmax(x device.Tensor[float32], rows, cols int) {
	defer d.exit()
	if d.enter() {
		d.launch("log_softmax", rows, 1, 256, pArg(x), iArg(cols))
	}
}

// Gather implements device.Device.
func (d *Device) Gather(dst []float32, x device.Tensor[float32], idx []int64) {
	defer d.exit()
	if !d.enter() || len(idx) == 0 {
		return
	}
	ip := uploadSlice(d, idx)
	out := d.get(uintptr(len(idx))*4, false)
	d.launch("gather", d.stride(len(idx)), 1, 256, uint64(out), pArg(x), uint64(ip), lArg(len(idx)))
	downloadSlice(d, dst, out)
	d.put(ip)
	d.put(out)
}

// XentBack implements device.Device.
func (d *Device) XentBack(dl, logp device.Tensor[float32], cols int, g *device.XentGrad) {
	defer d.exit()
	if !d.enter() {
		return
	}
	if len(g.Rows) > 0 {
		rp, sp := uploadSlice(d, g.Rows), uploadSlice(d, g.Sums)
		d.launch("xent_fill", len(g.Rows), 1, 256, pArg(dl), pArg(logp), uint64(rp), uint64(sp), iArg(cols))
		d.put(rp)
		d.put(sp)
	}
	if len(g.Idx) > 0 {
		ip, vp := uploadSlice(d, g.Idx), uploadSlice(d, g.Vals)
		d.launch("scatter_add", d.stride(len(g.Idx)), 1, 256, pArg(dl), uint64(ip), uint64(vp), lArg(len(g.Idx)))
		d.put(ip)
		d.put(vp)
	}
}

// SumSquares implements device.Device.
func (d *Device) SumSquares(xs []device.Tensor[float32]) float64 {
	defer d.exit()
	if !d.enter() {
		return 0
	}
	acc := d.get(8, true)
	for _, x := range xs {
		d.launch("sumsq", d.stride(x.Len()), 1, 256, pArg(x), lArg(x.Len()), uint64(acc))
	}
	out := make([]float64, 1)
	downloadSlice(d, out, acc)
	d.put(acc)
	return out[0]
}

// AdamW implements device.Device.
func (d *Device) AdamW(w, g, m, v device.Tensor[float32], s *device.AdamStep) {
	defer d.exit()
	if d.enter() {
		d.launch("adamw", d.stride(w.Len()), 1, 256, pArg(w), pArg(g), pArg(m), pArg(v), lArg(w.Len()),
			fArg(s.Clip), fArg(s.Decay), fArg(s.B1), fArg(s.B2), fArg(s.StepSize), fArg(s.BC2Sqrt), fArg(s.Eps))
	}
}

// Sample implements device.Device.
func (d *Device) Sample(logits device.Tensor[float32], cols int, draws []device.Draw) ([]int32, []float32) {
	toks, lps := make([]int32, len(draws)), make([]float32, len(draws))
	defer d.exit()
	if !d.enter() || len(draws) == 0 {
		return toks, lps
	}
	rows, topk := make([]int32, len(draws)), make([]int32, len(draws))
	temp, topp, u := make([]float64, len(draws)), make([]float64, len(draws)), make([]float64, len(draws))
	for i, dr := range draws {
		rows[i], topk[i], temp[i], topp[i], u[i] = int32(dr.Row), int32(dr.TopK), dr.Temperature, dr.TopP, dr.U
	}
	bufs := []uintptr{uploadSlice(d, rows), uploadSlice(d, temp), uploadSlice(d, topk), uploadSlice(d, topp), uploadSlice(d, u),
		d.get(uintptr(len(draws))*4, false), d.get(uintptr(len(draws))*4, false)}
	d.launch("sample", len(draws), 1, 256, pArg(logits), iArg(cols), uint64(bufs[0]), uint64(bufs[1]), uint64(bufs[2]),
		uint64(bufs[3]), uint64(bufs[4]), uint64(bufs[5]), uint64(bufs[6]))
	downloadSlice(d, toks, bufs[5])
	downloadSlice(d, lps, bufs[6])
	for _, b := range bufs {
		d.put(b)
	}
	return toks, lps
}

// TopK implements device.Device.
func (d *Device) TopK(logp device.Tensor[float32], cols int, rows []int32, k int) ([]int32, []float32) {
	k = min(k, cols)
	toks, vals := make([]int32, len(rows)*k), make([]float32, len(rows)*k)
	defer d.exit()
	if !d.enter() || len(rows) == 0 || k == 0 {
		return toks, vals
	}
	rp := uploadSlice(d, rows)
	tp, vp := d.get(uintptr(len(toks))*4, false), d.get(uintptr(len(vals))*4, false)
	d.launch("topk", len(rows), 1, 256, pArg(logp), iArg(cols), uint64(rp), iArg(k), uint64(tp), uint64(vp))
	downloadSlice(d, toks, tp)
	downloadSlice(d, vals, vp)
	d.put(rp)
	d.put(tp)
	d.put(vp)
	return toks, vals
}

// Close releases the cuBLAS handle and the context; the Device is unusable afterwards.
func (d *Device) Close() {
	defer d.exit()
	if d.enter() {
		call(d.blas.destroy, d.handle)
		call(d.drv.cuDevicePrimaryCtxRelease, uintptr(d.ord))
	}
	d.err = errors.New("cuda: device closed")
}
