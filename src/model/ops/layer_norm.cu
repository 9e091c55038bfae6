// LayerNorm on a CUDA GPU (src/model/ops/layer_norm.rs launches it), the CPU kernel's formulas:
// mean = Σx / C, var = Σ(x − mean)² / C, rstd = 1 / √(var + ε), y = (x − mean)·rstd·w + b.
//
//   lab_ln_fwd      one block a row: the statistics by two block sums, then the row's output;
//   lab_ln_bwd      one block per LAB_LN_ROWS rows: each row's statistics again, dx, and the
//                   block's own Σ dy·x̂ and Σ dy per column into partials[block][2C];
//   lab_ln_bwd_sum  one thread a column: the blocks' partial sums in block order, into dw, db.
//
// The arithmetic is in the LAB_HD functions, built for the GPU (nvcc, -fmad=false) and for the
// host (build.rs), where the tests (src/model/ops/cuda_host.rs) run every block and thread of
// each launch in turn against the CPU kernel. Sums run in a fixed order: the same bits each run.

#ifdef __CUDACC__
#define LAB_HD __host__ __device__
#else
#define LAB_HD
#include <math.h>
#endif

#define LAB_LN_THREADS 128
#define LAB_LN_ROWS 32
#define LAB_LN_EPS 1e-5f

// One thread's share of Σ x over a row of c: elements tid, tid + threads, ...
LAB_HD inline float lab_ln_sum_thread(const float* x, int c, int tid, int threads) {
    float acc = 0.0f;
    for (int i = tid; i < c; i += threads) acc += x[i];
    return acc;
}

// One thread's share of Σ (x − mean)².
LAB_HD inline float lab_ln_sq_thread(const float* x, int c, float mean, int tid, int threads) {
    float acc = 0.0f;
    for (int i = tid; i < c; i += threads) {
        float d = x[i] - mean;
        acc += d * d;
    }
    return acc;
}

// One step of a block's tree reduction: the lower `half` threads add the upper half's values.
LAB_HD inline void lab_ln_tree_step(float* s, int tid, int half) {
    if (tid < half) s[tid] += s[tid + half];
}

// 1 / √(var + ε) from Σ (x − mean)² over c.
LAB_HD inline float lab_ln_rstd(float sq, int c) {
    float var = sq / (float)c;
    return 1.0f / sqrtf(var + LAB_LN_EPS);
}

// One thread's share of a row's output.
LAB_HD inline void lab_ln_write_thread(float* y, const float* x, const float* w, const float* b,
                                       int c, float mean, float rstd, int tid, int threads) {
    for (int i = tid; i < c; i += threads) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
}

// One thread's share of Σ dy·w and Σ dy·w·x̂ over a row.
LAB_HD inline void lab_ln_m_thread(const float* x, const float* w, const float* dy, int c,
                                   float mean, float rstd, int tid, int threads, float* m1,
                                   float* m2) {
    float a = 0.0f, b = 0.0f;
    for (int i = tid; i < c; i += threads) {
        float xh = (x[i] - mean) * rstd;
        float g = dy[i] * w[i];
        a += g;
        b += g * xh;
    }
    *m1 = a;
    *m2 = b;
}

// One thread's share of a row's dx, and its columns' Σ dy·x̂ and Σ dy added into `acc` (2c:
// dw's sums, then db's), which the row `first` of a block sets instead of adding to.
LAB_HD inline void lab_ln_dx_thread(float* dx, float* acc, const float* x, const float* w,
                                    const float* dy, int c, float mean, float rstd, float m1,
                                    float m2, int first, int tid, int threads) {
    for (int i = tid; i < c; i += threads) {
        float xh = (x[i] - mean) * rstd;
        float g = dy[i];
        dx[i] = (g * w[i] - m1 - xh * m2) * rstd;
        if (first) {
            acc[i] = g * xh;
            acc[c + i] = g;
        } else {
            acc[i] += g * xh;
            acc[c + i] += g;
        }
    }
}

// Column j's sum over the blocks' partials (blocks of 2c each), in block order.
LAB_HD inline float lab_ln_col_sum(const float* partials, int blocks, int c2, int j) {
    float acc = 0.0f;
    for (int k = 0; k < blocks; k++) acc += partials[(long long)k * c2 + j];
    return acc;
}

#ifdef __CUDACC__

// The block's values in s[0 .. LAB_LN_THREADS) summed into s[0], in a fixed order; every
// thread reads the sum after it.
__device__ inline float lab_ln_block_sum(float* s) {
    __syncthreads();
    for (int half = LAB_LN_THREADS / 2; half > 0; half /= 2) {
        lab_ln_tree_step(s, threadIdx.x, half);
        __syncthreads();
    }
    float r = s[0];
    __syncthreads();
    return r;
}

// The row's mean and rstd, every thread of the block taking part.
__device__ inline void lab_ln_stats(const float* x, int c, float* s, float* mean, float* rstd) {
    int tid = threadIdx.x;
    s[tid] = lab_ln_sum_thread(x, c, tid, LAB_LN_THREADS);
    *mean = lab_ln_block_sum(s) / (float)c;
    s[tid] = lab_ln_sq_thread(x, c, *mean, tid, LAB_LN_THREADS);
    *rstd = lab_ln_rstd(lab_ln_block_sum(s), c);
}

extern "C" __global__ void __launch_bounds__(LAB_LN_THREADS)
    lab_ln_fwd(const float* x, const float* w, const float* b, float* y, int c) {
    __shared__ float s[LAB_LN_THREADS];
    long long at = (long long)blockIdx.x * c;
    float mean, rstd;
    lab_ln_stats(x + at, c, s, &mean, &rstd);
    lab_ln_write_thread(y + at, x + at, w, b, c, mean, rstd, threadIdx.x, LAB_LN_THREADS);
}

extern "C" __global__ void __launch_bounds__(LAB_LN_THREADS)
    lab_ln_bwd(const float* x, const float* w, const float* dy, float* dx, float* partials,
               int rows, int c) {
    __shared__ float s[LAB_LN_THREADS];
    __shared__ float s2[LAB_LN_THREADS];
    int tid = threadIdx.x;
    float* acc = partials + (long long)blockIdx.x * 2 * c;
    int lo = blockIdx.x * LAB_LN_ROWS;
    int hi = lo + LAB_LN_ROWS < rows ? lo + LAB_LN_ROWS : rows;
    for (int r = lo; r < hi; r++) {
        long long at = (long long)r * c;
        float mean, rstd, m1, m2;
        lab_ln_stats(x + at, c, s, &mean, &rstd);
        lab_ln_m_thread(x + at, w, dy + at, c, mean, rstd, tid, LAB_LN_THREADS, &s[tid],
                        &s2[tid]);
        __syncthreads();
        for (int half = LAB_LN_THREADS / 2; half > 0; half /= 2) {
            lab_ln_tree_step(s, tid, half);
            lab_ln_tree_step(s2, tid, half);
            __syncthreads();
        }
        m1 = s[0] / (float)c;
        m2 = s2[0] / (float)c;
        __syncthreads();
        lab_ln_dx_thread(dx + at, acc, x + at, w, dy + at, c, mean, rstd, m1, m2, r == lo, tid,
                         LAB_LN_THREADS);
    }
}

extern "C" __global__ void lab_ln_bwd_sum(const float* partials, int blocks, int c2, float* out) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < c2) out[j] = lab_ln_col_sum(partials, blocks, c2, j);
}

#else

// The host's run of each launch, block by block and thread by thread, for the tests.
extern "C" {

void lab_ln_constants(int* threads, int* rows) {
    *threads = LAB_LN_THREADS;
    *rows = LAB_LN_ROWS;
}

// A block's stats as the GPU's block sums compute them.
static void lab_ln_stats_host(const float* x, int c, float* mean, float* rstd) {
    float s[LAB_LN_THREADS];
    for (int i = 0; i < LAB_LN_THREADS; i++) s[i] = lab_ln_sum_thread(x, c, i, LAB_LN_THREADS);
    for (int half = LAB_LN_THREADS / 2; half > 0; half /= 2)
        for (int i = 0; i < LAB_LN_THREADS; i++) lab_ln_tree_step(s, i, half);
    *mean = s[0] / (float)c;
    for (int i = 0; i < LAB_LN_THREADS; i++)
        s[i] = lab_ln_sq_thread(x, c, *mean, i, LAB_LN_THREADS);
    for (int half = LAB_LN_THREADS / 2; half > 0; half /= 2)
        for (int i = 0; i < LAB_LN_THREADS; i++) lab_ln_tree_step(s, i, half);
    *rstd = lab_ln_rstd(s[0], c);
}

void lab_ln_fwd_host(const float* x, const float* w, const float* b, float* y, int rows, int c) {
    for (int r = 0; r < rows; r++) {
        long long at = (long long)r * c;
        float mean, rstd;
        lab_ln_stats_host(x + at, c, &mean, &rstd);
        for (int i = 0; i < LAB_LN_THREADS; i++)
            lab_ln_write_thread(y + at, x + at, w, b, c, mean, rstd, i, LAB_LN_THREADS);
    }
}

void lab_ln_bwd_host(const float* x, const float* w, const float* dy, float* dx, float* partials,
                     int rows, int c) {
    int blocks = (rows + LAB_LN_ROWS - 1) / LAB_LN_ROWS;
    float s[LAB_LN_THREADS], s2[LAB_LN_THREADS];
    for (int blk = 0; blk < blocks; blk++) {
        float* acc = partials + (long long)blk * 2 * c;
        int lo = blk * LAB_LN_ROWS;
        int hi = lo + LAB_LN_ROWS < rows ? lo + LAB_LN_ROWS : rows;
        for (int r = lo; r < hi; r++) {
            long long at = (long long)r * c;
            float mean, rstd;
            lab_ln_stats_host(x + at, c, &mean, &rstd);
            for (int i = 0; i < LAB_LN_THREADS; i++)
                lab_ln_m_thread(x + at, w, dy + at, c, mean, rstd, i, LAB_LN_THREADS, &s[i],
                                &s2[i]);
            for (int half = LAB_LN_THREADS / 2; half > 0; half /= 2)
                for (int i = 0; i < LAB_LN_THREADS; i++) {
                    lab_ln_tree_step(s, i, half);
                    lab_ln_tree_step(s2, i, half);
                }
            float m1 = s[0] / (float)c, m2 = s2[0] / (float)c;
            for (int i = 0; i < LAB_LN_THREADS; i++)
                lab_ln_dx_thread(dx + at, acc, x + at, w, dy + at, c, mean, rstd, m1, m2, r == lo,
                                 i, LAB_LN_THREADS);
        }
    }
}

void lab_ln_bwd_sum_host(const float* partials, int blocks, int c2, float* out) {
    for (int j = 0; j < c2; j++) out[j] = lab_ln_col_sum(partials, blocks, c2, j);
}
}

#endif
