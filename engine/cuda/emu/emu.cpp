// A CPU stand-in for the parts of libcuda and cuBLAS that engine/cuda uses, for testing the
// CUDA device where there is no GPU. Device memory is host memory; kernels.cu is compiled
// as C++ against the emulation below and each kernel launch runs block by block, the
// threads of a block as coroutines on one OS thread that switch at __syncthreads, at
// warp shuffles and at the warp-wide tensor-core product (emu_mma_bf16, the fragment
// layout of mma.sync m16n8k16), so they behave as on a GPU, deterministically;
// cublasGemmEx is a plain loop in double. It checks the Go side (library loading, argument
// marshalling, memory handling, product layouts) and the kernels' logic; it cannot check
// what only hardware shows (the PTX compiler, memory-model races, speed).
//
// Build: emu/build.sh DIR writes libcuda.so.1, libcublas.so.12 and libcublasLt.so.12.

#include <cmath>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
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
static void (*kernel_body)(void**);
static void** kernel_params;
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

static void thread_entry() {
    threadIdx = threads[current].idx;
    kernel_body(kernel_params);
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

template <typename... A, size_t... I>
static void invoke_impl(void (*f)(A...), void** p, std::index_sequence<I...>) {
    f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(p[I])...);
}

template <typename... A>
static void invoke(void (*f)(A...), void** p) {
    invoke_impl(f, p, std::index_sequence_for<A...>{});
}

#define KERNELS(X) X(cast_bf16) X(add) X(scale) X(add_rows) X(embed_f32) X(embed_bf16) X(swiglu) X(swiglu_back) \
    X(add_rmsnorm) X(rmsnorm_back) X(log_softmax) X(rope_qk) X(attention) X(attn_back_q) X(attn_back_kv) X(kv_write) \
    X(flash_fwd_64) X(flash_bwd_dq_64) X(flash_bwd_kv_64) X(flash_fwd_128) X(flash_bwd_dq_128) X(flash_bwd_kv_128) \
    X(flash_fwd_256) X(flash_bwd_dq_256) X(flash_bwd_kv_256) X(gather) X(xent_fill) X(scatter_add) \
    X(head_softmax) X(head_dlogits) X(head_back_f32) X(head_back_bf16) X(sumsq) X(adamw) X(sample) X(topk) \
    X(lora_shrink) X(lora_expand) X(lora_back_dz) X(lora_back_dx) X(lora_grad)

struct Kernel {
    const char* name;
    void (*run)(void**);
};

#define ENTRY(k) {#k, [](void** p) { invoke(k, p); }},
static Kernel kernel_table[] = {KERNELS(ENTRY)};

// ---- libcuda ----

typedef int CUresult;
typedef uintptr_t CUdeviceptr;

static std::map<uintptr_t, size_t> allocations;
static size_t allocated = 0;
static const size_t total_memory = size_t(8) << 30;

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
CUresult cuCtxSynchronize() { return 0; }
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
CUresult cuMemFree_v2(CUdeviceptr p) {
    auto it = allocations.find(p);
    if (it == allocations.end()) return 1;
    allocated -= it->second;
    allocations.erase(it);
    free((void*)p);
    return 0;
}
// Page-locked host memory is ordinary memory here.
CUresult cuMemAllocHost_v2(void** p, size_t n) { *p = malloc(n ? n : 1); return *p ? 0 : 2; }
CUresult cuMemFreeHost(void* p) { free(p); return 0; }
CUresult cuMemGetInfo_v2(size_t* freeb, size_t* total) { *freeb = total_memory - allocated; *total = total_memory; return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void* s, size_t n) { memcpy((void*)d, s, n); return 0; }
CUresult cuMemcpyDtoH_v2(void* d, CUdeviceptr s, size_t n) { memcpy(d, (void*)s, n); return 0; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { memmove((void*)d, (void*)s, n); return 0; }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void*) { memset((void*)d, v, n); return 0; }
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
                        unsigned, void*, void** params, void**) {
    if (by != 1 || bz != 1 || bx == 0 || bx > 1024 || bx % 32 != 0 || gz != 1) return 1; // CUDA_ERROR_INVALID_VALUE
    if (threads.size() < bx) {
        threads.resize(bx);
        for (auto& t : threads) if (t.stack.empty()) t.stack.resize(256 << 10);
    }
    Kernel* k = (Kernel*)f;
    kernel_body = k->run;
    kernel_params = params;
    gridDim.x = gx; gridDim.y = gy; gridDim.z = 1;
    blockDim.x = bx; blockDim.y = 1; blockDim.z = 1;
    for (unsigned y = 0; y < gy; y++)
        for (unsigned x = 0; x < gx; x++) {
            blockIdx.x = x; blockIdx.y = y;
            run_block((int)bx);
        }
    return 0;
}
CUresult cuGetErrorName(CUresult r, const char** s) {
    static std::map<int, std::string> names;
    auto& n = names[r];
    if (n.empty()) n = "CUDA_EMU_ERROR_" + std::to_string(r);
    *s = n.c_str();
    return 0;
}

// ---- cuBLAS ----

int cublasCreate_v2(void** h) { *h = (void*)0x3; return 0; }
int cublasDestroy_v2(void*) { return 0; }
int cublasSetStream_v2(void*, void*) { return 0; }
int cublasGetProperty(int type, int* v) { *v = type == 0 ? 12 : 0; return 0; }

static double element(const void* p, int type, long i) {
    if (type == 0) return ((const float*)p)[i];
    uint16_t h = ((const uint16_t*)p)[i];
    return __uint_as_float(unsigned(h) << 16);
}

int cublasGemmEx(void*, int ta, int tb, int m, int n, int k, const void* alpha, const void* A, int at, int lda,
                 const void* B, int bt, int ldb, const void* beta, void* C, int ct, int ldc, int compute, int) {
    if ((at != 0 && at != 14) || at != bt || ct != 0 || compute != 68) return 7; // CUBLAS_STATUS_INVALID_VALUE
    float al = *(const float*)alpha, be = *(const float*)beta;
    float* c = (float*)C;
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
    return 0;
}

} // extern "C"
#pragma GCC visibility pop
