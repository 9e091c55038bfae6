// A machine with no GPU standing in for one, for the CUDA binary's control path: libcuda,
// libcudart, libcublas, libcublasLt and libcurand in one library whose "device" memory is host
// memory, whose kernels and products do nothing, and whose module loads keep the PTX so that
// a kernel looked up by a name the PTX lacks fails as it would on a GPU. Memory costs the host
// what a GPU's costs it: a freed block is kept for the next allocation of its class (powers of
// two), as the GPU's stream-ordered pool keeps it, and copies and memsets of more than SMALL
// bytes are not done (on a GPU they are the device's work). So the wall time of a step over it
// is the host's own time (the lab's, candle's and these calls'), the floor of a step on a GPU
// without CUDA graphs. Values up to SMALL bytes are kept (the host's scalar reads, the tests'
// round trips) and an allocation of at most SMALL bytes reads as zero until written (a larger
// one as zero or as what a small write left in it), so what the lab reads back is zero or
// something it wrote: it checks what runs, not what it computes. With
// scripts/bench/launches.c preloaded on top it counts the launches of a step here without
// spending device time (scripts/gpu-check.sh --dry-run).
//
//   gcc -O2 -shared -fPIC -Wl,-soname,libcudart.so.13 -Wl,--default-symver
//       -o DIR/libnocuda.so scripts/bench/nocuda.c         (the binary asks for cudart's version)
//   for n in libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10;
//   do ln -s libnocuda.so DIR/$n; done; LD_LIBRARY_PATH=DIR dist/lab-cuda ...
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void* CUstream;

enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_FOUND = 500 };

static void* zeroed(size_t n) { return calloc(n ? n : 1, 1); }

// A handle nothing reads: a distinct address each time.
static void* handle(void) { return zeroed(16); }

// ---- libcuda -------------------------------------------------------------------------------

CUresult cuInit(unsigned flags) { return OK; }
CUresult cuDeviceGet(int* dev, int ordinal) {
    *dev = 0;
    return ordinal == 0 ? OK : INVALID_VALUE;
}

// An H100's figures for what candle and cudarc ask; 1 for anything else.
static int attribute(int attr) {
    switch (attr) {
        case 1: return 1024;        // max threads per block
        case 2: case 3: return 1024; // max block dim x, y
        case 4: return 64;          // max block dim z
        case 5: return 2147483647;  // max grid dim x
        case 6: case 7: return 65535;
        case 8: return 49152;       // shared memory per block
        case 10: return 32;         // warp size
        case 12: return 65536;      // registers per block
        case 16: return 132;        // multiprocessors
        case 39: return 2048;       // threads per multiprocessor
        case 75: return 9;          // compute capability
        case 76: return 0;
        case 81: return 233472;     // shared memory per multiprocessor
        case 97: return 232448;     // shared memory per block, opt-in
        default: return 1;
    }
}
CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
    *v = attribute(attr);
    return OK;
}
static void* context;
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
    if (!context) context = handle();
    *ctx = context;
    return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { return OK; }
CUresult cuCtxSetCurrent(void* ctx) { return OK; }
CUresult cuCtxGetCurrent(void** ctx) {
    *ctx = context;
    return OK;
}
CUresult cuCtxDestroy_v2(void* ctx) { return OK; }
CUresult cuDeviceGetDefaultMemPool(void** pool, int dev) {
    *pool = handle();
    return OK;
}
CUresult cuMemPoolSetAttribute(void* pool, int attr, void* v) { return OK; }
CUresult cuEventCreate(void** ev, unsigned flags) {
    *ev = handle();
    return OK;
}
CUresult cuEventDestroy_v2(void* ev) {
    free(ev);
    return OK;
}
CUresult cuEventRecord(void* ev, CUstream s) { return OK; }
CUresult cuStreamWaitEvent(CUstream s, void* ev, unsigned flags) { return OK; }
CUresult cuStreamDestroy_v2(CUstream s) { return OK; }
CUresult cuStreamIsCapturing(CUstream s, int* status) {
    *status = 0;
    return OK;
}
CUresult cuStreamSynchronize(CUstream s) { return OK; }
CUresult cuGetErrorString(CUresult r, const char** s) {
    *s = r == NOT_FOUND ? "named symbol not found (nocuda: no such .entry in the module's PTX)"
                        : "nocuda: stand-in error";
    return OK;
}

// Device memory: blocks in classes of powers of two, each behind a header of its class and,
// once freed, the next free block of the class. A block is zeroed when it is made and written
// only by copies and memsets of at most SMALL bytes, which a reused one of at most SMALL bytes
// (where the host's scalar reads land) has undone.
#define HEADER 64
#define CLASSES 64
#define SMALL 4096
typedef struct Block {
    size_t class;
    struct Block* next;
} Block;
static Block* pool[CLASSES];
// Guards the pool and the modules' lists of functions.
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

CUresult cuMemAlloc_v2(CUdeviceptr* d, size_t n) {
    size_t c = 0;
    while (((size_t)1 << c) < n) c++;
    pthread_mutex_lock(&lock);
    Block* b = pool[c];
    if (b) pool[c] = b->next;
    pthread_mutex_unlock(&lock);
    if (b) {
        if (n <= SMALL) memset((char*)b + HEADER, 0, n);
    } else {
        b = zeroed(HEADER + ((size_t)1 << c));
        if (!b) return OUT_OF_MEMORY;
        b->class = c;
    }
    *d = (CUdeviceptr)(uintptr_t)((char*)b + HEADER);
    return OK;
}
CUresult cuMemAllocAsync(CUdeviceptr* d, size_t n, CUstream s) { return cuMemAlloc_v2(d, n); }
CUresult cuMemFree_v2(CUdeviceptr d) {
    Block* b = (Block*)((char*)(uintptr_t)d - HEADER);
    pthread_mutex_lock(&lock);
    b->next = pool[b->class];
    pool[b->class] = b;
    pthread_mutex_unlock(&lock);
    return OK;
}
CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s) { return cuMemFree_v2(d); }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* h, size_t n, CUstream s) {
    if (n <= SMALL) memmove((void*)(uintptr_t)d, h, n);
    return OK;
}
CUresult cuMemcpyDtoHAsync_v2(void* h, CUdeviceptr d, size_t n, CUstream s) {
    memmove(h, (const void*)(uintptr_t)d, n);
    return OK;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s) {
    if (n <= SMALL) memmove((void*)(uintptr_t)d, (const void*)(uintptr_t)src, n);
    return OK;
}
CUresult cuMemcpyPeerAsync(CUdeviceptr d, void* dc, CUdeviceptr src, void* sc, size_t n,
                           CUstream s) {
    return cuMemcpyDtoDAsync_v2(d, src, n, s);
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
    if (n <= SMALL) memset((void*)(uintptr_t)d, v, n);
    return OK;
}

// Modules keep their PTX text and the functions looked up in it; a function is its name, the
// same handle for the same name (as a GPU's).
struct function {
    char name[160];
    struct function* next;
};
struct module {
    char* ptx;
    struct function* functions;
};
CUresult cuModuleLoadData(void** m, const void* image) {
    struct module* mod = zeroed(sizeof *mod);
    mod->ptx = strdup((const char*)image);
    *m = mod;
    return OK;
}
CUresult cuModuleLoad(void** m, const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NOT_FOUND;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* text = zeroed((size_t)n + 1);
    size_t got = fread(text, 1, (size_t)n, f);
    fclose(f);
    text[got] = 0;
    CUresult r = cuModuleLoadData(m, text);
    free(text);
    return r;
}
CUresult cuModuleUnload(void* m) { return OK; }

// Whether the PTX declares `.entry NAME` (followed by its parameter list).
static int declares(const char* ptx, const char* name) {
    size_t n = strlen(name);
    for (const char* at = strstr(ptx, ".entry "); at; at = strstr(at + 1, ".entry ")) {
        const char* s = at + 7;
        while (*s == ' ') s++;
        if (!strncmp(s, name, n) && (s[n] == '(' || s[n] == ' ' || s[n] == '\n')) return 1;
    }
    return 0;
}
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
    struct module* mod = m;
    pthread_mutex_lock(&lock);
    struct function* fun = mod->functions;
    while (fun && strcmp(fun->name, name)) fun = fun->next;
    pthread_mutex_unlock(&lock);
    if (!fun) {
        if (!declares(mod->ptx, name)) return NOT_FOUND;
        fun = zeroed(sizeof *fun);
        snprintf(fun->name, sizeof fun->name, "%s", name);
        pthread_mutex_lock(&lock);
        fun->next = mod->functions;
        mod->functions = fun;
        pthread_mutex_unlock(&lock);
    }
    *f = fun;
    return OK;
}
CUresult cuFuncGetName(const char** name, void* f) {
    *name = ((struct function*)f)->name;
    return OK;
}
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned smem, CUstream s, void** params,
                        void** extra) {
    if (!f || !gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024) return INVALID_VALUE;
    return OK;
}

// ---- libcudart -----------------------------------------------------------------------------

int cudaDeviceGetAttribute(int* v, int attr, int dev) {
    *v = attribute(attr);
    return 0;
}
int cudaGetDevice(int* d) {
    *d = 0;
    return 0;
}
int cudaGetDeviceCount(int* n) {
    *n = 1;
    return 0;
}
int cudaSetDevice(int d) { return 0; }
int cudaMalloc(void** p, size_t n) {
    *p = zeroed(n);
    return 0;
}
int cudaMallocAsync_ptsz(void** p, size_t n, CUstream s) { return cudaMalloc(p, n); }
int cudaFree(void* p) {
    free(p);
    return 0;
}
int cudaFreeAsync_ptsz(void* p, CUstream s) { return cudaFree(p); }
int cudaMemsetAsync_ptsz(void* p, int v, size_t n, CUstream s) {
    memset(p, v, n);
    return 0;
}
int cudaStreamSynchronize_ptsz(CUstream s) { return 0; }
int cudaFuncGetAttributes(void* attrs, const void* f) {
    memset(attrs, 0, 64);
    return 0;
}
int cudaFuncSetAttribute(const void* f, int attr, int v) { return 0; }
int cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, const void* f, int block,
                                                           size_t smem, unsigned flags) {
    *n = 1;
    return 0;
}
// What nvcc's host code calls: registering a fat binary and its kernels at load, and a
// triple-chevron launch.
static void* fatbin;
void** __cudaRegisterFatBinary(void* fat) { return &fatbin; }
void __cudaRegisterFatBinaryEnd(void** h) {}
void __cudaUnregisterFatBinary(void** h) {}
void __cudaRegisterFunction(void** h, const char* host, char* device, const char* name,
                            int limit, void* tid, void* bid, void* bd, void* gd, int* size) {}
void __cudaRegisterVar(void** h, char* host, char* device, const char* name, int ext,
                       size_t size, int constant, int global) {}
unsigned __cudaPushCallConfiguration(uint64_t grid_xy, unsigned grid_z, uint64_t block_xy,
                                     unsigned block_z, size_t smem, void* stream) {
    return 0;
}
int __cudaPopCallConfiguration(void* grid, void* block, size_t* smem, void* stream) {
    return 0;
}
int __cudaGetKernel(void** kernel, const void* f) {
    *kernel = (void*)f;
    return 0;
}
int __cudaLaunchKernel_ptsz(const void* f, uint64_t grid_xy, unsigned grid_z, uint64_t block_xy,
                            unsigned block_z, void** args, size_t smem, CUstream s) {
    return 0;
}
int cudaGetLastError(void) { return 0; }
int cudaPeekAtLastError(void) { return 0; }
const char* cudaGetErrorName(int e) { return "nocuda"; }
const char* cudaGetErrorString(int e) { return "nocuda: stand-in error"; }

// ---- libcublas, libcublasLt, libcurand -----------------------------------------------------

int cublasCreate_v2(void** h) {
    *h = handle();
    return 0;
}
int cublasDestroy_v2(void* h) { return 0; }
int cublasSetStream_v2(void* h, CUstream s) { return 0; }
int cublasGemmStridedBatchedEx(void* h, int ta, int tb, int m, int n, int k, const void* al,
                               const void* a, int at, int lda, long long sa, const void* b,
                               int bt, int ldb, long long sb, const void* be, void* c, int ct,
                               int ldc, long long sc, int batch, int compute, int algo) {
    return m > 0 && n > 0 && k > 0 && batch > 0 ? 0 : 7;  // CUBLAS_STATUS_INVALID_VALUE
}
int cublasDgemmStridedBatched(void* h, int ta, int tb, int m, int n, int k, const double* al,
                              const double* a, int lda, long long sa, const double* b, int ldb,
                              long long sb, const double* be, double* c, int ldc, long long sc,
                              int batch) {
    return m > 0 && n > 0 && k > 0 && batch > 0 ? 0 : 7;
}

int cublasLtCreate(void** h) {
    *h = handle();
    return 0;
}
int cublasLtDestroy(void* h) { return 0; }
int cublasLtMatmulDescCreate(void** d, int compute, int scale) {
    *d = handle();
    return 0;
}
int cublasLtMatmulDescDestroy(void* d) {
    free(d);
    return 0;
}
int cublasLtMatmulDescSetAttribute(void* d, int attr, const void* v, size_t n) { return 0; }
int cublasLtMatrixLayoutCreate(void** l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
    *l = handle();
    return rows && cols && ld >= (int64_t)rows ? 0 : 7;
}
int cublasLtMatrixLayoutDestroy(void* l) {
    free(l);
    return 0;
}
int cublasLtMatmulPreferenceCreate(void** p) {
    *p = handle();
    return 0;
}
int cublasLtMatmulPreferenceDestroy(void* p) {
    free(p);
    return 0;
}
int cublasLtMatmulPreferenceSetAttribute(void* p, int attr, const void* v, size_t n) { return 0; }
// cublasLtMatmulHeuristicResult_t: the algorithm (8 × u64), its workspace, its state, waves.
struct heuristic {
    uint64_t algo[8];
    size_t workspace;
    int state;
    float waves;
    int reserved[4];
};
int cublasLtMatmulAlgoGetHeuristic(void* h, void* desc, void* a, void* b, void* c, void* d,
                                   void* pref, int wanted, struct heuristic* out, int* found) {
    if (wanted < 1) return 7;
    memset(out, 0, sizeof *out);
    out->waves = 1.0f;
    *found = 1;
    return 0;
}
int cublasLtMatmul(void* h, void* desc, const void* al, const void* a, void* la, const void* b,
                   void* lb, const void* be, const void* c, void* lc, void* d, void* ld,
                   const void* algo, void* ws, size_t wss, CUstream s) {
    return 0;
}

int curandCreateGenerator(void** g, int type) {
    *g = handle();
    return 0;
}
int curandDestroyGenerator(void* g) { return 0; }
int curandSetPseudoRandomGeneratorSeed(void* g, unsigned long long seed) { return 0; }
int curandSetStream(void* g, CUstream s) { return 0; }
