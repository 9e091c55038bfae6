// tanh-GELU (HF `gelu_new`) on a CUDA GPU (src/model/ops/gelu.rs launches it), the CPU kernel's
// formulas: t = tanh(√(2/π)(x + 0.044715x³)), y = x(1 + t)/2, and
// dx = dy·((1 + t)/2 + x(1 − t²)·√(2/π)(1 + 3·0.044715x²)/2), t computed again. (The MLP's bias
// is added in its product's epilogue, src/model/ops/cublaslt.rs.)
//
//   lab_gelu_fwd, lab_gelu_bwd   one thread an element, in blocks of LAB_GELU_THREADS.
//
// The arithmetic is in the LAB_HD functions, built for the GPU (nvcc, -fmad=false) and for the
// host (build.rs), where the tests (src/model/ops/cuda_host.rs) run it against the CPU kernel.

#ifdef __CUDACC__
#define LAB_HD __host__ __device__
#else
#define LAB_HD
#include <math.h>
#endif

#define LAB_GELU_THREADS 256
#define LAB_GELU_C 0.7978846f
#define LAB_GELU_A 0.044715f

LAB_HD inline float lab_gelu_tanh(float x) {
    return tanhf(LAB_GELU_C * (x + LAB_GELU_A * x * x * x));
}

LAB_HD inline float lab_gelu(float x) {
    return 0.5f * x * (1.0f + lab_gelu_tanh(x));
}

LAB_HD inline float lab_gelu_grad(float x, float g) {
    float th = lab_gelu_tanh(x);
    float du = LAB_GELU_C * (1.0f + 3.0f * LAB_GELU_A * x * x);
    return g * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
}

#ifdef __CUDACC__

extern "C" __global__ void __launch_bounds__(LAB_GELU_THREADS)
    lab_gelu_fwd(const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * LAB_GELU_THREADS + threadIdx.x;
    if (i < n) y[i] = lab_gelu(x[i]);
}

extern "C" __global__ void __launch_bounds__(LAB_GELU_THREADS)
    lab_gelu_bwd(const float* x, const float* dy, float* dx, long long n) {
    long long i = (long long)blockIdx.x * LAB_GELU_THREADS + threadIdx.x;
    if (i < n) dx[i] = lab_gelu_grad(x[i], dy[i]);
}

#else

extern "C" {

int lab_gelu_threads(void) { return LAB_GELU_THREADS; }

void lab_gelu_fwd_host(const float* x, float* y, long long n) {
    for (long long i = 0; i < n; i++) y[i] = lab_gelu(x[i]);
}

void lab_gelu_bwd_host(const float* x, const float* dy, float* dx, long long n) {
    for (long long i = 0; i < n; i++) dx[i] = lab_gelu_grad(x[i], dy[i]);
}
}

#endif
