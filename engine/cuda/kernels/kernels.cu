// The engine's CUDA kernels: everything the transformer needs that cuBLAS does not
// provide. Compiled to PTX by gen.go (NVRTC, no host compiler or CUDA headers needed) and
// embedded in the tuft binary; the driver JIT-compiles the PTX for the GPU at hand.
//
// Conventions (those of engine/device): float32 activations, row-major, sizes passed
// explicitly; frozen weights may be bfloat16 (bf16_t). Reductions that the CPU device
// does in float64 are done in double here too. Each kernel's Go launcher is in
// engine/cuda/device.go, with the grid it expects.

typedef unsigned short bf16_t;
typedef long long i64;

#define FULL_MASK 0xffffffffu
#define MAX_HD 256   // largest head_dim the attention kernels take
#define MAX_WARPS 8  // largest block (in warps) the reductions take

__device__ __forceinline__ float f_inf() { return __int_as_float(0x7f800000); }

__device__ __forceinline__ float bf16_to_f32(bf16_t h) { return __uint_as_float(((unsigned)h) << 16); }

// f32_to_bf16 rounds to nearest even; NaN stays NaN.
__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ double warp_max_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// block_sum_d returns the sum of v over the block to every thread. sh holds MAX_WARPS.
__device__ double block_sum_d(double v, double* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = (int)threadIdx.x < nw ? sh[threadIdx.x] : 0.0;
    if (w == 0) v = warp_sum_d(v);
    if (threadIdx.x == 0) sh[0] = v;
    __syncthreads();
    return sh[0];
}

__device__ double block_max_d(double v, double* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_max_d(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = (int)threadIdx.x < nw ? sh[threadIdx.x] : -(double)f_inf();
    if (w == 0) v = warp_max_d(v);
    if (threadIdx.x == 0) sh[0] = v;
    __syncthreads();
    return sh[0];
}

// better reports whether (v, i) comes before (bv, bi) in the order "larger value first,
// then lower index".
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi) || bi < 0;
}

// block_best reduces (v, i) pairs to the first in that order; every thread gets it.
__device__ void block_best(float* v, int* i, float* shv, int* shi) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(FULL_MASK, *v, o);
        int oi = __shfl_xor_sync(FULL_MASK, *i, o);
        if (oi >= 0 && better(ov, oi, *v, *i)) { *v = ov; *i = oi; }
    }
    __syncthreads();
    if (lane == 0) { shv[w] = *v; shi[w] = *i; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float bv = shv[0]; int bi = shi[0];
        for (int k = 1; k < nw; k++)
            if (shi[k] >= 0 && better(shv[k], shi[k], bv, bi)) { bv = shv[k]; bi = shi[k]; }
        shv[0] = bv; shi[0] = bi;
    }
    __syncthreads();
    *v = shv[0]; *i = shi[0];
    __syncthreads();
}

// ---- conversions and elementwise ops (grid-stride) ----

extern "C" __global__ void cast_bf16(const float* x, bf16_t* y, i64 n) {
    for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < n; k += (i64)gridDim.x * blockDim.x)
        y[k] = f32_to_bf16(x[k]);
}

extern "C" __global__ void add(float* out, const float* a, const float* b, i64 n) {
    for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < n; k += (i64)gridDim.x * blockDim.x)
        out[k] = a[k] + b[k];
}

extern "C" __global__ void scale(float* x, float s, i64 n) {
    for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < n; k += (i64)gridDim.x * blockDim.x)
        x[k] *= s;
}

// add_rows adds b[n] to every row of y[rows×n].
extern "C" __global__ void add_rows(float* y, const float* b, i64 rows, int n) {
    for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < rows * n; k += (i64)gridDim.x * blockDim.x)
        y[k] += b[k % n];
}

// embed_f32 / embed_bf16: x[r] = table[idx[r]] for rows of width d; grid: one block per row.
extern "C" __global__ void embed_f32(float* x, const float* table, const int* idx, int d) {
    const float* src = table + (i64)idx[blockIdx.x] * d;
    float* dst = x + (i64)blockIdx.x * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) dst[j] = src[j];
}

extern "C" __global__ void embed_bf16(float* x, const bf16_t* table, const int* idx, int d) {
    const bf16_t* src = table + (i64)idx[blockIdx.x] * d;
    float* dst = x + (i64)blockIdx.x * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) dst[j] = bf16_to_f32(src[j]);
}

// swiglu: a = silu(g)·u, silu in double as on the CPU; a (float32) and ab (its bfloat16
// rounding, a product's operand) are each written when not null.
extern "C" __global__ void swiglu(float* a, bf16_t* ab, const float* g, const float* u, i64 n) {
    for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < n; k += (i64)gridDim.x * blockDim.x) {
        double gv = g[k];
        float v = (float)(gv / (1.0 + exp(-gv))) * u[k];
        if (a) a[k] = v;
        if (ab) ab[k] = f32_to_bf16(v);
    }
}

// swiglu_back: dg and du, and their bfloat16 roundings dgb and dub (the operands of the
// gate and up products' input gradients) when not null.
extern "C" __global__ void swiglu_back(float* dg, bf16_t* dgb, float* du, bf16_t* dub, const float* da, const float* g,
                                       const float* u, i64 n) {
    for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < n; k += (i64)gridDim.x * blockDim.x) {
        double gv = g[k];
        double sg = 1.0 / (1.0 + exp(-gv));
        float vu = da[k] * (float)(gv * sg);
        float vg = da[k] * u[k] * (float)(sg * (1.0 + gv * (1.0 - sg)));
        du[k] = vu;
        dg[k] = vg;
        if (dub) dub[k] = f32_to_bf16(vu);
        if (dgb) dgb[k] = f32_to_bf16(vg);
    }
}

// ---- row ops: one block per row ----

// add_rmsnorm: v = a + b (b null: v = a), sum = v (when sum is not null), then
// y = v·rstd·w with rstd = 1/√(mean(v²)+eps): a residual add and the norm after it, in one
// pass over the row. y (float32) and yb (its bfloat16 rounding, a product's operand) are
// each written when not null. Each thread reads back only the elements it wrote.
extern "C" __global__ void add_rmsnorm(float* sum, float* y, bf16_t* yb, float* rstd, const float* a, const float* b,
                                       const float* w, int d, double eps) {
    __shared__ double sh[MAX_WARPS];
    i64 o = (i64)blockIdx.x * d;
    double ss = 0;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = b ? a[o + j] + b[o + j] : a[o + j];
        if (sum) sum[o + j] = v;
        ss += (double)v * v;
    }
    ss = block_sum_d(ss, sh);
    float s = (float)(1.0 / sqrt(ss / d + eps));
    if (threadIdx.x == 0) rstd[blockIdx.x] = s;
    const float* xr = sum ? sum : a;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = xr[o + j] * s * w[j];
        if (y) y[o + j] = v;
        if (yb) yb[o + j] = f32_to_bf16(v);
    }
}

// rmsnorm_back adds the gradient through rmsnorm (w frozen) to dx, and writes the sum's
// bfloat16 rounding to dxb (a product's operand) when it is not null.
extern "C" __global__ void rmsnorm_back(float* dx, bf16_t* dxb, const float* dy, const float* x, const float* w,
                                        const float* rstd, int d) {
    __shared__ double sh[MAX_WARPS];
    i64 o = (i64)blockIdx.x * d;
    double dot = 0;
    for (int j = threadIdx.x; j < d; j += blockDim.x) dot += (double)dy[o + j] * w[j] * x[o + j];
    dot = block_sum_d(dot, sh);
    float s = rstd[blockIdx.x];
    float c = (float)((double)s * s * s * dot / d);
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = dx[o + j] + (s * dy[o + j] * w[j] - c * x[o + j]);
        dx[o + j] = v;
        if (dxb) dxb[o + j] = f32_to_bf16(v);
    }
}

// log_softmax replaces each row of x[·×cols] by its log-softmax.
extern "C" __global__ void log_softmax(float* x, int cols) {
    __shared__ double sh[MAX_WARPS];
    float* r = x + (i64)blockIdx.x * cols;
    double m = -(double)f_inf();
    for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmax(m, (double)r[j]);
    m = block_max_d(m, sh);
    double s = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) s += exp((double)r[j] - m);
    s = block_sum_d(s, sh);
    float lse = (float)(m + log(s));
    for (int j = threadIdx.x; j < cols; j += blockDim.x) r[j] -= lse;
}

// rope_qk rotates q[rows×qheads·2·half] and k[rows×kheads·2·half] in place at each row's
// position (rotate_half layout): the heads of a row are q's, then k's (k may be null with
// kheads 0). qb and kb, when not null, receive the results' bfloat16 roundings (the
// operands of the q and k products' input gradients, in the backward pass). With kc not
// null, the rotated k and v (of k's shape) are also written to slot slots[r] of the
// caches kc and vc (kv_write's job, in a cached pass).
extern "C" __global__ void rope_qk(float* q, bf16_t* qb, float* k, bf16_t* kb, const float* v, float* kc, float* vc,
                                   const int* slots, const int* pos, const float* cosT, const float* sinT, i64 rows,
                                   int qheads, int kheads, int half, int inverse) {
    int heads = qheads + kheads;
    i64 total = rows * heads * half;
    for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
        i64 rh = e / half;
        int i = (int)(e % half);
        i64 r = rh / heads;
        int h = (int)(rh % heads);
        i64 off = h < qheads ? (r * qheads + h) * 2 * half : (r * kheads + h - qheads) * 2 * half;
        float* x = (h < qheads ? q : k) + off;
        bf16_t* xb = h < qheads ? qb : kb;
        i64 t = (i64)pos[r] * half + i;
        float c = cosT[t], s = sinT[t];
        if (inverse) s = -s;
        float x0 = x[i], x1 = x[i + half];
        float a = x0 * c - x1 * s, b = x1 * c + x0 * s;
        x[i] = a;
        x[i + half] = b;
        if (xb) {
            xb[off + i] = f32_to_bf16(a);
            xb[off + i + half] = f32_to_bf16(b);
        }
        if (kc && h >= qheads) {
            i64 co = (i64)slots[r] * kheads * 2 * half + (h - qheads) * 2 * half;
            kc[co + i] = a;
            kc[co + i + half] = b;
            vc[co + i] = v[off + i];
            vc[co + i + half] = v[off + i + half];
        }
    }
}

// ---- attention ----

// seq_of finds the sequence of query row r in a packed layout (7 ints per sequence:
// row, n, pos, krow, table, blocks, poff; rows ascending).
__device__ __forceinline__ const int* seq_of(const int* desc, int nseq, int r) {
    int lo = 0, hi = nseq - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (desc[mid * 7] <= r) lo = mid; else hi = mid - 1;
    }
    return desc + lo * 7;
}

// key_row is the row of K/V that holds position j of a sequence.
__device__ __forceinline__ i64 key_row(const int* sd, const int* tables, int shift, int j) {
    if (sd[5] == 0) return (i64)sd[3] + j;
    return ((i64)tables[sd[4] + (j >> shift)] << shift) + (j & ((1 << shift) - 1));
}

// attention: grid (rows, heads), block of up to MAX_WARPS warps. Row r attends to its
// sequence's positions 0…pos+i with a running (online) softmax per warp, warps combined
// at the end. With P, the probabilities are also written (scores first, normalised
// after).
extern "C" __global__ void attention(const float* q, float* out, const float* K, const float* V, float* P,
                                     const int* desc, int nseq, const int* tables, int shift,
                                     int heads, int kvheads, int hd, float scale) {
    __shared__ float qs[MAX_HD];
    __shared__ float sm_m[MAX_WARPS], sm_l[MAX_WARPS];
    __shared__ float sm_acc[MAX_WARPS][MAX_HD];
    int r = blockIdx.x, h = blockIdx.y;
    const int* sd = seq_of(desc, nseq, r);
    int i = r - sd[0], N = sd[1], pos = sd[2];
    int n = pos + i + 1, span = pos + N;
    int kh = h / (heads / kvheads);
    i64 qd = (i64)heads * hd, kvd = (i64)kvheads * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) qs[e] = q[r * qd + h * hd + e];
    __syncthreads();
    float* prow = P ? P + sd[6] + ((i64)h * N + i) * span : 0;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int per = (hd + 31) >> 5;
    float m = -f_inf(), l = 0.f, acc[MAX_HD / 32];
    for (int t = 0; t < MAX_HD / 32; t++) acc[t] = 0.f;
    for (int j = w; j < n; j += nw) {
        i64 kr = key_row(sd, tables, shift, j);
        const float* kp = K + kr * kvd + kh * hd;
        const float* vp = V + kr * kvd + kh * hd;
        float s = 0.f;
        for (int t = 0; t < per; t++) {
            int e = lane + 32 * t;
            if (e < hd) s += qs[e] * kp[e];
        }
        s = warp_sum(s) * scale;
        if (prow && lane == 0) prow[j] = s;
        float mn = fmaxf(m, s);
        float corr = expf(m - mn), pj = expf(s - mn);
        l = l * corr + pj;
        for (int t = 0; t < per; t++) {
            int e = lane + 32 * t;
            if (e < hd) acc[t] = acc[t] * corr + pj * vp[e];
        }
        m = mn;
    }
    if (lane == 0) { sm_m[w] = m; sm_l[w] = l; }
    for (int t = 0; t < per; t++) {
        int e = lane + 32 * t;
        if (e < hd) sm_acc[w][e] = acc[t];
    }
    __syncthreads();
    float M = -f_inf();
    for (int k = 0; k < nw; k++) M = fmaxf(M, sm_m[k]);
    float L = 0.f;
    for (int k = 0; k < nw; k++) if (sm_l[k] > 0.f) L += sm_l[k] * expf(sm_m[k] - M);
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float o = 0.f;
        for (int k = 0; k < nw; k++) if (sm_l[k] > 0.f) o += sm_acc[k][e] * expf(sm_m[k] - M);
        out[r * qd + h * hd + e] = o / L;
    }
    if (prow) {
        __syncthreads();
        for (int j = threadIdx.x; j < n; j += blockDim.x) prow[j] = expf(prow[j] - M) / L;
    }
}

// attn_back_q: grid (rows, heads). From the kept probabilities P and dout it writes
// ds = p·(dout·v − Σ p·(dout·v))·scale into DS (P's layout) and adds ds·K to dq.
// Contiguous keys only (a training pass).
extern "C" __global__ void attn_back_q(float* dq, float* DS, const float* dout, const float* q, const float* K, const float* V,
                                      const float* P, const int* desc, int nseq, int heads, int kvheads, int hd, float scale) {
    __shared__ float dos[MAX_HD];
    __shared__ double sh[MAX_WARPS];
    int r = blockIdx.x, h = blockIdx.y;
    const int* sd = seq_of(desc, nseq, r);
    int i = r - sd[0], N = sd[1], pos = sd[2];
    int n = pos + i + 1, span = pos + N;
    int kh = h / (heads / kvheads);
    i64 qd = (i64)heads * hd, kvd = (i64)kvheads * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) dos[e] = dout[r * qd + h * hd + e];
    __syncthreads();
    i64 off = sd[6] + ((i64)h * N + i) * span;
    const float* prow = P + off;
    float* dsrow = DS + off;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int per = (hd + 31) >> 5;
    double rowdot = 0;
    for (int j = w; j < n; j += nw) {
        const float* vp = V + ((i64)sd[3] + j) * kvd + kh * hd;
        float s = 0.f;
        for (int t = 0; t < per; t++) {
            int e = lane + 32 * t;
            if (e < hd) s += dos[e] * vp[e];
        }
        s = warp_sum(s);
        if (lane == 0) {
            dsrow[j] = s;
            rowdot += (double)s * prow[j];
        }
    }
    rowdot = block_sum_d(rowdot, sh);
    for (int j = threadIdx.x; j < n; j += blockDim.x) dsrow[j] = prow[j] * (dsrow[j] - (float)rowdot) * scale;
    __syncthreads();
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float a = 0.f;
        for (int j = 0; j < n; j++) a += dsrow[j] * K[((i64)sd[3] + j) * kvd + kh * hd + e];
        dq[r * qd + h * hd + e] += a;
    }
}

// attn_back_kv: grid (rows, kvheads); row r is the key at position j = r − row of its
// sequence. Adds Σ over the group's heads and the queries i ≥ j of p·dout to dv and of
// ds·q to dk.
extern "C" __global__ void attn_back_kv(float* dk, float* dv, const float* DS, const float* P, const float* dout, const float* q,
                                       const int* desc, int nseq, int heads, int kvheads, int hd) {
    int r = blockIdx.x, kh = blockIdx.y;
    const int* sd = seq_of(desc, nseq, r);
    int j = r - sd[0], N = sd[1], pos = sd[2];
    int span = pos + N, group = heads / kvheads;
    i64 qd = (i64)heads * hd, kvd = (i64)kvheads * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float adv = 0.f, adk = 0.f;
        for (int h = kh * group; h < (kh + 1) * group; h++) {
            for (int i = j - pos < 0 ? 0 : j - pos; i < N; i++) {
                i64 off = sd[6] + ((i64)h * N + i) * span + j;
                i64 qr = ((i64)sd[0] + i) * qd + h * hd + e;
                adv += P[off] * dout[qr];
                adk += DS[off] * q[qr];
            }
        }
        dv[(i64)r * kvd + kh * hd + e] += adv;
        dk[(i64)r * kvd + kh * hd + e] += adk;
    }
}

// ---- tiled attention on tensor cores (FlashAttention-2) ----
//
// Used where the device keeps bfloat16 (compute capability 8.0 and later): Q, K, V and dO
// are rounded to bfloat16 as they are loaded, every tile product runs on the tensor
// cores (mma.sync m16n8k16, bfloat16 in, float32 accumulate) and the softmax is float32.
// No T×T buffer exists: the forward pass keeps each row's log-sum-exp, and the backward
// pass recomputes the probabilities tile by tile from it. A block is 4 warps; in the
// forward pass and in flash_bwd_dq each warp owns 16 query rows of a 64-row tile and
// walks the keys in tiles of FA_BN staged in shared memory; in flash_bwd_kv each warp owns
// 16 keys and walks the queries. Every output element is written by one thread from sums
// in a fixed order, so results do not depend on scheduling (no atomics).
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16; g = lane/4, t = lane%4; a 32-bit
// register holds two bfloat16, the lower index in the low half):
//   A 16×16 row-major: a0 (g, 2t..2t+1) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..)
//   B 16×8:            b0 (2t..2t+1, g) b1 (2t+8..2t+9, g)      [k, n]
//   C 16×8 float32:    c0 (g, 2t) c1 (g, 2t+1) c2 (g+8, 2t) c3 (g+8, 2t+1)
// so the C fragments of two adjacent 8-column tiles are, packed, the A fragment of the
// 16-column tile they make (the probabilities never leave registers).

#define FA_BM 64  // rows of a block's tile: 16 per warp
#define FA_BN 32  // keys (queries in flash_bwd_kv) per staged tile
#define FA_PAD 8  // bfloat16 elements of padding per shared row
#define FA_LOG2E 1.4426950408889634f // the softmaxes run in base 2 (exp2f: the hardware exponential, no range reduction)
#define FA_LN2 0.6931471805599453f

// fa_vec: whether stage_rows may move rows of a and b (row stride ld, hd used) four
// elements at a time.
__device__ __forceinline__ bool fa_vec(const float* a, const float* b, i64 ld, int hd) {
    return ((hd | (int)(ld & 3)) & 3) == 0 && (((unsigned long long)a | (unsigned long long)b) & 15) == 0;
}

// pack_bf16 rounds lo and hi to bfloat16 (nearest even) into one register, lo in the low
// half: one cvt on compute capability 8.0 and later (NaN becomes the canonical NaN there).
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return (unsigned)f32_to_bf16(lo) | ((unsigned)f32_to_bf16(hi) << 16);
#endif
}

// mma_bf16: d += a·b for one warp's 16×8 tile (see the layouts above). The compute_70
// PTX has no such instruction and the device never launches these kernels from it (see
// FA_BODY).
__device__ __forceinline__ void mma_bf16(float* d, const unsigned* a, const unsigned* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif !defined(__CUDA_ARCH__)
    emu_mma_bf16(d, a, b); // the CPU emulation's warp-collective product (emu/emu.cpp)
#endif
}

// fa_tile finds tile t of the layout (tiles of FA_BM rows, a sequence's first)
// and returns its sequence, with the tile's first row within it in *i0.
__device__ __forceinline__ const int* fa_tile(const int* desc, int nseq, int t, int* i0) {
    for (int s = 0; s < nseq; s++) {
        int nt = (desc[s * 7 + 1] + FA_BM - 1) / FA_BM;
        if (t < nt) {
            *i0 = t * FA_BM;
            return desc + s * 7;
        }
        t -= nt;
    }
    return 0;
}

// ld2 packs elements c and c+1 of a head's row (zero past hd) as bfloat16.
__device__ __forceinline__ unsigned ld2(const float* p, int c, int hd) {
    return pack_bf16(c < hd ? p[c] : 0.f, c + 1 < hd ? p[c + 1] : 0.f);
}

// load_afrag loads the A fragments of the 16 rows (pa: row g, pb: row g+8) of a warp.
template <int HDP>
__device__ __forceinline__ void load_afrag(unsigned (*f)[4], const float* pa, const float* pb, int hd) {
    int t = threadIdx.x & 3;
#pragma unroll
    for (int ks = 0; ks < HDP / 16; ks++) {
        int c = ks * 16 + 2 * t;
        f[ks][0] = ld2(pa, c, hd);
        f[ks][1] = ld2(pb, c, hd);
        f[ks][2] = ld2(pa, c + 8, hd);
        f[ks][3] = ld2(pb, c + 8, hd);
    }
}

// ldsm_x4 is ldmatrix .x4 (.trans with T): lane l gives the address of row l%8 of 8×8
// matrix l/8 (8 bfloat16, 16-byte aligned, in shared memory); register i of lane l gets
// elements (l/4, 2(l%4)) and (l/4, 2(l%4)+1) of matrix i, or with T, (2(l%4), l/4) and
// (2(l%4)+1, l/4): an mma operand fragment (the layouts above) in one instruction.
template <bool T>
__device__ __forceinline__ void ldsm_x4(unsigned* r, const bf16_t* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned long long g;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(g) : "l"(p));
    unsigned a = (unsigned)g;
    if (T)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
#elif !defined(__CUDA_ARCH__)
    emu_ldsm_x4(r, p, T); // the CPU emulation's warp-collective load (emu/emu.cpp)
#endif
}

// stage_rows writes FA_BN rows of one head (row j of the tile from rowp(j), or zeros
// where rowp gives null) to shared memory as bfloat16. With vec (hd and the row strides
// multiples of 4, the bases 16-byte aligned) a thread moves four elements at a time: one
// 16-byte load, one 8-byte store.
template <int HDP, typename F>
__device__ __forceinline__ void stage_rows(bf16_t (*dst)[HDP + FA_PAD], int hd, bool vec, F rowp) {
    if (vec) {
        for (int x = threadIdx.x; x < FA_BN * (HDP / 4); x += blockDim.x) {
            int jj = x / (HDP / 4), e = (x % (HDP / 4)) * 4;
            const float* p = e < hd ? rowp(jj) : (const float*)0;
            uint2 v = {0u, 0u};
            if (p) {
                float4 f = *(const float4*)(p + e);
                v.x = pack_bf16(f.x, f.y);
                v.y = pack_bf16(f.z, f.w);
            }
            *(uint2*)&dst[jj][e] = v;
        }
        return;
    }
    for (int x = threadIdx.x; x < FA_BN * (HDP / 2); x += blockDim.x) {
        int jj = x / (HDP / 2), e = (x % (HDP / 2)) * 2;
        const float* p = rowp(jj);
        unsigned v = p ? ld2(p, e, hd) : 0u;
        dst[jj][e] = (bf16_t)v;
        dst[jj][e + 1] = (bf16_t)(v >> 16);
    }
}

// mma_rows: c[nb] += A·B where B[k][n] = rows[n][k] (B is a staged tile transposed: the
// products with Kᵀ, Vᵀ, Qᵀ, dOᵀ), over HDP/16 k-steps, FA_BN/8 column tiles.
// Two column tiles' B fragments come from one ldmatrix: matrices (nb, k), (nb, k+8),
// (nb+1, k), (nb+1, k+8) of rows × columns.
template <int HDP>
__device__ __forceinline__ void mma_rows(float (*c)[4], const unsigned (*a)[4], const bf16_t (*rows)[HDP + FA_PAD]) {
    int lane = threadIdx.x & 31, m = lane >> 3, r = lane & 7;
#pragma unroll
    for (int ks = 0; ks < HDP / 16; ks++)
#pragma unroll
        for (int nb = 0; nb < FA_BN / 8; nb += 2) {
            unsigned b[4];
            ldsm_x4<false>(b, rows[(nb + (m >> 1)) * 8 + r] + ks * 16 + (m & 1) * 8);
            mma_bf16(c[nb], a[ks], b);
            mma_bf16(c[nb + 1], a[ks], b + 2);
        }
}

// mma_cols: o[nb] += A·B where B[k][n] = rows[k][n] (a staged tile as is: the products
// with V, K, dO, Q), over FA_BN/16 k-steps, HDP/8 column tiles.
// Two column tiles' B fragments come from one transposing ldmatrix: matrices (k, nb),
// (k+8, nb), (k, nb+1), (k+8, nb+1) of rows × columns.
template <int HDP>
__device__ __forceinline__ void mma_cols(float (*o)[4], const unsigned (*a)[4], const bf16_t (*rows)[HDP + FA_PAD]) {
    int lane = threadIdx.x & 31, m = lane >> 3, r = lane & 7;
#pragma unroll
    for (int kk = 0; kk < FA_BN / 16; kk++)
#pragma unroll
        for (int nb = 0; nb < HDP / 8; nb += 2) {
            unsigned b[4];
            ldsm_x4<true>(b, rows[kk * 16 + (m & 1) * 8 + r] + (nb + (m >> 1)) * 8);
            mma_bf16(o[nb], a[kk], b);
            mma_bf16(o[nb + 1], a[kk], b + 2);
        }
}

// to_afrag packs C fragments c[FA_BN/8] (16 × FA_BN) into A fragments a[FA_BN/16].
__device__ __forceinline__ void to_afrag(unsigned (*a)[4], const float (*c)[4]) {
#pragma unroll
    for (int nb = 0; nb < FA_BN / 8; nb++) {
        int kk = nb >> 1, hi = (nb & 1) * 2;
        a[kk][hi] = pack_bf16(c[nb][0], c[nb][1]);
        a[kk][hi + 1] = pack_bf16(c[nb][2], c[nb][3]);
    }
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, 1));
    return fmaxf(v, __shfl_xor_sync(FULL_MASK, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(FULL_MASK, v, 1);
    return v + __shfl_xor_sync(FULL_MASK, v, 2);
}

// flash_fwd: grid (tiles, heads), 128 threads. Out = softmax(Q·Kᵀ·scale)·V with the
// layout's causal, paged or contiguous keys; with lse, each row's log-sum-exp of its
// scaled scores at lse[row·heads + h].
template <int HDP>
__device__ void flash_fwd_t(const float* q, float* out, bf16_t* outb, float* lse, const float* K, const float* V, const int* desc, int nseq,
                            const int* tables, int shift, int heads, int kvheads, int hd, float scale) {
    __shared__ __align__(16) bf16_t Ks[FA_BN][HDP + FA_PAD];
    __shared__ __align__(16) bf16_t Vs[FA_BN][HDP + FA_PAD];
    int i0;
    const int* sd = fa_tile(desc, nseq, blockIdx.x, &i0);
    if (!sd) return;
    int N = sd[1], pos = sd[2], h = blockIdx.y, kh = h / (heads / kvheads);
    i64 qd = (i64)heads * hd, kvd = (i64)kvheads * hd;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    // Rows past the sequence compute a copy of its last row and are not written.
    int ra = min(i0 + w * 16 + g, N - 1), rb = min(i0 + w * 16 + g + 8, N - 1);
    unsigned qa[HDP / 16][4];
    load_afrag<HDP>(qa, q + ((i64)sd[0] + ra) * qd + h * hd, q + ((i64)sd[0] + rb) * qd + h * hd, hd);
    int lima = pos + ra, limb = pos + rb; // the last key each row sees
    float o[HDP / 8][4];
#pragma unroll
    for (int nb = 0; nb < HDP / 8; nb++) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.f;
    float ma = -f_inf(), mb = -f_inf(), la = 0.f, lb = 0.f;
    int kend = pos + min(i0 + FA_BM, N);
    bool vec = fa_vec(K, V, kvd, hd);
    float sl2 = scale * FA_LOG2E; // scores in base 2: exp(x·scale) = exp2(x·scale·log2 e)
    for (int j0 = 0; j0 < kend; j0 += FA_BN) {
        __syncthreads();
        stage_rows<HDP>(Ks, hd, vec, [&](int jj) -> const float* {
            int j = j0 + jj;
            return j < kend ? K + key_row(sd, tables, shift, j) * kvd + kh * hd : (const float*)0;
        });
        stage_rows<HDP>(Vs, hd, vec, [&](int jj) -> const float* {
            int j = j0 + jj;
            return j < kend ? V + key_row(sd, tables, shift, j) * kvd + kh * hd : (const float*)0;
        });
        __syncthreads();
        float s[FA_BN / 8][4];
#pragma unroll
        for (int nb = 0; nb < FA_BN / 8; nb++) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
        mma_rows<HDP>(s, qa, Ks);
        float mxa = ma, mxb = mb;
#pragma unroll
        for (int nb = 0; nb < FA_BN / 8; nb++)
            for (int c = 0; c < 2; c++) {
                int j = j0 + nb * 8 + 2 * t + c;
                s[nb][c] = j <= lima ? s[nb][c] * sl2 : -f_inf();
                s[nb][2 + c] = j <= limb ? s[nb][2 + c] * sl2 : -f_inf();
                mxa = fmaxf(mxa, s[nb][c]);
                mxb = fmaxf(mxb, s[nb][2 + c]);
            }
        // Key 0 is in the first tile and every row sees it, so the maxima are finite.
        mxa = quad_max(mxa);
        mxb = quad_max(mxb);
        float ca = exp2f(ma - mxa), cb = exp2f(mb - mxb);
        ma = mxa;
        mb = mxb;
        float suma = 0.f, sumb = 0.f;
#pragma unroll
        for (int nb = 0; nb < FA_BN / 8; nb++) {
            s[nb][0] = exp2f(s[nb][0] - ma);
            s[nb][1] = exp2f(s[nb][1] - ma);
            s[nb][2] = exp2f(s[nb][2] - mb);
            s[nb][3] = exp2f(s[nb][3] - mb);
            suma += s[nb][0] + s[nb][1];
            sumb += s[nb][2] + s[nb][3];
        }
        la = la * ca + suma;
        lb = lb * cb + sumb;
#pragma unroll
        for (int nb = 0; nb < HDP / 8; nb++) {
            o[nb][0] *= ca;
            o[nb][1] *= ca;
            o[nb][2] *= cb;
            o[nb][3] *= cb;
        }
        unsigned pa[FA_BN / 16][4];
        to_afrag(pa, s);
        mma_cols<HDP>(o, pa, Vs);
    }
    la = quad_sum(la);
    lb = quad_sum(lb);
    int rows[2] = {i0 + w * 16 + g, i0 + w * 16 + g + 8};
    float inv[2] = {1.f / la, 1.f / lb}, lses[2] = {(ma + log2f(la)) * FA_LN2, (mb + log2f(lb)) * FA_LN2};
#pragma unroll
    for (int x = 0; x < 2; x++) {
        if (rows[x] >= N) continue;
        i64 r = (i64)sd[0] + rows[x], ro = r * qd + h * hd;
#pragma unroll
        for (int nb = 0; nb < HDP / 8; nb++) {
            int c = nb * 8 + 2 * t;
            if (c >= hd) continue; // hd is even: c + 1 < hd too
            float v0 = o[nb][2 * x] * inv[x], v1 = o[nb][2 * x + 1] * inv[x];
            if (out) {
                out[ro + c] = v0;
                out[ro + c + 1] = v1;
            }
            if (outb) *(unsigned*)(outb + ro + c) = pack_bf16(v0, v1);
        }
        if (lse && t == 0) lse[r * heads + h] = lses[x];
    }
}

// attn_rowdot: grid (rows, heads), 32 threads. D[r·heads + h] = Σ dO∘O over head h of
// row r: Σ_j P∘dP of the backward pass without recomputing P and dP (FlashAttention-2's
// Drow), from the forward's float32 output.
extern "C" __global__ void attn_rowdot(float* D, const float* dout, const float* out, int heads, int hd) {
    i64 r = blockIdx.x, h = blockIdx.y, o = (r * heads + h) * hd;
    float s = 0.f;
    for (int e = threadIdx.x; e < hd; e += 32) s += dout[o + e] * out[o + e];
    s = warp_sum(s);
    if (threadIdx.x == 0) D[r * heads + h] = s;
}

// flash_bwd_dq: grid (tiles, heads), 128 threads; training layouts (each sequence's own
// keys from position 0). Recomputes P = exp(S·scale − lse) and dP = dO·Vᵀ per key tile:
// unless haveD (D already holds each row's Drow, from attn_rowdot), a first sweep sums
// Drow = Σ P∘dP (written to D for flash_bwd_kv); a second forms dS = P∘(dP − Drow)·scale
// and dQ = dS·K, which overwrites dq.
template <int HDP>
__device__ void flash_bwd_dq_t(float* dq, float* D, const float* dout, const float* q, const float* K, const float* V, const float* lse,
                               const int* desc, int nseq, int heads, int kvheads, int hd, float scale, int haveD) {
    __shared__ __align__(16) bf16_t Ks[FA_BN][HDP + FA_PAD];
    __shared__ __align__(16) bf16_t Vs[FA_BN][HDP + FA_PAD];
    int i0;
    const int* sd = fa_tile(desc, nseq, blockIdx.x, &i0);
    if (!sd) return;
    int N = sd[1], h = blockIdx.y, kh = h / (heads / kvheads);
    i64 qd = (i64)heads * hd, kvd = (i64)kvheads * hd;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int ra = min(i0 + w * 16 + g, N - 1), rb = min(i0 + w * 16 + g + 8, N - 1);
    i64 qra = ((i64)sd[0] + ra) * qd + h * hd, qrb = ((i64)sd[0] + rb) * qd + h * hd;
    unsigned qa[HDP / 16][4], da[HDP / 16][4];
    load_afrag<HDP>(qa, q + qra, q + qrb, hd);
    load_afrag<HDP>(da, dout + qra, dout + qrb, hd);
    // Base 2, as the forward pass: P = exp2(S·scale·log2 e − lse·log2 e).
    float lsa = lse[((i64)sd[0] + ra) * heads + h] * FA_LOG2E, lsb = lse[((i64)sd[0] + rb) * heads + h] * FA_LOG2E;
    float sl2 = scale * FA_LOG2E;
    bool vec = fa_vec(K, V, kvd, hd);
    float Da = 0.f, Db = 0.f;
    if (haveD) {
        Da = D[((i64)sd[0] + ra) * heads + h];
        Db = D[((i64)sd[0] + rb) * heads + h];
    }
    float dqa[HDP / 8][4];
#pragma unroll
    for (int nb = 0; nb < HDP / 8; nb++) dqa[nb][0] = dqa[nb][1] = dqa[nb][2] = dqa[nb][3] = 0.f;
    int kend = min(i0 + FA_BM, N);
    for (int sweep = haveD ? 1 : 0; sweep < 2; sweep++) {
        for (int j0 = 0; j0 < kend; j0 += FA_BN) {
            __syncthreads();
            stage_rows<HDP>(Ks, hd, vec, [&](int jj) -> const float* {
                int j = j0 + jj;
                return j < kend ? K + ((i64)sd[3] + j) * kvd + kh * hd : (const float*)0;
            });
            stage_rows<HDP>(Vs, hd, vec, [&](int jj) -> const float* {
                int j = j0 + jj;
                return j < kend ? V + ((i64)sd[3] + j) * kvd + kh * hd : (const float*)0;
            });
            __syncthreads();
            float s[FA_BN / 8][4], dp[FA_BN / 8][4];
#pragma unroll
            for (int nb = 0; nb < FA_BN / 8; nb++)
                for (int c = 0; c < 4; c++) s[nb][c] = dp[nb][c] = 0.f;
            mma_rows<HDP>(s, qa, Ks);
            mma_rows<HDP>(dp, da, Vs);
#pragma unroll
            for (int nb = 0; nb < FA_BN / 8; nb++)
                for (int c = 0; c < 2; c++) {
                    int j = j0 + nb * 8 + 2 * t + c;
                    float pa = j <= ra ? exp2f(s[nb][c] * sl2 - lsa) : 0.f;
                    float pb = j <= rb ? exp2f(s[nb][2 + c] * sl2 - lsb) : 0.f;
                    if (sweep == 0) {
                        Da += pa * dp[nb][c];
                        Db += pb * dp[nb][2 + c];
                    } else {
                        s[nb][c] = pa * (dp[nb][c] - Da) * scale;
                        s[nb][2 + c] = pb * (dp[nb][2 + c] - Db) * scale;
                    }
                }
            if (sweep == 1) {
                unsigned dsa[FA_BN / 16][4];
                to_afrag(dsa, s);
                mma_cols<HDP>(dqa, dsa, Ks);
            }
        }
        if (sweep == 0) {
            Da = quad_sum(Da);
            Db = quad_sum(Db);
        }
    }
    int rows[2] = {i0 + w * 16 + g, i0 + w * 16 + g + 8};
    float Ds[2] = {Da, Db};
    for (int x = 0; x < 2; x++) {
        if (rows[x] >= N) continue;
        i64 r = (i64)sd[0] + rows[x];
        float* op = dq + r * qd + h * hd;
#pragma unroll
        for (int nb = 0; nb < HDP / 8; nb++) {
            int c = nb * 8 + 2 * t;
            if (c < hd) op[c] = dqa[nb][2 * x];
            if (c + 1 < hd) op[c + 1] = dqa[nb][2 * x + 1];
        }
        if (t == 0) D[r * heads + h] = Ds[x];
    }
}

// flash_bwd_kv: grid (tiles of keys, kvheads), 128 threads, after flash_bwd_dq (which
// wrote D). Each warp owns 16 keys and, for every head of the KV head's group, walks
// the queries that see them in tiles: Sᵀ = K·Qᵀ, Pᵀ, dPᵀ = V·dOᵀ, dSᵀ; dV = Σ Pᵀ·dO and
// dK = Σ dSᵀ·Q overwrite dv and dk.
template <int HDP>
__device__ void flash_bwd_kv_t(float* dk, float* dv, bf16_t* dvb, const float* D, const float* dout, const float* q, const float* K, const float* V,
                               const float* lse, const int* desc, int nseq, int heads, int kvheads, int hd, float scale) {
    __shared__ __align__(16) bf16_t Qs[FA_BN][HDP + FA_PAD];
    __shared__ __align__(16) bf16_t Os[FA_BN][HDP + FA_PAD];
    __shared__ float Ls[FA_BN], Dsh[FA_BN];
    int i0;
    const int* sd = fa_tile(desc, nseq, blockIdx.x, &i0);
    if (!sd) return;
    int N = sd[1], kh = blockIdx.y, group = heads / kvheads;
    i64 qd = (i64)heads * hd, kvd = (i64)kvheads * hd;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int ja = min(i0 + w * 16 + g, N - 1), jb = min(i0 + w * 16 + g + 8, N - 1);
    i64 kra = ((i64)sd[3] + ja) * kvd + kh * hd, krb = ((i64)sd[3] + jb) * kvd + kh * hd;
    unsigned ka[HDP / 16][4], va[HDP / 16][4];
    load_afrag<HDP>(ka, K + kra, K + krb, hd);
    load_afrag<HDP>(va, V + kra, V + krb, hd);
    float dka[HDP / 8][4], dva[HDP / 8][4];
#pragma unroll
    for (int nb = 0; nb < HDP / 8; nb++)
        for (int c = 0; c < 4; c++) dka[nb][c] = dva[nb][c] = 0.f;
    bool vec = fa_vec(q, dout, qd, hd);
    float sl2 = scale * FA_LOG2E; // base 2, as the forward pass
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        for (int q0 = i0; q0 < N; q0 += FA_BN) {
            __syncthreads();
            stage_rows<HDP>(Qs, hd, vec, [&](int ii) -> const float* {
                int i = q0 + ii;
                return i < N ? q + ((i64)sd[0] + i) * qd + h * hd : (const float*)0;
            });
            stage_rows<HDP>(Os, hd, vec, [&](int ii) -> const float* {
                int i = q0 + ii;
                return i < N ? dout + ((i64)sd[0] + i) * qd + h * hd : (const float*)0;
            });
            for (int ii = threadIdx.x; ii < FA_BN; ii += blockDim.x) {
                int i = q0 + ii;
                Ls[ii] = i < N ? lse[((i64)sd[0] + i) * heads + h] * FA_LOG2E : 0.f;
                Dsh[ii] = i < N ? D[((i64)sd[0] + i) * heads + h] : 0.f;
            }
            __syncthreads();
            float s[FA_BN / 8][4], dp[FA_BN / 8][4];
#pragma unroll
            for (int nb = 0; nb < FA_BN / 8; nb++)
                for (int c = 0; c < 4; c++) s[nb][c] = dp[nb][c] = 0.f;
            mma_rows<HDP>(s, ka, Qs);
            mma_rows<HDP>(dp, va, Os);
#pragma unroll
            for (int nb = 0; nb < FA_BN / 8; nb++)
                for (int c = 0; c < 2; c++) {
                    int ii = nb * 8 + 2 * t + c, i = q0 + ii;
                    bool in = i < N;
                    float pa = in && i >= ja ? exp2f(s[nb][c] * sl2 - Ls[ii]) : 0.f;
                    float pb = in && i >= jb ? exp2f(s[nb][2 + c] * sl2 - Ls[ii]) : 0.f;
                    s[nb][c] = pa;
                    s[nb][2 + c] = pb;
                    dp[nb][c] = pa * (dp[nb][c] - Dsh[ii]) * scale;
                    dp[nb][2 + c] = pb * (dp[nb][2 + c] - Dsh[ii]) * scale;
                }
            unsigned pa[FA_BN / 16][4], dsa[FA_BN / 16][4];
            to_afrag(pa, s);
            to_afrag(dsa, dp);
            mma_cols<HDP>(dva, pa, Os);
            mma_cols<HDP>(dka, dsa, Qs);
        }
    }
    int keys[2] = {i0 + w * 16 + g, i0 + w * 16 + g + 8};
#pragma unroll
    for (int x = 0; x < 2; x++) {
        if (keys[x] >= N) continue;
        i64 r = ((i64)sd[3] + keys[x]) * kvd + kh * hd;
#pragma unroll
        for (int nb = 0; nb < HDP / 8; nb++) {
            int c = nb * 8 + 2 * t;
            if (c >= hd) continue; // hd is even: c + 1 < hd too
            dk[r + c] = dka[nb][2 * x];
            dv[r + c] = dva[nb][2 * x];
            dk[r + c + 1] = dka[nb][2 * x + 1];
            dv[r + c + 1] = dva[nb][2 * x + 1];
            if (dvb) *(unsigned*)(dvb + r + c) = pack_bf16(dva[nb][2 * x], dva[nb][2 * x + 1]);
        }
    }
}

// FA_BODY is a tiled kernel's body: in the compute_70 PTX a trap, since the device runs
// them only from the compute_80 PTX (compute capability 8.0 and later, bfloat16), and
// without tensor cores they would only be slow and large.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define FA_BODY(call) __trap()
#else
#define FA_BODY(call) call
#endif

// FA_FWD_BLOCKS_*: the blocks per SM flash_fwd is built for (its register budget), those
// it reached before it wrote a bfloat16 output too (which took it from 96 to 109
// registers at head_dim 64 and from 167 to 176 at 128: fewer blocks per SM): 5 at 64, 3
// at 128, 1 (no bound) at 256.
#define FA_FWD_BLOCKS_64 5
#define FA_FWD_BLOCKS_128 3
#define FA_FWD_BLOCKS_256 1

#define FLASH_KERNELS(HDP)                                                                                                      \
    extern "C" __global__ void __launch_bounds__(128, FA_FWD_BLOCKS_##HDP) flash_fwd_##HDP(const float* q, float* out, bf16_t* outb, float* lse, const float* K,           \
                                               const float* V, const int* desc, int nseq, const int* tables, int shift,         \
                                               int heads, int kvheads, int hd, float scale) {                                  \
        FA_BODY(flash_fwd_t<HDP>(q, out, outb, lse, K, V, desc, nseq, tables, shift, heads, kvheads, hd, scale));                      \
    }                                                                                                                           \
    extern "C" __global__ void flash_bwd_dq_##HDP(float* dq, float* D, const float* dout, const float* q, const float* K,       \
                                                  const float* V, const float* lse, const int* desc, int nseq, int heads,       \
                                                  int kvheads, int hd, float scale, int haveD) {                               \
        FA_BODY(flash_bwd_dq_t<HDP>(dq, D, dout, q, K, V, lse, desc, nseq, heads, kvheads, hd, scale, haveD));                         \
    }                                                                                                                           \
    extern "C" __global__ void flash_bwd_kv_##HDP(float* dk, float* dv, bf16_t* dvb, const float* D, const float* dout,      \
                                                  const float* q, const float* K, const float* V, const float* lse,             \
                                                  const int* desc, int nseq, int heads, int kvheads, int hd, float scale) {     \
        FA_BODY(flash_bwd_kv_t<HDP>(dk, dv, dvb, D, dout, q, K, V, lse, desc, nseq, heads, kvheads, hd, scale));                       \
    }

FLASH_KERNELS(64)
FLASH_KERNELS(128)
FLASH_KERNELS(256)

// kv_write copies row i of rows[·×width] to slot slots[i] of cache.
extern "C" __global__ void kv_write(float* cache, const float* rows, const int* slots, i64 n, int width) {
    for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < n * width; k += (i64)gridDim.x * blockDim.x) {
        i64 i = k / width;
        cache[(i64)slots[i] * width + k % width] = rows[k];
    }
}

// ---- one row of activations by a bfloat16 matrix ----

// dot8 is Σ of the eight products of bfloat16 pairs in w and x, in order, onto s.
__device__ __forceinline__ float dot8(float s, uint4 w, uint4 x) {
    unsigned wv[4] = {w.x, w.y, w.z, w.w}, xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s = fmaf(__uint_as_float(wv[i] << 16), __uint_as_float(xv[i] << 16), s);
        s = fmaf(__uint_as_float(wv[i] & 0xffff0000u), __uint_as_float(xv[i] & 0xffff0000u), s);
    }
    return s;
}

// gemv_bf16: grid ⌈n/GEMV_WARPS⌉, GEMV_WARPS warps. c[j] (+)= Σ_i x[i]·W[j,i] for j < n:
// one row x (the activation's bfloat16 operand) by W [n×k] bfloat16, row-major, k a
// multiple of 8 and both 16-byte aligned; float32 products and sums. A batch-1 decoding
// step's products: a warp per output, each lane reading 16 bytes of the row at a time
// with four loads in flight, so that the weights stream at the memory's rate (cuBLAS's
// kernels for one column read the 7B's rows at ≈ 58 % of it).
#define GEMV_WARPS 8
extern "C" __global__ void gemv_bf16(float* c, const bf16_t* w, const bf16_t* x, int n, int k, int acc) {
    int j = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (j >= n) return; // whole warps leave: the shuffles below see all 32 lanes
    const uint4 *wr = (const uint4*)(w + (i64)j * k), *xr = (const uint4*)x;
    int n8 = k >> 3, i = lane;
    float s = 0.f;
    for (; i + 96 < n8; i += 128) {
        uint4 w0 = wr[i], w1 = wr[i + 32], w2 = wr[i + 64], w3 = wr[i + 96];
        s = dot8(s, w0, xr[i]);
        s = dot8(s, w1, xr[i + 32]);
        s = dot8(s, w2, xr[i + 64]);
        s = dot8(s, w3, xr[i + 96]);
    }
    for (; i < n8; i += 32) s = dot8(s, wr[i], xr[i]);
    s = warp_sum(s);
    if (lane == 0) c[j] = acc ? c[j] + s : s;
}

// ---- losses ----

extern "C" __global__ void gather(float* dst, const float* x, const i64* idx, i64 n) {
    for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < n; k += (i64)gridDim.x * blockDim.x)
        dst[k] = x[idx[k]];
}

// xent_fill: grid one block per listed row: dl[row,·] = −sum·exp(logp[row,·]).
extern "C" __global__ void xent_fill(float* dl, const float* logp, const int* rows, const double* sums, int cols) {
    i64 o = (i64)rows[blockIdx.x] * cols;
    double s = sums[blockIdx.x];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) dl[o + j] = (float)(-s * exp((double)logp[o + j]));
}

extern "C" __global__ void scatter_add(float* dl, const i64* idx, const double* vals, i64 n) {
    for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < n; k += (i64)gridDim.x * blockDim.x)
        atomicAdd(dl + idx[k], (float)vals[k]);
}

// ---- the fused loss head (device.Head) ----

// head_softmax: one block per row of a chunk of logits lg[·×cols] whose first row is row r0
// of the head: the row's log-sum-exp (sums in double), its targets' log-probabilities
// (targets tok[off[r]…off[r+1]) of row r), the log-sum-exp itself into lses when given,
// and, with probs, the probabilities in place of the logits (for E = P·W).
extern "C" __global__ void head_softmax(float* lg, const int* off, const int* tok, float* logp, float* lses, int cols, int r0, int probs) {
    __shared__ double sh[MAX_WARPS];
    float* r = lg + (i64)blockIdx.x * cols;
    double m = -(double)f_inf();
    for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmax(m, (double)r[j]);
    m = block_max_d(m, sh);
    double s = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) s += exp((double)r[j] - m);
    s = block_sum_d(s, sh);
    double lse = m + log(s);
    int row = r0 + blockIdx.x;
    if (lses && threadIdx.x == 0) lses[row] = (float)lse;
    for (int j = off[row] + threadIdx.x; j < off[row + 1]; j += blockDim.x) logp[j] = (float)((double)r[tok[j]] - lse);
    if (!probs) return;
    __syncthreads(); // every target read before any logit is overwritten
    for (int j = threadIdx.x; j < cols; j += blockDim.x) r[j] = (float)exp((double)r[j] - lse);
}

// head_dlogits: one block per row of a chunk of logits lg[·×cols] whose first row is row r0:
// dL/dlogits = Σⱼ g[j]·onehot(tok[j]) − (Σⱼ g[j])·exp(lg − lse) in place, the targets
// added by one thread in order (a row may repeat a target).
extern "C" __global__ void head_dlogits(float* lg, const int* off, const int* tok, const float* g, const float* lses, int cols, int r0) {
    float* r = lg + (i64)blockIdx.x * cols;
    int row = r0 + blockIdx.x, a = off[row], b = off[row + 1];
    double s = 0;
    for (int j = a; j < b; j++) s += (double)g[j];
    double lse = lses[row];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) r[j] = (float)(-s * exp((double)r[j] - lse));
    __syncthreads();
    if (threadIdx.x == 0)
        for (int j = a; j < b; j++) r[tok[j]] += g[j];
}

// head_back_*: one block per row r: dh[r,·] = Σⱼ g[j]·W[tok[j],·] − (Σⱼ g[j])·E[r,·] over the
// row's targets j, with W in float32 (wf) or bfloat16 (wb; the other one is null).
__device__ void head_back(float* dh, const float* E, const float* wf, const bf16_t* wb, const int* off, const int* tok,
                          const float* g, int d) {
    i64 o = (i64)blockIdx.x * d;
    int a = off[blockIdx.x], b = off[blockIdx.x + 1];
    double s = 0;
    for (int j = a; j < b; j++) s += (double)g[j];
    float ns = (float)(-s);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = ns * E[o + i];
        for (int j = a; j < b; j++) {
            i64 k = (i64)tok[j] * d + i;
            v += g[j] * (wf ? wf[k] : bf16_to_f32(wb[k]));
        }
        dh[o + i] = v;
    }
}

extern "C" __global__ void head_back_f32(float* dh, const float* E, const float* w, const int* off, const int* tok, const float* g, int d) {
    head_back(dh, E, w, 0, off, tok, g, d);
}

extern "C" __global__ void head_back_bf16(float* dh, const float* E, const bf16_t* w, const int* off, const int* tok, const float* g, int d) {
    head_back(dh, E, 0, w, off, tok, g, d);
}

// ---- optimizer ----

// adam_step is AdamW's update of one element (device.AdamStep): the new weight and
// moments.
__device__ __forceinline__ void adam_step(float w, float g, float m, float v, float clip, float decay, float b1, float b2,
                                          float stepSize, float bc2Sqrt, float eps, float* nw, float* nm, float* nv) {
    float gi = g * clip;
    float wk = w * decay;
    float mk = b1 * m + (1.f - b1) * gi;
    float vk = b2 * v + (1.f - b2) * gi * gi;
    float denom = sqrtf(vk) / bc2Sqrt + eps;
    *nw = wk - stepSize * mk / denom;
    *nm = mk;
    *nv = vk;
}

// The optimizer's kernels take many tensors in one launch (an adapter's hundreds; one
// tensor is a table of one): tab holds, per tensor, its length and the addresses of w, g,
// m, v (five i64); blockIdx.y walks the tensors, blockIdx.x and the threads each one's
// elements.

// sumsq_multi adds Σw² (in double) over every tensor of tab to *out.
extern "C" __global__ void sumsq_multi(const i64* tab, int ntens, double* out) {
    __shared__ double sh[MAX_WARPS];
    double s = 0;
    for (int t = blockIdx.y; t < ntens; t += gridDim.y) {
        i64 n = tab[5 * t];
        const float* x = (const float*)tab[5 * t + 1];
        for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < n; k += (i64)gridDim.x * blockDim.x)
            s += (double)x[k] * x[k];
    }
    s = block_sum_d(s, sh);
    if (threadIdx.x == 0) atomicAdd(out, s);
}

__device__ __forceinline__ bool finite_f(float x) { return fabsf(x) <= 3.402823466e38f; } // false for NaN too

// adamw_multi applies AdamW to every tensor of tab; with check it writes nothing but a 1
// to *bad where some new weight or moment would not be finite.
extern "C" __global__ void adamw_multi(const i64* tab, int ntens, float clip, float decay, float b1, float b2, float stepSize,
                                       float bc2Sqrt, float eps, int check, int* bad) {
    for (int t = blockIdx.y; t < ntens; t += gridDim.y) {
        const i64* e = tab + 5 * t;
        i64 n = e[0];
        float *w = (float*)e[1], *g = (float*)e[2], *m = (float*)e[3], *v = (float*)e[4];
        for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < n; k += (i64)gridDim.x * blockDim.x) {
            float nw, nm, nv;
            adam_step(w[k], g[k], m[k], v[k], clip, decay, b1, b2, stepSize, bc2Sqrt, eps, &nw, &nm, &nv);
            if (check) {
                if (!finite_f(nw) || !finite_f(nm) || !finite_f(nv)) *bad = 1;
            } else {
                w[k] = nw;
                m[k] = nm;
                v[k] = nv;
                g[k] = 0.f;
            }
        }
    }
}

// ---- sampling ----

// sample: grid one block per draw. See engine/device.Draw for the semantics. Top-k and
// top-p become a threshold on the log-probability found by bisection (tokens tied at
// the threshold are all kept), and the token is drawn by inverse CDF in token order.
extern "C" __global__ void sample(const float* logits, int cols, const int* drow, const double* dtemp, const int* dtopk,
                                  const double* dtopp, const double* du, int* otok, float* olp) {
    __shared__ double sh[MAX_WARPS];
    __shared__ float shv[MAX_WARPS];
    __shared__ int shi[MAX_WARPS];
    __shared__ double csum[1024];
    int b = blockIdx.x;
    const float* x = logits + (i64)drow[b] * cols;
    double T = dtemp[b];
    double t = T == 0 ? 1.0 : T;
    double mx = -(double)f_inf();
    for (int j = threadIdx.x; j < cols; j += blockDim.x) mx = fmax(mx, x[j] / t);
    mx = block_max_d(mx, sh);
    double s = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) s += exp(x[j] / t - mx);
    s = block_sum_d(s, sh);
    double lse = mx + log(s);
    if (T == 0) {
        float bv = -f_inf();
        int bi = -1;
        for (int j = threadIdx.x; j < cols; j += blockDim.x) {
            float v = x[j];
            if (bi < 0 || better(v, j, bv, bi)) { bv = v; bi = j; }
        }
        block_best(&bv, &bi, shv, shi);
        if (threadIdx.x == 0) { otok[b] = bi; olp[b] = (float)(x[bi] / t - lse); }
        return;
    }
    int k = dtopk[b];
    double p = dtopp[b];
    double top = mx - lse;                 // the largest log-probability
    double thr = -(double)f_inf();
    if (k > 0 && k < cols) {
        double lo = -(double)f_inf(), hi = top + 1;
        double mn = (double)f_inf();
        for (int j = threadIdx.x; j < cols; j += blockDim.x) mn = fmin(mn, x[j] / t - lse);
        lo = -block_max_d(-mn, sh);
        for (int it = 0; it < 64; it++) {
            double mid = 0.5 * (lo + hi);
            double c = 0;
            for (int j = threadIdx.x; j < cols; j += blockDim.x) c += (x[j] / t - lse) >= mid ? 1.0 : 0.0;
            c = block_sum_d(c, sh);
            if (c >= k) lo = mid; else hi = mid;
        }
        thr = lo;
    }
    if (p < 1) {
        double tot = 0;
        for (int j = threadIdx.x; j < cols; j += blockDim.x) {
            double lp = x[j] / t - lse;
            if (lp >= thr) tot += exp(lp);
        }
        tot = block_sum_d(tot, sh);
        double lo = thr, hi = top + 1;
        if (lo == -(double)f_inf()) {
            double mn = (double)f_inf();
            for (int j = threadIdx.x; j < cols; j += blockDim.x) mn = fmin(mn, x[j] / t - lse);
            lo = -block_max_d(-mn, sh);
        }
        for (int it = 0; it < 64; it++) {
            double mid = 0.5 * (lo + hi);
            double c = 0;
            for (int j = threadIdx.x; j < cols; j += blockDim.x) {
                double lp = x[j] / t - lse;
                if (lp >= mid && lp >= thr) c += exp(lp);
            }
            c = block_sum_d(c, sh);
            if (c >= p * tot) lo = mid; else hi = mid;
        }
        thr = lo > thr ? lo : thr;
    }
    // Inverse CDF in token order: each thread sums a contiguous chunk, thread 0 scans the
    // chunk sums, and the thread whose chunk holds the target finds the token.
    int chunk = (cols + blockDim.x - 1) / blockDim.x;
    int j0 = threadIdx.x * chunk, j1 = min(j0 + chunk, cols);
    double cs = 0;
    for (int j = j0; j < j1; j++) {
        double lp = x[j] / t - lse;
        if (lp >= thr) cs += exp(lp);
    }
    csum[threadIdx.x] = cs;
    __syncthreads();
    if (threadIdx.x == 0) {
        double run = 0;
        for (int q = 0; q < (int)blockDim.x; q++) { double c = csum[q]; csum[q] = run; run += c; }
        sh[0] = run;
        shi[0] = -1;
    }
    __syncthreads();
    double target = du[b] * sh[0];
    double before = csum[threadIdx.x];
    // One thread owns the target: the first chunk whose running sum reaches it (for a
    // zero target, the first chunk with any mass).
    if (cs > 0 && target <= before + cs && (target > before || (target == 0 && before == 0))) {
        double run = before;
        for (int j = j0; j < j1; j++) {
            double lp = x[j] / t - lse;
            if (lp < thr) continue;
            run += exp(lp);
            if (run >= target) { shi[0] = j; break; }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int tok = shi[0];
        if (tok < 0) // rounding left the target past the end: the last kept token
            for (int j = cols - 1; j >= 0; j--)
                if (x[j] / t - lse >= thr) { tok = j; break; }
        otok[b] = tok;
        olp[b] = (float)(x[tok] / t - lse);
    }
}

// topk: grid one block per listed row; the k largest entries of logp (ties: lower
// index first), found one at a time below the previous one.
extern "C" __global__ void topk(const float* logp, int cols, const int* rows, int k, int* otok, float* oval) {
    __shared__ float shv[MAX_WARPS];
    __shared__ int shi[MAX_WARPS];
    const float* x = logp + (i64)rows[blockIdx.x] * cols;
    float pv = f_inf();
    int pi = -1;
    for (int s = 0; s < k; s++) {
        float bv = -f_inf();
        int bi = -1;
        for (int j = threadIdx.x; j < cols; j += blockDim.x) {
            float v = x[j];
            bool after = pi < 0 || v < pv || (v == pv && j > pi);
            if (after && (bi < 0 || better(v, j, bv, bi))) { bv = v; bi = j; }
        }
        block_best(&bv, &bi, shv, shi);
        if (threadIdx.x == 0) { otok[(i64)blockIdx.x * k + s] = bi; oval[(i64)blockIdx.x * k + s] = bv; }
        pv = bv;
        pi = bi;
    }
}

// ---- grouped LoRA products (Punica's SGMV): the runs of rows of every adapter in a pass,
// one launch per stage. device.LoraRun is uploaded as LORA_FIELDS i64 per run: row, n,
// rank, the addresses of A [rank×in], B [out×rank], Z [n×rank], GA, GB (0: no
// gradients) and dZ (this run's share of the scratch), and the scale's float bits. A row
// tile is two i64 (run, first row within the run) over up to LORA_TILE rows of one run.
// Every output element is written by one thread that sums in a fixed order (no atomics),
// so results are deterministic. Launchers: engine/cuda/lora.go.

#define LORA_FIELDS 10
#define LORA_TILE 32
// LORA_SPLIT: the inner dimension a block of lora_shrink or lora_back_dz sums when it is
// longer (in, or out). One block summing all of it was a chain of ⌈k/32⌉ dependent loads
// and barriers (152 for k = 4864), and with one row per run (a decoding step over many
// adapters) the whole step's LoRA time. Split, each block writes its part's sums to a
// scratch and lora_split_sum adds the parts in order: still deterministic.
#define LORA_SPLIT 256

// lora_tile computes the tile c[i·ldc + j] (i < rows, j < cols, both ≤ LORA_TILE)
// (+)= alpha·Σ_k P(i,k)·Q(j,k) over kb ≤ k < K with P(i,k) = p[i·psi + k·psk],
// Q(j,k) = q[j·qsj + k·qsk]: every form a LoRA product takes (X·Aᵀ, Z·Bᵀ, dY·B, dZ·A,
// dYᵀ·Z, dZᵀ·X) by strides. A block of 256 threads; each thread owns four rows of one
// column; k is staged in shared memory LORA_TILE at a time and summed in order.
__device__ void lora_tile(float* c, i64 ldc, const float* p, i64 psi, i64 psk, const float* q, i64 qsj, i64 qsk,
                          int rows, int cols, int kb, int K, float alpha, bool acc) {
    __shared__ float sp[LORA_TILE][LORA_TILE + 1], sq[LORA_TILE][LORA_TILE + 1];
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    for (int k0 = kb; k0 < K; k0 += LORA_TILE) {
        for (int u = 0; u < 4; u++) {
            int e = threadIdx.x + 256 * u, i = e >> 5, k = e & 31;
            bool kin = k0 + k < K;
            sp[i][k] = i < rows && kin ? p[(i64)i * psi + (i64)(k0 + k) * psk] : 0.f;
            sq[i][k] = i < cols && kin ? q[(i64)i * qsj + (i64)(k0 + k) * qsk] : 0.f;
        }
        __syncthreads();
        for (int k = 0; k < LORA_TILE; k++) {
            float qv = sq[tx][k];
            for (int u = 0; u < 4; u++) s[u] = fmaf(sp[ty + 8 * u][k], qv, s[u]);
        }
        __syncthreads();
    }
    if (tx >= cols) return;
    for (int u = 0; u < 4; u++) {
        int i = ty + 8 * u;
        if (i >= rows) continue;
        float* o = c + (i64)i * ldc + tx;
        *o = acc ? *o + alpha * s[u] : alpha * s[u];
    }
}

__device__ __forceinline__ float* lora_ptr(const i64* r, int f) { return (float*)r[f]; }

// lora_part is where block (row tile bx, rank tile jt, part z) of a split product puts its
// LORA_TILE² sums: part z of the grid's tiles, tile by tile, row-major.
__device__ __forceinline__ float* lora_part(float* part, int z, int bx, int jt, int rt) {
    return part + (((i64)z * gridDim.x + bx) * rt + jt) * (LORA_TILE * LORA_TILE);
}

// lora_shrink: grid (row tiles, ⌈max rank/32⌉ × parts); Z = scale·X_r·Aᵀ. With one part
// straight to Z; else part z of k (LORA_SPLIT long) to lora_part, for lora_split_sum.
extern "C" __global__ void lora_shrink(const i64* runs, const i64* tiles, const float* x, int in, float* part, int parts) {
    const i64* r = runs + tiles[2 * blockIdx.x] * LORA_FIELDS;
    int rt = gridDim.y / parts, jt = blockIdx.y % rt, z = blockIdx.y / rt;
    int r0 = (int)tiles[2 * blockIdx.x + 1], n = (int)r[1], rank = (int)r[2], j0 = jt * LORA_TILE;
    if (j0 >= rank) return;
    const float *p = x + (r[0] + r0) * in, *q = lora_ptr(r, 3) + (i64)j0 * in;
    int rows = min(LORA_TILE, n - r0), cols = min(LORA_TILE, rank - j0);
    if (parts == 1)
        lora_tile(lora_ptr(r, 5) + (i64)r0 * rank + j0, rank, p, in, 1, q, in, 1, rows, cols, 0, in, __int_as_float((int)r[9]), false);
    else
        lora_tile(lora_part(part, z, blockIdx.x, jt, rt), LORA_TILE, p, in, 1, q, in, 1, rows, cols, z * LORA_SPLIT,
                  min(in, (z + 1) * LORA_SPLIT), 1.f, false);
}

// lora_split_sum: grid (row tiles, ⌈max rank/32⌉), after a split lora_shrink (field 5:
// Z) or lora_back_dz (field 8: dZ) of parts parts: the field's tile = scale·Σ_z part z,
// summed in z order.
extern "C" __global__ void lora_split_sum(const i64* runs, const i64* tiles, const float* part, int parts, int field) {
    const i64* r = runs + tiles[2 * blockIdx.x] * LORA_FIELDS;
    int rt = gridDim.y, jt = blockIdx.y;
    int r0 = (int)tiles[2 * blockIdx.x + 1], n = (int)r[1], rank = (int)r[2], j0 = jt * LORA_TILE;
    if (j0 >= rank) return;
    int rows = min(LORA_TILE, n - r0), cols = min(LORA_TILE, rank - j0);
    float scale = __int_as_float((int)r[9]);
    for (int e = threadIdx.x; e < LORA_TILE * LORA_TILE; e += blockDim.x) {
        int i = e / LORA_TILE, j = e % LORA_TILE;
        if (i >= rows || j >= cols) continue;
        float s = 0.f;
        for (int z = 0; z < parts; z++) s += part[(((i64)z * gridDim.x + blockIdx.x) * rt + jt) * (LORA_TILE * LORA_TILE) + e];
        lora_ptr(r, field)[(i64)(r0 + i) * rank + j0 + j] = scale * s;
    }
}

// lora_expand: grid (row tiles, ⌈out/32⌉); Y_r += Z·Bᵀ.
extern "C" __global__ void lora_expand(const i64* runs, const i64* tiles, float* y, int out) {
    const i64* r = runs + tiles[2 * blockIdx.x] * LORA_FIELDS;
    int r0 = (int)tiles[2 * blockIdx.x + 1], n = (int)r[1], rank = (int)r[2], o0 = blockIdx.y * LORA_TILE;
    lora_tile(y + (r[0] + r0) * out + o0, out, lora_ptr(r, 5) + (i64)r0 * rank, rank, 1, lora_ptr(r, 4) + (i64)o0 * rank, rank, 1,
              min(LORA_TILE, n - r0), min(LORA_TILE, out - o0), 0, rank, 1.f, true);
}

// lora_back_dz: grid (row tiles, ⌈max rank/32⌉ × parts); dZ = scale·dY_r·B, split over
// out as lora_shrink over in.
extern "C" __global__ void lora_back_dz(const i64* runs, const i64* tiles, const float* dy, int out, float* part, int parts) {
    const i64* r = runs + tiles[2 * blockIdx.x] * LORA_FIELDS;
    int rt = gridDim.y / parts, jt = blockIdx.y % rt, z = blockIdx.y / rt;
    int r0 = (int)tiles[2 * blockIdx.x + 1], n = (int)r[1], rank = (int)r[2], j0 = jt * LORA_TILE;
    if (j0 >= rank) return;
    const float *p = dy + (r[0] + r0) * out, *q = lora_ptr(r, 4) + j0;
    int rows = min(LORA_TILE, n - r0), cols = min(LORA_TILE, rank - j0);
    if (parts == 1)
        lora_tile(lora_ptr(r, 8) + (i64)r0 * rank + j0, rank, p, out, 1, q, 1, rank, rows, cols, 0, out, __int_as_float((int)r[9]), false);
    else
        lora_tile(lora_part(part, z, blockIdx.x, jt, rt), LORA_TILE, p, out, 1, q, 1, rank, rows, cols, z * LORA_SPLIT,
                  min(out, (z + 1) * LORA_SPLIT), 1.f, false);
}

// lora_back_dx: grid (row tiles, ⌈in/32⌉); dX_r += dZ·A.
extern "C" __global__ void lora_back_dx(const i64* runs, const i64* tiles, float* dx, int in) {
    const i64* r = runs + tiles[2 * blockIdx.x] * LORA_FIELDS;
    int r0 = (int)tiles[2 * blockIdx.x + 1], n = (int)r[1], rank = (int)r[2], i0 = blockIdx.y * LORA_TILE;
    lora_tile(dx + (r[0] + r0) * in + i0, in, lora_ptr(r, 8) + (i64)r0 * rank, rank, 1, lora_ptr(r, 3) + i0, 1, in,
              min(LORA_TILE, n - r0), min(LORA_TILE, in - i0), 0, rank, 1.f, true);
}

// lora_grad: grid (listed runs, tiles of GB then tiles of GA); GB += dY_rᵀ·Z and
// GA += dZᵀ·X_r, summed over the run's rows. The runs of one launch have distinct
// gradient tensors (the launcher sends runs that share them in separate launches, in
// run order).
extern "C" __global__ void lora_grad(const i64* runs, const i64* list, const float* x, const float* dy, int in, int out) {
    const i64* r = runs + list[blockIdx.x] * LORA_FIELDS;
    int n = (int)r[1], rank = (int)r[2], rt = (rank + LORA_TILE - 1) / LORA_TILE;
    int ot = (out + LORA_TILE - 1) / LORA_TILE, it = (in + LORA_TILE - 1) / LORA_TILE, t = blockIdx.y;
    if (t < ot * rt) { // GB[o][j] += Σ_i dY[i][o]·Z[i][j]
        int o0 = (t / rt) * LORA_TILE, j0 = (t % rt) * LORA_TILE;
        lora_tile(lora_ptr(r, 7) + (i64)o0 * rank + j0, rank, dy + r[0] * out + o0, 1, out, lora_ptr(r, 5) + j0, 1, rank,
                  min(LORA_TILE, out - o0), min(LORA_TILE, rank - j0), 0, n, 1.f, true);
        return;
    }
    t -= ot * rt;
    if (t >= rt * it) return;
    int j0 = (t / it) * LORA_TILE, i0 = (t % it) * LORA_TILE; // GA[j][k] += Σ_i dZ[i][j]·X[i][k]
    lora_tile(lora_ptr(r, 6) + (i64)j0 * in + i0, in, lora_ptr(r, 8) + j0, 1, rank, x + r[0] * in + i0, 1, in,
              min(LORA_TILE, rank - j0), min(LORA_TILE, in - i0), 0, n, 1.f, true);
}
