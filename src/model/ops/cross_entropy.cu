// Cross-entropy of logits rows against targets on a CUDA GPU (src/model/ops/cross_entropy.rs
// launches it): loss_r = log Σ_i exp(x_ri − m_r) + m_r − x_r,t(r), with m_r the row's maximum,
// and its backward dx_ri = (exp(x_ri − m_r) / Σ − [i = t(r)])·dloss_r. The head's products stay
// cuBLAS's; this replaces the log-softmax, gather and their backward (no log-probabilities kept).
//
//   lab_ce_fwd, lab_ce_bwd   one block a row: the maximum and the sum by fixed-order block
//                            reductions, then the row's loss, or its gradient: by each row's
//                            dloss_r, or (dloss null) by one `scale` for every row, and then the
//                            loss times it too where `loss` is not null (the head's loss, which
//                            turns each chunk's logits into their gradient in its forward, with
//                            scale 1/n, so that the mean is one sum).
//
// The arithmetic is in the LAB_HD functions, built for the GPU (nvcc, -fmad=false) and for the
// host (build.rs), which is also the op's CPU version (the CPU model's head fuses its own).

#ifdef __CUDACC__
#define LAB_HD __host__ __device__
#else
#define LAB_HD
#include <math.h>
#endif

#define LAB_CE_THREADS 256

// One thread's share of a row's maximum (its first element when it has none).
LAB_HD inline float lab_ce_max_thread(const float* x, int v, int tid, int threads) {
    float m = x[tid < v ? tid : 0];
    for (int i = tid; i < v; i += threads) m = x[i] > m ? x[i] : m;
    return m;
}

// One thread's share of Σ exp(x − m).
LAB_HD inline float lab_ce_sum_thread(const float* x, int v, float m, int tid, int threads) {
    float acc = 0.0f;
    for (int i = tid; i < v; i += threads) acc += expf(x[i] - m);
    return acc;
}

LAB_HD inline void lab_ce_max_step(float* s, int tid, int half) {
    if (tid < half && s[tid + half] > s[tid]) s[tid] = s[tid + half];
}

LAB_HD inline void lab_ce_sum_step(float* s, int tid, int half) {
    if (tid < half) s[tid] += s[tid + half];
}

// One thread's share of a row's gradient.
LAB_HD inline void lab_ce_grad_thread(float* dx, const float* x, int v, unsigned t, float m,
                                      float inv_sum, float g, int tid, int threads) {
    for (int i = tid; i < v; i += threads) {
        float p = expf(x[i] - m) * inv_sum;
        dx[i] = (p - ((unsigned)i == t ? 1.0f : 0.0f)) * g;
    }
}

#ifdef __CUDACC__

// The row's maximum and Σ exp(x − m), every thread of the block taking part.
__device__ inline void lab_ce_stats(const float* x, int v, float* s, float* m, float* sum) {
    int tid = threadIdx.x;
    s[tid] = lab_ce_max_thread(x, v, tid, LAB_CE_THREADS);
    __syncthreads();
    for (int half = LAB_CE_THREADS / 2; half > 0; half /= 2) {
        lab_ce_max_step(s, tid, half);
        __syncthreads();
    }
    *m = s[0];
    __syncthreads();
    s[tid] = lab_ce_sum_thread(x, v, *m, tid, LAB_CE_THREADS);
    __syncthreads();
    for (int half = LAB_CE_THREADS / 2; half > 0; half /= 2) {
        lab_ce_sum_step(s, tid, half);
        __syncthreads();
    }
    *sum = s[0];
}

extern "C" __global__ void __launch_bounds__(LAB_CE_THREADS)
    lab_ce_fwd(const float* x, const unsigned* targets, float* loss, int v) {
    __shared__ float s[LAB_CE_THREADS];
    const float* row = x + (long long)blockIdx.x * v;
    float m, sum;
    lab_ce_stats(row, v, s, &m, &sum);
    if (threadIdx.x == 0) loss[blockIdx.x] = logf(sum) + m - row[targets[blockIdx.x]];
}

extern "C" __global__ void __launch_bounds__(LAB_CE_THREADS)
    lab_ce_bwd(const float* x, const unsigned* targets, const float* dloss, float scale, float* dx,
               float* loss, int v) {
    __shared__ float s[LAB_CE_THREADS];
    long long at = (long long)blockIdx.x * v;
    float m, sum;
    lab_ce_stats(x + at, v, s, &m, &sum);
    float g = dloss ? dloss[blockIdx.x] : scale;
    if (loss && threadIdx.x == 0)
        loss[blockIdx.x] = (logf(sum) + m - x[at + targets[blockIdx.x]]) * g;
    lab_ce_grad_thread(dx + at, x + at, v, targets[blockIdx.x], m, 1.0f / sum, g, threadIdx.x,
                       LAB_CE_THREADS);
}

#else

// The host's run of each launch, block by block and thread by thread: the tests' and the CPU's.
extern "C" {

int lab_ce_threads(void) { return LAB_CE_THREADS; }

static void lab_ce_stats_host(const float* x, int v, float* m, float* sum) {
    float s[LAB_CE_THREADS];
    for (int i = 0; i < LAB_CE_THREADS; i++) s[i] = lab_ce_max_thread(x, v, i, LAB_CE_THREADS);
    for (int half = LAB_CE_THREADS / 2; half > 0; half /= 2)
        for (int i = 0; i < LAB_CE_THREADS; i++) lab_ce_max_step(s, i, half);
    *m = s[0];
    for (int i = 0; i < LAB_CE_THREADS; i++) s[i] = lab_ce_sum_thread(x, v, *m, i, LAB_CE_THREADS);
    for (int half = LAB_CE_THREADS / 2; half > 0; half /= 2)
        for (int i = 0; i < LAB_CE_THREADS; i++) lab_ce_sum_step(s, i, half);
    *sum = s[0];
}

void lab_ce_fwd_host(const float* x, const unsigned* targets, float* loss, int n, int v) {
    for (int r = 0; r < n; r++) {
        const float* row = x + (long long)r * v;
        float m, sum;
        lab_ce_stats_host(row, v, &m, &sum);
        loss[r] = logf(sum) + m - row[targets[r]];
    }
}

void lab_ce_bwd_host(const float* x, const unsigned* targets, const float* dloss, float scale,
                     float* dx, float* loss, int n, int v) {
    for (int r = 0; r < n; r++) {
        long long at = (long long)r * v;
        float m, sum;
        lab_ce_stats_host(x + at, v, &m, &sum);
        float g = dloss ? dloss[r] : scale;
        if (loss) loss[r] = (logf(sum) + m - x[at + targets[r]]) * g;
        for (int i = 0; i < LAB_CE_THREADS; i++)
            lab_ce_grad_thread(dx + at, x + at, v, targets[r], m, 1.0f / sum, g, i,
                               LAB_CE_THREADS);
    }
}
}

#endif
