// The token and position embeddings on a CUDA GPU (src/model/ops/embedding.rs launches it):
// x[r] = wte[ids[r]] + wpe[pos[r]], and the backward's two scatter-adds, dwte[t] = Σ dx[r] over
// the rows r with ids[r] = t and dwpe likewise, each value summed over the rows in row order
// from zero, as candle's index_add sums (so the host build, the op's CPU version, keeps the
// CPU's bits). `tok` holds the ids then the positions (2n values).
//
//   lab_emb_fwd   one thread an element of x.
//   lab_emb_bwd   one thread a column of one table: it walks the n rows in order, adding each
//                 row's dx into the table row its index names (the outputs start at zero).
//
// The arithmetic is in the LAB_HD functions, built for the GPU (nvcc, -fmad=false) and for the
// host (build.rs), where the host functions are the op's CPU version.

#ifdef __CUDACC__
#define LAB_HD __host__ __device__
#else
#define LAB_HD
#endif

#define LAB_EMB_THREADS 256

LAB_HD inline float lab_emb(const float* wte, const float* wpe, const unsigned* tok, long long i,
                            long long n, int e) {
    long long r = i / e, c = i % e;
    return wte[(long long)tok[r] * e + c] + wpe[(long long)tok[n + r] * e + c];
}

// Column c of table `which` (0: wte, by the ids; 1: wpe, by the positions) of the backward.
LAB_HD inline void lab_emb_grad(const float* dx, const unsigned* tok, float* dwte, float* dwpe,
                                long long n, int e, int which, int c) {
    float* d = which == 0 ? dwte : dwpe;
    const unsigned* idx = tok + (which == 0 ? 0 : n);
    for (long long r = 0; r < n; r++) d[(long long)idx[r] * e + c] += dx[r * e + c];
}

#ifdef __CUDACC__

extern "C" __global__ void __launch_bounds__(LAB_EMB_THREADS)
    lab_emb_fwd(const float* wte, const float* wpe, const unsigned* tok, float* x, long long n,
                int e) {
    long long i = (long long)blockIdx.x * LAB_EMB_THREADS + threadIdx.x;
    if (i < n * e) x[i] = lab_emb(wte, wpe, tok, i, n, e);
}

extern "C" __global__ void __launch_bounds__(LAB_EMB_THREADS)
    lab_emb_bwd(const float* dx, const unsigned* tok, float* dwte, float* dwpe, long long n,
                int e) {
    int t = blockIdx.x * LAB_EMB_THREADS + threadIdx.x;
    if (t < 2 * e) lab_emb_grad(dx, tok, dwte, dwpe, n, e, t / e, t % e);
}

#else

extern "C" {

int lab_emb_threads(void) { return LAB_EMB_THREADS; }

void lab_emb_fwd_host(const float* wte, const float* wpe, const unsigned* tok, float* x,
                      long long n, int e) {
    for (long long i = 0; i < n * e; i++) x[i] = lab_emb(wte, wpe, tok, i, n, e);
}

// dwte and dwpe start at zero (the caller's).
void lab_emb_bwd_host(const float* dx, const unsigned* tok, float* dwte, float* dwpe,
                      long long n, int e) {
    for (int t = 0; t < 2 * e; t++) lab_emb_grad(dx, tok, dwte, dwpe, n, e, t / e, t % e);
}
}

#endif
