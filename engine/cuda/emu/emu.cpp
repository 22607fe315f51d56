// A CPU stand-in for the parts of libcuda and cuBLAS that engine/cuda uses, for testing the
// CUDA device where there is no GPU. Device memory is host memory; kernels.cu is compiled
// as C++ against the emulation below and each kernel launch runs block by block, the
// threads of a block as coroutines on one OS thread that switch at __syncthreads, at
// warp shuffles and at the warp-wide tensor-core product (emu_mma_bf16, the fragment
// layout of mma.sync m16n8k16), so they behave as on a GPU, deterministically;
// cublasGemmEx is a plain loop in double. Streams are queues run lazily, when something
// waits for them (see "Streams, events and graphs" below), so work the Go side did not
// order runs out of order here; stream capture records the queued work into a graph that
// cuGraphLaunch queues again. It checks the Go side (library loading, argument
// marshalling, memory handling, product layouts, stream ordering, graph capture) and the
// kernels' logic; it cannot check what only hardware shows (the PTX compiler,
// memory-model races, speed).
//
// Build: emu/build.sh DIR writes libcuda.so.1, libcublas.so.12 and libcublasLt.so.12.

#include <cmath>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <string>
#include <type_traits>
#include <ucontext.h>
#include <utility>
#include <vector>

// ---- the CUDA C dialect kernels.cu uses ----

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

static dim3 blockIdx, blockDim, gridDim;
static thread_local dim3 threadIdx; // set per coroutine by the scheduler (see switch_to)

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};

static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline int min(int a, int b) { return a < b ? a : b; }

static inline float atomicAdd(float* p, float v) { float o = *p; *p = o + v; return o; }
static inline double atomicAdd(double* p, double v) { double o = *p; *p = o + v; return o; }

// ---- coroutines: the threads of one block ----

struct Thread {
    jmp_buf env;
    ucontext_t uc;
    std::vector<char> stack;
    dim3 idx;
    bool started = false, done = false;
};

struct Barrier {
    int participants = 0, count = 0;
    unsigned generation = 0;
};

static std::vector<Thread> threads;
static jmp_buf sched_env;
static int current = -1;
static std::function<void()> kernel_body; // the launched kernel with its arguments bound
static Barrier block_barrier;
static Barrier warp_barriers[32];
static uint64_t warp_buf[32][32];

static void yield_to_scheduler() {
    Thread& t = threads[current];
    if (!_setjmp(t.env)) _longjmp(sched_env, 1);
    threadIdx = threads[current].idx;
}

static void arrive(Barrier& b) {
    unsigned gen = b.generation;
    if (++b.count == b.participants) {
        b.count = 0;
        b.generation++;
        return;
    }
    while (b.generation == gen) yield_to_scheduler();
}

static void __syncthreads() { arrive(block_barrier); }

template <typename T>
static T __shfl_xor_sync(unsigned, T v, int offset) {
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint64_t slot = 0;
    memcpy(&slot, &v, sizeof(T));
    warp_buf[w][lane] = slot;
    arrive(warp_barriers[w]);
    T r;
    uint64_t other = warp_buf[w][lane ^ offset];
    memcpy(&r, &other, sizeof(T));
    arrive(warp_barriers[w]);
    return r;
}

// emu_mma_bf16 is mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 as a warp
// collective: every lane posts its fragments, then computes its four outputs from the
// whole warp's (fragment layouts in kernels.cu), summing in float in k order.
static unsigned mma_a[32][32][4], mma_b[32][32][2];

static float bf16_half(unsigned reg, int k) { return __uint_as_float(((reg >> (16 * (k & 1))) & 0xffffu) << 16); }

static void emu_mma_bf16(float* d, const unsigned* a, const unsigned* b) {
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    memcpy(mma_a[w][lane], a, sizeof(mma_a[w][lane]));
    memcpy(mma_b[w][lane], b, sizeof(mma_b[w][lane]));
    arrive(warp_barriers[w]);
    int g = lane >> 2, t = lane & 3;
    float r[4];
    for (int x = 0; x < 4; x++) {
        int row = g + (x >> 1) * 8, col = 2 * t + (x & 1);
        float s = 0.f;
        for (int k = 0; k < 16; k++) {
            float av = bf16_half(mma_a[w][(row & 7) * 4 + ((k & 7) >> 1)][(row >> 3) + (k >> 3) * 2], k);
            float bv = bf16_half(mma_b[w][col * 4 + ((k & 7) >> 1)][k >> 3], k);
            s += av * bv;
        }
        r[x] = s;
    }
    arrive(warp_barriers[w]);
    for (int x = 0; x < 4; x++) d[x] += r[x];
}

// emu_ldsm_x4 is ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 as a warp collective:
// every lane posts the row address it gives (row l%8 of matrix l/8), then takes its
// elements of each of the four 8×8 matrices (see ldsm_x4 in kernels.cu).
static const uint16_t* ldsm_rows[32][32];

static void emu_ldsm_x4(unsigned* r, const void* p, bool trans) {
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    ldsm_rows[w][lane] = static_cast<const uint16_t*>(p);
    arrive(warp_barriers[w]);
    int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; i++) {
        const uint16_t* const* m = ldsm_rows[w] + 8 * i;
        unsigned lo = trans ? m[2 * t][g] : m[g][2 * t], hi = trans ? m[2 * t + 1][g] : m[g][2 * t + 1];
        r[i] = lo | (hi << 16);
    }
    arrive(warp_barriers[w]);
}

static void thread_entry() {
    threadIdx = threads[current].idx;
    kernel_body();
    threads[current].done = true;
    for (;;) yield_to_scheduler();
}

// run_block runs every thread of the current block to completion.
static void run_block(int nthreads) {
    static ucontext_t sched_uc;
    block_barrier = Barrier{nthreads, 0, 0};
    for (int w = 0; w < 32; w++) warp_barriers[w] = Barrier{32, 0, 0};
    for (int i = 0; i < nthreads; i++) {
        Thread& t = threads[i];
        t.started = t.done = false;
        t.idx.x = i;
    }
    for (int alive = nthreads; alive > 0;) {
        alive = 0;
        for (int i = 0; i < nthreads; i++) {
            Thread& t = threads[i];
            if (t.done) continue;
            current = i;
            if (!_setjmp(sched_env)) {
                if (!t.started) {
                    t.started = true;
                    getcontext(&t.uc);
                    t.uc.uc_stack.ss_sp = t.stack.data();
                    t.uc.uc_stack.ss_size = t.stack.size();
                    t.uc.uc_link = nullptr;
                    makecontext(&t.uc, thread_entry, 0);
                    swapcontext(&sched_uc, &t.uc);
                } else {
                    _longjmp(t.env, 1);
                }
            }
            if (!t.done) alive++;
        }
    }
}

// ---- the kernels ----

#include "../kernels/kernels.cu"

// bind copies a launch's arguments out of the caller's parameter array (which the caller
// may reuse as soon as cuLaunchKernel returns) into the closure that runs the kernel later.
template <typename... A, size_t... I>
static std::function<void()> bind_impl(void (*f)(A...), void** p, std::index_sequence<I...>) {
    auto args = std::make_tuple(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(p[I])...);
    return [f, args]() { std::apply(f, args); };
}

template <typename... A>
static std::function<void()> bind(void (*f)(A...), void** p) {
    return bind_impl(f, p, std::index_sequence_for<A...>{});
}

#define KERNELS(X) X(cast_bf16) X(add) X(scale) X(add_rows) X(embed_f32) X(embed_bf16) X(swiglu) X(swiglu_back) \
    X(add_rmsnorm) X(rmsnorm_back) X(log_softmax) X(rope_qk) X(attention) X(attn_back_q) X(attn_back_kv) X(kv_write) \
    X(flash_fwd_64) X(flash_bwd_dq_64) X(flash_bwd_kv_64) X(flash_fwd_128) X(flash_bwd_dq_128) X(flash_bwd_kv_128) \
    X(flash_fwd_256) X(flash_bwd_dq_256) X(flash_bwd_kv_256) X(gather) X(xent_fill) X(scatter_add) \
    X(head_softmax) X(head_dlogits) X(head_back_f32) X(head_back_bf16) X(sumsq_multi) X(adamw_multi) X(sample) X(topk) \
    X(attn_rowdot) X(gemv_bf16) X(lora_shrink) X(lora_expand) X(lora_back_dz) X(lora_back_dx) X(lora_grad) X(lora_split_sum)

struct Kernel {
    const char* name;
    std::function<void()> (*bind)(void**);
};

#define ENTRY(k) {#k, [](void** p) { return bind(k, p); }},
static Kernel kernel_table[] = {KERNELS(ENTRY)};

// ---- libcuda ----

typedef int CUresult;
typedef uintptr_t CUdeviceptr;

// Driver statuses the emulation returns (cuda.h).
enum : int {
    errInvalidValue = 1,
    errCaptureUnsupported = 900, // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    errCaptureInvalidated = 901, // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    errCaptureImplicit = 906,    // CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
};

static std::map<uintptr_t, size_t> allocations;
static size_t allocated = 0;
static const size_t total_memory = size_t(8) << 30;
static std::map<uintptr_t, size_t> pinned; // page-locked host allocations (cuMemAllocHost)

// Streams, events and graphs. Work queued on a stream is not run when it is queued but
// when something needs it: a synchronisation (of the stream, an event recorded on it, the
// context), a wait of another stream on one of its events while that stream runs, or an
// operation on the legacy default stream (which waits for every blocking stream). So
// work that the Go side did not order behind what it depends on runs in the wrong order
// here (a stream drains without looking at the others), and a host read of a download
// that was not waited for reads the poison written when it was queued.
struct Stream;

struct Event {
    Stream* s = nullptr; // the stream of the last record (nullptr: never recorded, complete)
    uint64_t at = 0;     // complete once s has run this many operations
};

struct Op {
    std::function<void()> run;
    Stream* wait_s = nullptr; // a wait: run wait_s up to wait_at first
    uint64_t wait_at = 0;
};

struct Graph {
    std::vector<std::function<void()>> ops;
};

struct Stream {
    std::vector<Op> q;  // queued, not yet run (from head)
    size_t head = 0;
    uint64_t queued = 0, done = 0;
    bool blocking = true;
    Graph* capture = nullptr; // capturing: work goes into the graph instead
    bool invalid = false;     // the capture met an operation it cannot hold
};

static std::vector<Stream*> streams;

// Counters of host-side calls that queue device work (tuft_emu_counters).
static uint64_t n_kernels, n_gemms, n_memsets, n_copies, n_graph_launches, n_graph_ops;

static void drain(Stream* s, uint64_t upto) {
    while (s->done < upto && s->head < s->q.size()) {
        Op op = std::move(s->q[s->head++]);
        if (op.wait_s) drain(op.wait_s, op.wait_at);
        if (op.run) op.run();
        s->done++;
    }
    if (s->head == s->q.size()) {
        s->q.clear();
        s->head = 0;
    }
}

static void drain_all(bool blocking_only) {
    for (Stream* s : streams)
        if (!blocking_only || s->blocking) drain(s, s->queued);
}

static Stream* capturing() {
    for (Stream* s : streams)
        if (s->capture) return s;
    return nullptr;
}

// legacy prepares an operation of the legacy default stream (run at once): it waits for
// the blocking streams. While a stream captures, such an operation is refused and
// invalidates the capture, as the driver does.
static CUresult legacy() {
    if (Stream* c = capturing()) {
        c->invalid = true;
        return errCaptureImplicit;
    }
    drain_all(true);
    return 0;
}

// enqueue queues f on stream h (the legacy stream, 0: runs it now).
static CUresult enqueue(void* h, std::function<void()> f) {
    if (!h) {
        if (CUresult r = legacy()) return r;
        f();
        return 0;
    }
    Stream* s = (Stream*)h;
    if (s->capture) {
        s->capture->ops.push_back(std::move(f));
        return 0;
    }
    s->q.push_back(Op{std::move(f)});
    s->queued++;
    return 0;
}

static bool is_pinned(const void* p, size_t n) {
    auto it = pinned.upper_bound((uintptr_t)p);
    if (it == pinned.begin()) return false;
    --it;
    return (uintptr_t)p + n <= it->first + it->second;
}

// Only the API below is exported (the library is built with -fvisibility=hidden).
#pragma GCC visibility push(default)
extern "C" {

CUresult cuInit(unsigned) { return 0; }
CUresult cuDriverGetVersion(int* v) { *v = 12000; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(int* d, int ordinal) { if (ordinal != 0) return 101; *d = 0; return 0; }
CUresult cuDeviceGetName(char* name, int len, int) { snprintf(name, len, "CPU emulation of a GPU"); return 0; }
CUresult cuDeviceGetAttribute(int* v, int attr, int) {
    switch (attr) {
    case 16: *v = 2; return 0;  // SMs
    case 75: *v = 8; return 0;  // compute capability 8.0: bfloat16 weights
    case 76: *v = 0; return 0;
    }
    return 1;
}
CUresult cuDeviceTotalMem_v2(size_t* b, int) { *b = total_memory; return 0; }
CUresult cuDevicePrimaryCtxRetain(void** ctx, int) { *ctx = (void*)0x1; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int) { return 0; }
CUresult cuCtxSetCurrent(void*) { return 0; }
CUresult cuCtxSynchronize() {
    if (Stream* c = capturing()) {
        c->invalid = true;
        return errCaptureUnsupported;
    }
    drain_all(false);
    return 0;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
    if (allocated + n > total_memory) return 2;
    void* m = aligned_alloc(256, (n + 255) / 256 * 256);
    if (!m) return 2;
    memset(m, 0xA5, n); // device memory is not zeroed: the engine must not rely on it
    *p = (CUdeviceptr)m;
    allocations[*p] = n;
    allocated += n;
    return 0;
}
// cuMemFree waits for the device (queued work may still use the block).
CUresult cuMemFree_v2(CUdeviceptr p) {
    auto it = allocations.find(p);
    if (it == allocations.end()) return 1;
    if (CUresult r = cuCtxSynchronize()) return r;
    allocated -= it->second;
    allocations.erase(it);
    free((void*)p);
    return 0;
}
// Page-locked host memory is ordinary memory here, but remembered: asynchronous copies
// take only page-locked memory (the Go side's rule for them).
CUresult cuMemAllocHost_v2(void** p, size_t n) {
    *p = malloc(n ? n : 1);
    if (!*p) return 2;
    pinned[(uintptr_t)*p] = n ? n : 1;
    return 0;
}
CUresult cuMemFreeHost(void* p) {
    if (!pinned.erase((uintptr_t)p)) return errInvalidValue;
    drain_all(false); // queued copies may still read or write it
    free(p);
    return 0;
}
CUresult cuMemGetInfo_v2(size_t* freeb, size_t* total) { *freeb = total_memory - allocated; *total = total_memory; return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void* s, size_t n) {
    n_copies++;
    if (CUresult r = legacy()) return r;
    memcpy((void*)d, s, n);
    return 0;
}
CUresult cuMemcpyDtoH_v2(void* d, CUdeviceptr s, size_t n) {
    n_copies++;
    if (CUresult r = legacy()) return r;
    memcpy(d, (void*)s, n);
    return 0;
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) {
    n_copies++;
    if (CUresult r = legacy()) return r;
    memmove((void*)d, (void*)s, n);
    return 0;
}
// The asynchronous copies read and write host memory when they run, not when queued.
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, void* stream) {
    if (!is_pinned(s, n)) return errInvalidValue;
    n_copies++;
    return enqueue(stream, [d, s, n] { memcpy((void*)d, s, n); });
}
CUresult cuMemcpyDtoHAsync_v2(void* d, CUdeviceptr s, size_t n, void* stream) {
    if (!is_pinned(d, n)) return errInvalidValue;
    n_copies++;
    if (stream && !((Stream*)stream)->capture) memset(d, 0xA5, n); // not there until the copy has run
    return enqueue(stream, [d, s, n] { memcpy(d, (void*)s, n); });
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void* stream) {
    n_copies++;
    return enqueue(stream, [d, s, n] { memmove((void*)d, (void*)s, n); });
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void* stream) {
    n_memsets++;
    return enqueue(stream, [d, v, n] { memset((void*)d, v, n); });
}
CUresult cuStreamCreate(void** s, unsigned flags) {
    Stream* st = new Stream;
    st->blocking = (flags & 1) == 0; // CU_STREAM_NON_BLOCKING
    streams.push_back(st);
    *s = st;
    return 0;
}
CUresult cuStreamDestroy_v2(void* h) {
    Stream* s = (Stream*)h;
    if (s->capture) return errCaptureUnsupported;
    drain(s, s->queued);
    for (size_t i = 0; i < streams.size(); i++)
        if (streams[i] == s) streams.erase(streams.begin() + i);
    delete s;
    return 0;
}
CUresult cuStreamSynchronize(void* h) {
    if (!h) return cuCtxSynchronize();
    Stream* s = (Stream*)h;
    if (s->capture) {
        s->invalid = true;
        return errCaptureUnsupported;
    }
    drain(s, s->queued);
    return 0;
}
CUresult cuEventCreate(void** e, unsigned) { *e = new Event; return 0; }
CUresult cuEventDestroy_v2(void* e) { delete (Event*)e; return 0; }
CUresult cuEventRecord(void* e, void* h) {
    Event* ev = (Event*)e;
    if (!h) { // the legacy stream: everything queued on blocking streams so far
        if (CUresult r = legacy()) return r;
        ev->s = nullptr;
        return 0;
    }
    Stream* s = (Stream*)h;
    if (s->capture) { // events inside a capture are not needed here
        s->invalid = true;
        return errCaptureUnsupported;
    }
    ev->s = s;
    ev->at = s->queued;
    return 0;
}
CUresult cuEventSynchronize(void* e) {
    Event* ev = (Event*)e;
    if (ev->s) drain(ev->s, ev->at);
    return 0;
}
// cuStreamWaitEvent makes later work of h wait for the event's last record.
CUresult cuStreamWaitEvent(void* h, void* e, unsigned) {
    Event* ev = (Event*)e;
    if (!h) return errInvalidValue;
    Stream* s = (Stream*)h;
    if (s->capture) {
        s->invalid = true;
        return errCaptureUnsupported;
    }
    if (!ev->s) return 0;
    s->q.push_back(Op{nullptr, ev->s, ev->at});
    s->queued++;
    return 0;
}
CUresult cuStreamBeginCapture_v2(void* h, int) {
    Stream* s = (Stream*)h;
    if (!s || s->capture) return errInvalidValue;
    s->capture = new Graph;
    s->invalid = false;
    return 0;
}
CUresult cuStreamEndCapture(void* h, void** g) {
    Stream* s = (Stream*)h;
    if (!s || !s->capture) return errInvalidValue;
    Graph* gr = s->capture;
    s->capture = nullptr;
    if (s->invalid) {
        delete gr;
        *g = nullptr;
        return errCaptureInvalidated;
    }
    *g = gr;
    return 0;
}
CUresult cuGraphInstantiateWithFlags(void** exec, void* g, unsigned long long) {
    *exec = new Graph(*(Graph*)g);
    return 0;
}
// cuGraphLaunch queues the captured work again; the copies and kernels read their
// arguments' memory when they run, as on a GPU.
CUresult cuGraphLaunch(void* exec, void* h) {
    if (!h || ((Stream*)h)->capture) return errInvalidValue;
    n_graph_launches++;
    Stream* s = (Stream*)h;
    for (auto& f : ((Graph*)exec)->ops) {
        s->q.push_back(Op{[&f] { n_graph_ops++; f(); }});
        s->queued++;
    }
    return 0;
}
CUresult cuGraphExecDestroy(void* exec) {
    drain_all(false); // a launch still queued runs the graph's operations
    delete (Graph*)exec;
    return 0;
}
CUresult cuGraphDestroy(void* g) { delete (Graph*)g; return 0; }
CUresult cuModuleLoadData(void** m, const void* image) {
    if (strncmp((const char*)image, "// Code generated", 17) != 0) return 200; // CUDA_ERROR_INVALID_IMAGE
    *m = (void*)0x2;
    return 0;
}
CUresult cuModuleGetFunction(void** f, void*, const char* name) {
    for (auto& k : kernel_table)
        if (strcmp(k.name, name) == 0) { *f = &k; return 0; }
    return 500; // CUDA_ERROR_NOT_FOUND
}
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned, void* stream, void** params, void**) {
    if (by != 1 || bz != 1 || bx == 0 || bx > 1024 || bx % 32 != 0 || gz != 1) return 1; // CUDA_ERROR_INVALID_VALUE
    n_kernels++;
    Kernel* k = (Kernel*)f;
    std::function<void()> body = k->bind(params);
    return enqueue(stream, [body, gx, gy, bx] {
        if (threads.size() < bx) {
            threads.resize(bx);
            for (auto& t : threads) if (t.stack.empty()) t.stack.resize(256 << 10);
        }
        kernel_body = body;
        gridDim.x = gx; gridDim.y = gy; gridDim.z = 1;
        blockDim.x = bx; blockDim.y = 1; blockDim.z = 1;
        for (unsigned y = 0; y < gy; y++)
            for (unsigned x = 0; x < gx; x++) {
                blockIdx.x = x; blockIdx.y = y;
                run_block((int)bx);
            }
    });
}
// tuft_emu_counters reports the host-side calls that queued device work since the
// library was loaded: kernel launches, cuBLAS products, memsets, copies, graph launches,
// and the operations graph launches ran.
void tuft_emu_counters(uint64_t* out) {
    out[0] = n_kernels; out[1] = n_gemms; out[2] = n_memsets; out[3] = n_copies;
    out[4] = n_graph_launches; out[5] = n_graph_ops;
}
CUresult cuGetErrorName(CUresult r, const char** s) {
    static std::map<int, std::string> names;
    auto& n = names[r];
    if (n.empty()) n = "CUDA_EMU_ERROR_" + std::to_string(r);
    *s = n.c_str();
    return 0;
}

// ---- cuBLAS ----

} // extern "C"
static void gemm(int ta, int tb, int m, int n, int k, float al, const void* A, int at, int lda, const void* B, int bt,
                 int ldb, float be, float* c, int ldc);
extern "C" {

// A handle is the stream its products go to.
int cublasCreate_v2(void** h) { *h = new void*(nullptr); return 0; }
int cublasDestroy_v2(void* h) { delete (void**)h; return 0; }
int cublasSetStream_v2(void* h, void* s) { *(void**)h = s; return 0; }
int cublasGetProperty(int type, int* v) { *v = type == 0 ? 12 : 0; return 0; }

static double element(const void* p, int type, long i) {
    if (type == 0) return ((const float*)p)[i];
    uint16_t h = ((const uint16_t*)p)[i];
    return __uint_as_float(unsigned(h) << 16);
}

int cublasGemmEx(void* h, int ta, int tb, int m, int n, int k, const void* alpha, const void* A, int at, int lda,
                 const void* B, int bt, int ldb, const void* beta, void* C, int ct, int ldc, int compute, int) {
    if ((at != 0 && at != 14) || at != bt || ct != 0 || compute != 68) return 7; // CUBLAS_STATUS_INVALID_VALUE
    n_gemms++;
    float al = *(const float*)alpha, be = *(const float*)beta; // read at the call, as cuBLAS does with host scalars
    return enqueue(*(void**)h, [=] { gemm(ta, tb, m, n, k, al, A, at, lda, B, bt, ldb, be, (float*)C, ldc); }) ? 14 : 0;
}

} // extern "C"

static void gemm(int ta, int tb, int m, int n, int k, float al, const void* A, int at, int lda, const void* B, int bt,
                 int ldb, float be, float* c, int ldc) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                double a = ta ? element(A, at, p + (long)i * lda) : element(A, at, i + (long)p * lda);
                double b = tb ? element(B, bt, j + (long)p * ldb) : element(B, bt, p + (long)j * ldb);
                s += a * b;
            }
            float* cij = c + i + (long)j * ldc;
            *cij = (float)(al * s + (be == 0 ? 0.0 : (double)be * *cij));
        }
}

#pragma GCC visibility pop
