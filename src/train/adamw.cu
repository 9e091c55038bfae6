// AdamW and the global gradient norm for every parameter tensor in a few launches a step
// (src/train/adamw/cuda.rs launches them), in the manner of apex's multi_tensor_apply and
// PyTorch's fused AdamW: a table of up to LAB_MT_TENSORS tensors (pointers, sizes, decay) goes
// in the kernel's arguments, and each block takes one chunk of one tensor.
//
//   lab_sumsq       each block's sum of g² over its chunk, in f64, into partials[base + block];
//   lab_norm_finish one block: ‖g‖ = sqrt(Σ partials) and the clip factor, both left on the GPU;
//   lab_adamw       the update of every element, with the clip factor read from the GPU.
//
// All arithmetic is in the LAB_HD functions, which build for the GPU (nvcc, -fmad=false, so
// that no multiply-add is fused) and for the host (build.rs, with the C++ compiler), where the
// tests (src/train/adamw/host.rs) run every block and thread of each launch in turn and
// compare with the CPU AdamW. Sums run in a fixed order: the same inputs give the same bits.

#ifdef __CUDACC__
#define LAB_HD __host__ __device__
#else
#define LAB_HD
#include <math.h>
#endif

#define LAB_MT_TENSORS 64
#define LAB_MT_CHUNK 65536
#define LAB_MT_THREADS 256

// The tensors of one launch. Kept under the 4 KB of kernel arguments that every driver takes;
// src/train/adamw/cuda.rs mirrors it field for field (#[repr(C)]), and a test checks the size.
struct LabMtTable {
    float* p[LAB_MT_TENSORS];
    float* m[LAB_MT_TENSORS];
    float* v[LAB_MT_TENSORS];
    const float* g[LAB_MT_TENSORS];
    long long len[LAB_MT_TENSORS];
    // Weight decay of each tensor: the configured one for rank >= 2, else 0.
    float decay[LAB_MT_TENSORS];
    // first_block[t] is tensor t's first block; first_block[n] is the launch's block count.
    int first_block[LAB_MT_TENSORS + 1];
    int n;
};

// The scalars of one update, as the CPU AdamW computes them (src/train/adamw.rs, `Update`).
struct LabAdamwScalars {
    float lr, beta1, beta2, eps, step_size, bc2_sqrt;
};

// The tensor that block `block` works on, and its element range [*lo, *hi).
LAB_HD inline int lab_mt_chunk(const LabMtTable* t, int block, long long* lo, long long* hi) {
    int k = 0;
    while (k + 1 < t->n && t->first_block[k + 1] <= block) k++;
    long long c = block - t->first_block[k];
    *lo = c * LAB_MT_CHUNK;
    long long end = *lo + LAB_MT_CHUNK;
    *hi = end < t->len[k] ? end : t->len[k];
    return k;
}

// One thread's share of a block's sum of squares: elements lo + tid, lo + tid + threads, ...
LAB_HD inline double lab_sumsq_thread(const LabMtTable* t, int block, int tid, int threads) {
    long long lo, hi;
    int k = lab_mt_chunk(t, block, &lo, &hi);
    const float* g = t->g[k];
    double acc = 0.0;
    for (long long i = lo + tid; i < hi; i += threads) {
        double x = (double)g[i];
        acc += x * x;
    }
    return acc;
}

// One thread's share of the sum of `n` partial sums.
LAB_HD inline double lab_sum_thread(const double* partials, int n, int tid, int threads) {
    double acc = 0.0;
    for (int i = tid; i < n; i += threads) acc += partials[i];
    return acc;
}

// One step of a block's tree reduction: the lower `half` threads add the upper half's values.
LAB_HD inline void lab_tree_step(double* s, int tid, int half) {
    if (tid < half) s[tid] += s[tid + half];
}

// The clip factor for a norm, as the CPU computes it: min(max_norm / (norm + 1e-6), 1), in f64.
LAB_HD inline float lab_clip(double norm, double max_norm) {
    double c = max_norm / (norm + 1e-6);
    return (float)(c < 1.0 ? c : 1.0);
}

// One element's update, in the CPU AdamW's order of operations.
LAB_HD inline void lab_adamw_elem(float* p, float* m, float* v, float g, float clip, float decay,
                                  LabAdamwScalars s) {
    float gi = g * clip;
    *m = s.beta1 * *m + (1.0f - s.beta1) * gi;
    *v = s.beta2 * *v + (1.0f - s.beta2) * gi * gi;
    *p *= 1.0f - s.lr * decay;
    *p -= s.step_size * *m / (sqrtf(*v) / s.bc2_sqrt + s.eps);
}

// One thread's share of a block's update.
LAB_HD inline void lab_adamw_thread(const LabMtTable* t, int block, int tid, int threads,
                                    float clip, LabAdamwScalars s) {
    long long lo, hi;
    int k = lab_mt_chunk(t, block, &lo, &hi);
    float *p = t->p[k], *m = t->m[k], *v = t->v[k];
    const float* g = t->g[k];
    for (long long i = lo + tid; i < hi; i += threads)
        lab_adamw_elem(&p[i], &m[i], &v[i], g[i], clip, t->decay[k], s);
}

#ifdef __CUDACC__

// The block's values in s[0 .. LAB_MT_THREADS) summed into s[0], in a fixed order.
__device__ inline void lab_block_sum(double* s) {
    __syncthreads();
    for (int half = LAB_MT_THREADS / 2; half > 0; half /= 2) {
        lab_tree_step(s, threadIdx.x, half);
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(LAB_MT_THREADS)
    lab_sumsq(const LabMtTable t, double* partials, int base) {
    __shared__ double s[LAB_MT_THREADS];
    s[threadIdx.x] = lab_sumsq_thread(&t, blockIdx.x, threadIdx.x, LAB_MT_THREADS);
    lab_block_sum(s);
    if (threadIdx.x == 0) partials[base + blockIdx.x] = s[0];
}

extern "C" __global__ void __launch_bounds__(LAB_MT_THREADS)
    lab_norm_finish(const double* partials, int n, double max_norm, double* norm, float* clip) {
    __shared__ double s[LAB_MT_THREADS];
    s[threadIdx.x] = lab_sum_thread(partials, n, threadIdx.x, LAB_MT_THREADS);
    lab_block_sum(s);
    if (threadIdx.x == 0) {
        double r = sqrt(s[0]);
        *norm = r;
        *clip = lab_clip(r, max_norm);
    }
}

extern "C" __global__ void __launch_bounds__(LAB_MT_THREADS)
    lab_adamw(const LabMtTable t, const float* clip, LabAdamwScalars s) {
    lab_adamw_thread(&t, blockIdx.x, threadIdx.x, LAB_MT_THREADS, *clip, s);
}

#else

// The host's run of each launch, block by block and thread by thread, for the tests.
extern "C" {

unsigned long lab_mt_table_size(void) { return sizeof(LabMtTable); }

void lab_mt_constants(int* tensors, int* chunk, int* threads) {
    *tensors = LAB_MT_TENSORS;
    *chunk = LAB_MT_CHUNK;
    *threads = LAB_MT_THREADS;
}

void lab_sumsq_host(const LabMtTable* t, double* partials, int base) {
    double s[LAB_MT_THREADS];
    for (int b = 0; b < t->first_block[t->n]; b++) {
        for (int i = 0; i < LAB_MT_THREADS; i++) s[i] = lab_sumsq_thread(t, b, i, LAB_MT_THREADS);
        for (int half = LAB_MT_THREADS / 2; half > 0; half /= 2)
            for (int i = 0; i < LAB_MT_THREADS; i++) lab_tree_step(s, i, half);
        partials[base + b] = s[0];
    }
}

void lab_norm_finish_host(const double* partials, int n, double max_norm, double* norm,
                          float* clip) {
    double s[LAB_MT_THREADS];
    for (int i = 0; i < LAB_MT_THREADS; i++) s[i] = lab_sum_thread(partials, n, i, LAB_MT_THREADS);
    for (int half = LAB_MT_THREADS / 2; half > 0; half /= 2)
        for (int i = 0; i < LAB_MT_THREADS; i++) lab_tree_step(s, i, half);
    *norm = sqrt(s[0]);
    *clip = lab_clip(*norm, max_norm);
}

void lab_adamw_host(const LabMtTable* t, const float* clip, LabAdamwScalars s) {
    for (int b = 0; b < t->first_block[t->n]; b++)
        for (int i = 0; i < LAB_MT_THREADS; i++)
            lab_adamw_thread(t, b, i, LAB_MT_THREADS, *clip, s);
}
}

#endif
