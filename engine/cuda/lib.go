//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The few constants of the CUDA driver API and cuBLAS this package uses (cuda.h,
// library_types.h, cublas_api.h).
const (
	cudaSuccess         = 0
	cudaErrOutOfMemory  = 2
	attrSMCount         = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	attrCCMajor         = 75 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	attrCCMinor         = 76 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	cublasOpN           = 0
	cublasOpT           = 1
	cudaR32F            = 0  // CUDA_R_32F
	cudaR16BF           = 14 // CUDA_R_16BF
	cublasCompute32F    = 68 // CUBLAS_COMPUTE_32F
	cublasGemmDefault   = -1 // CUBLAS_GEMM_DEFAULT
	rtldFlags           = purego.RTLD_NOW | purego.RTLD_GLOBAL
	maxKernelParameters = 16
)

// cuBLAS versions, newest first.
var (
	cublasNames   = []string{"libcublas.so.12", "libcublas.so.13", "libcublas.so.11"}
	cublasLtNames = []string{"libcublasLt.so.12", "libcublasLt.so.13", "libcublasLt.so.11"}
)

// system is the real environment.
var system = searchEnv{getenv: os.Getenv, glob: filepath.Glob}

// driverAPI holds libcuda's entry points.
type driverAPI struct {
	cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute,
	cuDeviceTotalMem, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuCtxSetCurrent, cuCtxSynchronize,
	cuMemAlloc, cuMemFree, cuMemGetInfo, cuMemcpyHtoD, cuMemcpyDtoH, cuMemcpyDtoD, cuMemsetD8Async,
	cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel, cuGetErrorName uintptr
	cuMemAllocHost, cuMemFreeHost uintptr // page-locked staging (upload.go)
	// Streams, events, asynchronous copies and graphs (stream.go, graph.go).
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize, cuStreamWaitEvent, cuEventCreate, cuEventDestroy,
	cuEventRecord, cuEventSynchronize, cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync,
	cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiate, cuGraphLaunch, cuGraphExecDestroy, cuGraphDestroy uintptr
}

// blasAPI holds cuBLAS's entry points.
type blasAPI struct {
	create, destroy, setStream, gemmEx uintptr
	version                            string
}

// call invokes a C function that returns an int status.
func call(fn uintptr, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(r)
}

// ptr passes the address of Go memory to C for the duration of one call. The memory
// must be on the heap and reached through a pointer the caller keeps (a field of a
// struct the caller holds by pointer, or an out buffer): the compiler does not know that
// C reads or writes memory whose address it got as a uintptr, so a local variable could
// be kept in a register and read back unchanged.
func ptr[T any](p *T) uintptr { return uintptr(unsafe.Pointer(p)) }

// outBuf is heap memory that C writes results into.
type outBuf struct{ v [4]uint64 }

//go:noinline
func newOut() *outBuf { return new(outBuf) }

// at is the address of slot i.
func (b *outBuf) at(i int) uintptr { return uintptr(unsafe.Pointer(&b.v[i])) }

func (b *outBuf) i32(i int) int32    { return int32(uint32(b.v[i])) }
func (b *outBuf) u64(i int) uint64   { return b.v[i] }
func (b *outBuf) uptr(i int) uintptr { return uintptr(b.v[i]) }
func (b *outBuf) reset() *outBuf     { b.v = [4]uint64{}; return b }
func (b *outBuf) keep()              { runtime.KeepAlive(b) }

// heapBytes returns n bytes on the heap (C may write into them).
//
//go:noinline
func heapBytes(n int) []byte { return make([]byte, n) }

// cptr turns the address of C memory into a pointer (the GC does not manage it).
func cptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

func cstring(p uintptr) string {
	if p == 0 {
		return ""
	}
	var b strings.Builder
	for i := uintptr(0); i < 4096; i++ {
		c := *(*byte)(cptr(p + i))
		if c == 0 {
			break
		}
		b.WriteByte(c)
	}
	return b.String()
}

// cbytes is a NUL-terminated copy of s for C, on the heap.
func cbytes(s string) []byte {
	b := heapBytes(len(s) + 1)
	copy(b, s)
	return b
}

// dlopenFirst loads the first of the candidates that loads, and says which; the error
// lists what was tried.
func dlopenFirst(cands []string) (uintptr, string, error) {
	var tried []string
	for _, c := range cands {
		h, err := purego.Dlopen(c, rtldFlags)
		if err == nil {
			return h, c, nil
		}
		tried = append(tried, c)
	}
	return 0, "", fmt.Errorf("tried %s", strings.Join(tried, ", "))
}

func bind(lib uintptr, what string, syms map[string]*uintptr) error {
	var missing []string
	for name, p := range syms {
		f, err := purego.Dlsym(lib, name)
		if err != nil {
			missing = append(missing, name)
			continue
		}
		*p = f
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s lacks %s (too old?)", what, strings.Join(missing, ", "))
	}
	return nil
}

// loadDriver loads libcuda.so.1 and its entry points.
func loadDriver(dirs []string) (*driverAPI, string, error) {
	lib, path, err := dlopenFirst(driverCandidates(dirs))
	if err != nil {
		return nil, "", fmt.Errorf("no NVIDIA driver: libcuda.so.1 not found (%v)", err)
	}
	d := &driverAPI{}
	err = bind(lib, path, map[string]*uintptr{
		"cuInit": &d.cuInit, "cuDriverGetVersion": &d.cuDriverGetVersion, "cuDeviceGetCount": &d.cuDeviceGetCount,
		"cuDeviceGet": &d.cuDeviceGet, "cuDeviceGetName": &d.cuDeviceGetName, "cuDeviceGetAttribute": &d.cuDeviceGetAttribute,
		"cuDeviceTotalMem_v2": &d.cuDeviceTotalMem, "cuDevicePrimaryCtxRetain": &d.cuDevicePrimaryCtxRetain,
		"cuDevicePrimaryCtxRelease_v2": &d.cuDevicePrimaryCtxRelease, "cuCtxSetCurrent": &d.cuCtxSetCurrent,
		"cuCtxSynchronize": &d.cuCtxSynchronize, "cuMemAlloc_v2": &d.cuMemAlloc, "cuMemFree_v2": &d.cuMemFree,
		"cuMemGetInfo_v2": &d.cuMemGetInfo, "cuMemcpyHtoD_v2": &d.cuMemcpyHtoD, "cuMemcpyDtoH_v2": &d.cuMemcpyDtoH,
		"cuMemcpyDtoD_v2": &d.cuMemcpyDtoD, "cuMemsetD8Async": &d.cuMemsetD8Async, "cuModuleLoadData": &d.cuModuleLoadData,
		"cuModuleGetFunction": &d.cuModuleGetFunction, "cuLaunchKernel": &d.cuLaunchKernel, "cuGetErrorName": &d.cuGetErrorName,
		"cuMemAllocHost_v2": &d.cuMemAllocHost, "cuMemFreeHost": &d.cuMemFreeHost,
		"cuStreamCreate": &d.cuStreamCreate, "cuStreamDestroy_v2": &d.cuStreamDestroy, "cuStreamSynchronize": &d.cuStreamSynchronize,
		"cuStreamWaitEvent": &d.cuStreamWaitEvent, "cuEventCreate": &d.cuEventCreate, "cuEventDestroy_v2": &d.cuEventDestroy,
		"cuEventRecord": &d.cuEventRecord, "cuEventSynchronize": &d.cuEventSynchronize, "cuMemcpyHtoDAsync_v2": &d.cuMemcpyHtoDAsync,
		"cuMemcpyDtoHAsync_v2": &d.cuMemcpyDtoHAsync, "cuMemcpyDtoDAsync_v2": &d.cuMemcpyDtoDAsync,
		"cuStreamBeginCapture_v2": &d.cuStreamBeginCapture, "cuStreamEndCapture": &d.cuStreamEndCapture,
		"cuGraphInstantiateWithFlags": &d.cuGraphInstantiate, "cuGraphLaunch": &d.cuGraphLaunch,
		"cuGraphExecDestroy": &d.cuGraphExecDestroy, "cuGraphDestroy": &d.cuGraphDestroy,
	})
	if err != nil {
		return nil, "", err
	}
	return d, path, nil
}

// errName is the name of a driver status (CUDA_ERROR_…).
func (d *driverAPI) errName(r int32) string {
	out := newOut()
	res := call(d.cuGetErrorName, uintptr(r), out.at(0))
	out.keep()
	if res != cudaSuccess || out.uptr(0) == 0 {
		return fmt.Sprintf("CUDA error %d", r)
	}
	return cstring(out.uptr(0))
}

// check turns a driver status into an error naming the call.
func (d *driverAPI) check(what string, r int32) error {
	if r == cudaSuccess {
		return nil
	}
	err := fmt.Errorf("%s: %s", what, d.errName(r))
	if r == cudaErrOutOfMemory {
		err = fmt.Errorf("%s: %w", what, errOutOfMemory)
	}
	return err
}

// loadBLAS loads cuBLAS (cuBLASLt first, which cuBLAS needs by name).
func loadBLAS(dirs []string) (*blasAPI, string, error) {
	wheels := []string{"nvidia/cublas/lib", "nvidia/cu13/lib"}
	if _, _, err := dlopenFirst(system.libCandidates(dirs, cublasLtNames, wheels)); err != nil {
		return nil, "", fmt.Errorf("cuBLASLt not found (%v): install the nvidia-cublas-cu12 wheel, or set CUDA_HOME or engine.cuda_lib_dirs", err)
	}
	lib, path, err := dlopenFirst(system.libCandidates(dirs, cublasNames, wheels))
	if err != nil {
		return nil, "", fmt.Errorf("cuBLAS not found (%v): install the nvidia-cublas-cu12 wheel, or set CUDA_HOME or engine.cuda_lib_dirs", err)
	}
	b := &blasAPI{}
	if err := bind(lib, path, map[string]*uintptr{"cublasCreate_v2": &b.create, "cublasDestroy_v2": &b.destroy,
		"cublasSetStream_v2": &b.setStream, "cublasGemmEx": &b.gemmEx}); err != nil {
		return nil, "", err
	}
	if v, err := purego.Dlsym(lib, "cublasGetProperty"); err == nil {
		out := newOut()
		for i := 0; i < 3; i++ {
			call(v, uintptr(i), out.at(i))
		}
		out.keep()
		b.version = fmt.Sprintf("%d.%d.%d", out.i32(0), out.i32(1), out.i32(2))
	}
	return b, path, nil
}

var errNoDevice = errors.New("no CUDA device")
