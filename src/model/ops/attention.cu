// Causal self-attention over packed sequences on a CUDA GPU (src/model/ops/attention.rs
// launches it): q|k|v rows (N, 3E) as HF GPT-2's c_attn writes them, sequences back to back
// (starts and lengths given), heads of hd; the output (N, E). No padded copy and no mask
// tensor: each query row reads the keys up to its own.
//
//   lab_att_fwd  one block per (sequence, head), a thread per query row (rows looped past
//                LAB_ATT_THREADS): the row's maximum score, then Σ exp(s − m)·v / Σ exp(s − m);
//   lab_att_bwd  one block per (sequence, head): each query row's m, 1/l and
//                D = Σ p·(dO·v) into shared memory, then a thread per key row sums its dk and
//                dv over the queries that see it, and a thread per query row its dq.
//
// Every sum runs in a fixed order and each output value is written by one thread: the same
// bits every run, no atomics. The arithmetic is in the LAB_HD functions, built for the GPU
// (nvcc, -fmad=false) and for the host (build.rs), where the tests (src/model/ops/cuda_host.rs)
// run every block and thread against the CPU kernel.

#ifdef __CUDACC__
#define LAB_HD __host__ __device__
#else
#define LAB_HD
#include <math.h>
#endif

#define LAB_ATT_THREADS 64
// The largest head size (per-thread accumulators) and sequence length (per-block statistics).
#define LAB_ATT_MAX_D 128
#define LAB_ATT_MAX_T 1024

// The rows of head h: q, k and v of row r, and r's slot of a (N, E) tensor.
LAB_HD inline const float* lab_att_q(const float* qkv, long long r, int e, int hd, int h) {
    return qkv + r * 3 * e + h * hd;
}

LAB_HD inline float lab_att_dot(const float* a, const float* b, int hd) {
    float acc = 0.0f;
    for (int d = 0; d < hd; d++) acc += a[d] * b[d];
    return acc;
}

// The maximum of query i's scores (q_i·k_j)·scale over keys j ≤ i; `row0` is the sequence's
// first row.
LAB_HD inline float lab_att_max(const float* qkv, long long row0, int i, int e, int hd, int h,
                                float scale) {
    const float* q = lab_att_q(qkv, row0 + i, e, hd, h);
    float m = lab_att_dot(q, lab_att_q(qkv, row0, e, hd, h) + e, hd) * scale;
    for (int j = 1; j <= i; j++) {
        float s = lab_att_dot(q, lab_att_q(qkv, row0 + j, e, hd, h) + e, hd) * scale;
        m = s > m ? s : m;
    }
    return m;
}

// Query row i's output: Σ_j exp(s_j − m)·v_j / Σ_j exp(s_j − m), into y (N, E).
LAB_HD inline void lab_att_fwd_row(const float* qkv, float* y, long long row0, int i, int e,
                                   int hd, int h, float scale) {
    const float* q = lab_att_q(qkv, row0 + i, e, hd, h);
    float m = lab_att_max(qkv, row0, i, e, hd, h, scale);
    float o[LAB_ATT_MAX_D];
    for (int d = 0; d < hd; d++) o[d] = 0.0f;
    float l = 0.0f;
    for (int j = 0; j <= i; j++) {
        const float* k = lab_att_q(qkv, row0 + j, e, hd, h) + e;
        float p = expf(lab_att_dot(q, k, hd) * scale - m);
        l += p;
        for (int d = 0; d < hd; d++) o[d] += p * k[e + d];
    }
    float* out = y + (row0 + i) * e + h * hd;
    for (int d = 0; d < hd; d++) out[d] = o[d] / l;
}

// Query row i's statistics for the backward: m, 1/l and D = Σ_j p_j (dO·v_j).
LAB_HD inline void lab_att_bwd_stats(const float* qkv, const float* dy, long long row0, int i,
                                     int e, int hd, int h, float scale, float* m_out,
                                     float* inv_l_out, float* dd_out) {
    const float* q = lab_att_q(qkv, row0 + i, e, hd, h);
    const float* g = dy + (row0 + i) * e + h * hd;
    float m = lab_att_max(qkv, row0, i, e, hd, h, scale);
    float l = 0.0f, dsum = 0.0f;
    for (int j = 0; j <= i; j++) {
        const float* k = lab_att_q(qkv, row0 + j, e, hd, h) + e;
        float p = expf(lab_att_dot(q, k, hd) * scale - m);
        l += p;
        dsum += p * lab_att_dot(g, k + e, hd);
    }
    *m_out = m;
    *inv_l_out = 1.0f / l;
    *dd_out = dsum / l;
}

// The gradient of score s_ij, p_ij (dp_ij − D_i)·scale, with p_ij = exp(s_ij − m_i)/l_i into
// *p and dp_ij = dO_i·v_j; `k` is key row j (its v follows at k + e).
LAB_HD inline float lab_att_ds(const float* q, const float* g, const float* k, int e, int hd,
                               float scale, float m, float inv_l, float dd, float* p) {
    *p = expf(lab_att_dot(q, k, hd) * scale - m) * inv_l;
    return *p * (lab_att_dot(g, k + e, hd) - dd) * scale;
}

// Key row j's dk and dv, over the queries i ≥ j that see it, into dqkv (N, 3E).
LAB_HD inline void lab_att_bwd_key(const float* qkv, const float* dy, float* dqkv, long long row0,
                                   int j, int t, int e, int hd, int h, float scale,
                                   const float* m, const float* inv_l, const float* dd) {
    const float* k = lab_att_q(qkv, row0 + j, e, hd, h) + e;
    float dk[LAB_ATT_MAX_D], dv[LAB_ATT_MAX_D];
    for (int d = 0; d < hd; d++) dk[d] = dv[d] = 0.0f;
    for (int i = j; i < t; i++) {
        const float* q = lab_att_q(qkv, row0 + i, e, hd, h);
        const float* g = dy + (row0 + i) * e + h * hd;
        float p;
        float ds = lab_att_ds(q, g, k, e, hd, scale, m[i], inv_l[i], dd[i], &p);
        for (int d = 0; d < hd; d++) {
            dv[d] += p * g[d];
            dk[d] += ds * q[d];
        }
    }
    float* out = dqkv + (row0 + j) * 3 * e + h * hd;
    for (int d = 0; d < hd; d++) {
        out[e + d] = dk[d];
        out[2 * e + d] = dv[d];
    }
}

// Query row i's dq, over the keys j ≤ i it sees, into dqkv (N, 3E).
LAB_HD inline void lab_att_bwd_query(const float* qkv, const float* dy, float* dqkv,
                                     long long row0, int i, int e, int hd, int h, float scale,
                                     const float* m, const float* inv_l, const float* dd) {
    const float* q = lab_att_q(qkv, row0 + i, e, hd, h);
    const float* g = dy + (row0 + i) * e + h * hd;
    float dq[LAB_ATT_MAX_D];
    for (int d = 0; d < hd; d++) dq[d] = 0.0f;
    for (int j = 0; j <= i; j++) {
        const float* k = lab_att_q(qkv, row0 + j, e, hd, h) + e;
        float p;
        float ds = lab_att_ds(q, g, k, e, hd, scale, m[i], inv_l[i], dd[i], &p);
        for (int d = 0; d < hd; d++) dq[d] += ds * k[d];
    }
    float* out = dqkv + (row0 + i) * 3 * e + h * hd;
    for (int d = 0; d < hd; d++) out[d] = dq[d];
}

#ifdef __CUDACC__

extern "C" __global__ void __launch_bounds__(LAB_ATT_THREADS)
    lab_att_fwd(const float* qkv, float* y, const int* starts, const int* lens, int e, int hd,
                float scale) {
    long long row0 = starts[blockIdx.x];
    int t = lens[blockIdx.x], h = blockIdx.y;
    for (int i = threadIdx.x; i < t; i += LAB_ATT_THREADS)
        lab_att_fwd_row(qkv, y, row0, i, e, hd, h, scale);
}

extern "C" __global__ void __launch_bounds__(LAB_ATT_THREADS)
    lab_att_bwd(const float* qkv, const float* dy, float* dqkv, const int* starts,
                const int* lens, int e, int hd, float scale) {
    __shared__ float m[LAB_ATT_MAX_T], inv_l[LAB_ATT_MAX_T], dd[LAB_ATT_MAX_T];
    long long row0 = starts[blockIdx.x];
    int t = lens[blockIdx.x], h = blockIdx.y;
    for (int i = threadIdx.x; i < t; i += LAB_ATT_THREADS)
        lab_att_bwd_stats(qkv, dy, row0, i, e, hd, h, scale, &m[i], &inv_l[i], &dd[i]);
    __syncthreads();
    for (int j = threadIdx.x; j < t; j += LAB_ATT_THREADS)
        lab_att_bwd_key(qkv, dy, dqkv, row0, j, t, e, hd, h, scale, m, inv_l, dd);
    for (int i = threadIdx.x; i < t; i += LAB_ATT_THREADS)
        lab_att_bwd_query(qkv, dy, dqkv, row0, i, e, hd, h, scale, m, inv_l, dd);
}

#else

// The host's run of each launch, block by block and thread by thread, for the tests.
extern "C" {

void lab_att_constants(int* threads, int* max_d, int* max_t) {
    *threads = LAB_ATT_THREADS;
    *max_d = LAB_ATT_MAX_D;
    *max_t = LAB_ATT_MAX_T;
}

void lab_att_fwd_host(const float* qkv, float* y, const int* starts, const int* lens, int n_seq,
                      int n_head, int e, int hd, float scale) {
    for (int s = 0; s < n_seq; s++)
        for (int h = 0; h < n_head; h++)
            for (int tid = 0; tid < LAB_ATT_THREADS; tid++)
                for (int i = tid; i < lens[s]; i += LAB_ATT_THREADS)
                    lab_att_fwd_row(qkv, y, starts[s], i, e, hd, h, scale);
}

void lab_att_bwd_host(const float* qkv, const float* dy, float* dqkv, const int* starts,
                      const int* lens, int n_seq, int n_head, int e, int hd, float scale) {
    float m[LAB_ATT_MAX_T], inv_l[LAB_ATT_MAX_T], dd[LAB_ATT_MAX_T];
    for (int s = 0; s < n_seq; s++)
        for (int h = 0; h < n_head; h++) {
            long long row0 = starts[s];
            int t = lens[s];
            for (int tid = 0; tid < LAB_ATT_THREADS; tid++)
                for (int i = tid; i < t; i += LAB_ATT_THREADS)
                    lab_att_bwd_stats(qkv, dy, row0, i, e, hd, h, scale, &m[i], &inv_l[i],
                                      &dd[i]);
            for (int tid = 0; tid < LAB_ATT_THREADS; tid++) {
                for (int j = tid; j < t; j += LAB_ATT_THREADS)
                    lab_att_bwd_key(qkv, dy, dqkv, row0, j, t, e, hd, h, scale, m, inv_l, dd);
                for (int i = tid; i < t; i += LAB_ATT_THREADS)
                    lab_att_bwd_query(qkv, dy, dqkv, row0, i, e, hd, h, scale, m, inv_l, dd);
            }
        }
}
}

#endif
