// What a CUDA process asks of the GPU, counted: an LD_PRELOAD library that stands between the
// lab and libcuda/libcublas (the lab binary calls them through its PLT) and, at exit, writes to
// $LAB_LAUNCHES how many kernels it launched (each kernel by name), cuBLAS and cuBLASLt
// products, memsets,
// copies each way, stream-ordered allocations and frees, and host waits on the stream.
//
//   gcc -O2 -shared -fPIC -o dist/liblaunches.so scripts/bench/launches.c -ldl -lpthread
//   LD_PRELOAD=dist/liblaunches.so LAB_LAUNCHES=out.txt lab train ... --max-steps 4
//
// The launches of one step are those of a run of 4 steps less those of a run of 2, halved
// (scripts/bench/launches.py). cuBLAS's own kernels are launched inside libcublas, out of this
// library's reach: each product counts once here (cuBLAS runs one or two kernels for one).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef void* CUfunction;
typedef void* CUstream;
typedef unsigned long long CUdeviceptr;
typedef int cublasStatus_t;
typedef void* cublasHandle_t;

enum { LAUNCHES, GEMMS, MEMSETS, HTOD, DTOH, DTOD, ALLOCS, FREES, SYNCS, COUNTERS };
static const char* counter_names[COUNTERS] = {"launches", "gemms", "memsets", "copies_htod",
                                              "copies_dtoh", "copies_dtod", "allocs",
                                              "frees", "syncs"};
static unsigned long long counters[COUNTERS];

// Launches by function: open addressing over the CUfunction pointers, each name read once.
#define SLOTS 8192
static struct {
    CUfunction f;
    unsigned long long n;
    char name[160];
} slots[SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void* real(const char* name) {
    void* p = dlsym(RTLD_NEXT, name);
    if (!p) {
        fprintf(stderr, "launches: %s not found after this library\n", name);
        abort();
    }
    return p;
}

static void count(int c) {
    pthread_mutex_lock(&lock);
    counters[c]++;
    pthread_mutex_unlock(&lock);
}

static void count_launch(CUfunction f) {
    static CUresult (*get_name)(const char**, CUfunction);
    static int looked;
    pthread_mutex_lock(&lock);
    counters[LAUNCHES]++;
    size_t i = ((uintptr_t)f >> 4) % SLOTS;
    for (size_t k = 0; k < SLOTS; k++, i = (i + 1) % SLOTS) {
        if (slots[i].f == f) {
            slots[i].n++;
            break;
        }
        if (!slots[i].f) {
            slots[i].f = f;
            slots[i].n = 1;
            if (!looked) {
                get_name = (CUresult(*)(const char**, CUfunction))dlsym(RTLD_NEXT, "cuFuncGetName");
                looked = 1;
            }
            const char* name = NULL;
            if (!get_name || get_name(&name, f) != 0 || !name) name = "?";
            snprintf(slots[i].name, sizeof slots[i].name, "%s", name);
            break;
        }
    }
    pthread_mutex_unlock(&lock);
}

__attribute__((destructor)) static void report(void) {
    const char* path = getenv("LAB_LAUNCHES");
    if (!path) return;
    // A process that asked nothing of the GPU (a `timeout` or `time` wrapping the lab, which
    // inherits the preload and exits after it) leaves the lab's counts as they are; one alone
    // (the lab on a CPU) writes its zeros.
    unsigned long long any = 0;
    for (int c = 0; c < COUNTERS; c++) any += counters[c];
    if (!any && access(path, F_OK) == 0) return;
    FILE* out = fopen(path, "w");
    if (!out) {
        fprintf(stderr, "launches: cannot write %s\n", path);
        return;
    }
    for (int c = 0; c < COUNTERS; c++) fprintf(out, "%s %llu\n", counter_names[c], counters[c]);
    for (size_t i = 0; i < SLOTS; i++)
        if (slots[i].f) fprintf(out, "kernel %llu %s\n", slots[i].n, slots[i].name);
    fclose(out);
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned smem, CUstream s, void** params,
                        void** extra) {
    static CUresult (*next)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, CUstream, void**, void**);
    if (!next) next = real("cuLaunchKernel");
    count_launch(f);
    return next(f, gx, gy, gz, bx, by, bz, smem, s, params, extra);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, int ta, int tb, int m, int n, int k,
                                          const void* alpha, const void* a, int at, int lda,
                                          long long sa, const void* b, int bt, int ldb,
                                          long long sb, const void* beta, void* c, int ct,
                                          int ldc, long long sc, int batch, int compute,
                                          int algo) {
    static cublasStatus_t (*next)(cublasHandle_t, int, int, int, int, int, const void*,
                                  const void*, int, int, long long, const void*, int, int,
                                  long long, const void*, void*, int, int, long long, int, int,
                                  int);
    if (!next) next = real("cublasGemmStridedBatchedEx");
    count(GEMMS);
    return next(h, ta, tb, m, n, k, alpha, a, at, lda, sa, b, bt, ldb, sb, beta, c, ct, ldc, sc,
                batch, compute, algo);
}

cublasStatus_t cublasLtMatmul(void* h, void* desc, const void* alpha, const void* a, void* al,
                              const void* b, void* bl, const void* beta, const void* c, void* cl,
                              void* d, void* dl, const void* algo, void* ws, size_t wss,
                              void* stream) {
    static cublasStatus_t (*next)(void*, void*, const void*, const void*, void*, const void*,
                                  void*, const void*, const void*, void*, void*, void*,
                                  const void*, void*, size_t, void*);
    if (!next) next = real("cublasLtMatmul");
    count(GEMMS);
    return next(h, desc, alpha, a, al, b, bl, beta, c, cl, d, dl, algo, ws, wss, stream);
}

CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
    static CUresult (*next)(CUdeviceptr, unsigned char, size_t, CUstream);
    if (!next) next = real("cuMemsetD8Async");
    count(MEMSETS);
    return next(d, v, n, s);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* h, size_t n, CUstream s) {
    static CUresult (*next)(CUdeviceptr, const void*, size_t, CUstream);
    if (!next) next = real("cuMemcpyHtoDAsync_v2");
    count(HTOD);
    return next(d, h, n, s);
}

CUresult cuMemcpyDtoHAsync_v2(void* h, CUdeviceptr d, size_t n, CUstream s) {
    static CUresult (*next)(void*, CUdeviceptr, size_t, CUstream);
    if (!next) next = real("cuMemcpyDtoHAsync_v2");
    count(DTOH);
    return next(h, d, n, s);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s) {
    static CUresult (*next)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    if (!next) next = real("cuMemcpyDtoDAsync_v2");
    count(DTOD);
    return next(d, src, n, s);
}

CUresult cuMemAllocAsync(CUdeviceptr* d, size_t n, CUstream s) {
    static CUresult (*next)(CUdeviceptr*, size_t, CUstream);
    if (!next) next = real("cuMemAllocAsync");
    count(ALLOCS);
    return next(d, n, s);
}

CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s) {
    static CUresult (*next)(CUdeviceptr, CUstream);
    if (!next) next = real("cuMemFreeAsync");
    count(FREES);
    return next(d, s);
}

CUresult cuStreamSynchronize(CUstream s) {
    static CUresult (*next)(CUstream);
    if (!next) next = real("cuStreamSynchronize");
    count(SYNCS);
    return next(s);
}
