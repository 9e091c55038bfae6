//! `scripts/bench/launches.c`, the launch counter the GPU check preloads, stands between a
//! program and the CUDA libraries it calls and counts each call (kernels by name), and
//! `launches.py` turns two depths' counts into launches a step, a layer and outside the layers.
//! No GPU here: the libraries below it are a stand-in built by the test, each call a no-op; and
//! `nocuda.c`, the stand-in for the CUDA libraries that the dry gpu-check counts the CUDA
//! binary over, keeps memory and finds only the kernels a module declares.

use std::path::Path;
use std::process::Command;

use crate::util::{python, root};

/// The stand-in for libcuda and libcublas: every call succeeds and a function's name is
/// "k" and its address.
const LIBS: &str = r#"
#include <stdio.h>
typedef unsigned long long P;
int cuLaunchKernel(void* f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e,
                   unsigned g, unsigned s, void* st, void** p, void** x) { return 0; }
int cuFuncGetName(const char** name, void* f) {
    static char buf[8][32];
    static int i;
    i = (i + 1) % 8;
    snprintf(buf[i], sizeof buf[i], "k%llu", (P)f);
    *name = buf[i];
    return 0;
}
int cublasGemmStridedBatchedEx(void* h, int ta, int tb, int m, int n, int k, const void* al,
    const void* a, int at, int lda, long long sa, const void* b, int bt, int ldb, long long sb,
    const void* be, void* c, int ct, int ldc, long long sc, int bc, int ctype, int algo) {
    return m == 7 ? 0 : 1;
}
int cublasLtMatmul(void* h, void* desc, const void* al, const void* a, void* l1, const void* b,
    void* l2, const void* be, const void* c, void* l3, void* d, void* l4, const void* algo,
    void* ws, size_t wss, void* st) { return ws == (void*)8 ? 0 : 1; }
int cuMemsetD8Async(P d, unsigned char v, size_t n, void* s) { return 0; }
int cuMemcpyHtoDAsync_v2(P d, const void* h, size_t n, void* s) { return 0; }
int cuMemcpyDtoHAsync_v2(void* h, P d, size_t n, void* s) { return 0; }
int cuMemcpyDtoDAsync_v2(P d, P s2, size_t n, void* s) { return 0; }
int cuMemAllocAsync(P* d, size_t n, void* s) { *d = 1; return 0; }
int cuMemFreeAsync(P d, void* s) { return 0; }
int cuStreamSynchronize(void* s) { return 0; }
"#;

/// A "trainer" of LAYERS layers running STEPS steps: 5 launches and an upload to set up; a
/// step runs 3 kernels of its own (two of them the same), 4 a layer and 3 products a layer
/// (two cuBLAS, one cuBLASLt),
/// a memset, an allocation and free, and one host wait; the exit status is the number of
/// calls that did not return success (the counter passes every call and result on).
const PROG: &str = r#"
#include <stdlib.h>
typedef unsigned long long P;
int cuLaunchKernel(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                   unsigned, void*, void**, void**);
int cublasGemmStridedBatchedEx(void*, int, int, int, int, int, const void*, const void*, int,
    int, long long, const void*, int, int, long long, const void*, void*, int, int, long long,
    int, int, int);
int cublasLtMatmul(void*, void*, const void*, const void*, void*, const void*, void*,
    const void*, const void*, void*, void*, void*, const void*, void*, size_t, void*);
int cuMemsetD8Async(P, unsigned char, size_t, void*);
int cuMemcpyHtoDAsync_v2(P, const void*, size_t, void*);
int cuMemAllocAsync(P*, size_t, void*);
int cuMemFreeAsync(P, void*);
int cuStreamSynchronize(void*);
static int launch(P f) { return cuLaunchKernel((void*)f, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0) != 0; }
int main(int argc, char** argv) {
    int layers = atoi(argv[1]), steps = atoi(argv[2]), bad = 0;
    P d;
    for (int i = 0; i < 5; i++) bad += launch(0x1000);
    bad += cuMemcpyHtoDAsync_v2(0, 0, 0, 0) != 0;
    for (int s = 0; s < steps; s++) {
        bad += launch(0x2000) + launch(0x2000) + launch(0x3000);
        for (int l = 0; l < layers; l++) {
            for (int k = 0; k < 4; k++) bad += launch(0x4000 + 16 * k);
            for (int g = 0; g < 2; g++)
                bad += cublasGemmStridedBatchedEx(0, 0, 0, 7, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0,
                                                  0, 0, 0, 1, 0, 1, 0, 0) != 0;
            bad += cublasLtMatmul(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, (void*)8, 0, 0) != 0;
        }
        bad += cuMemsetD8Async(0, 0, 0, 0) != 0;
        bad += cuMemAllocAsync(&d, 8, 0) != 0;
        bad += cuMemFreeAsync(d, 0) != 0;
        bad += cuStreamSynchronize(0) != 0;
    }
    return bad;
}
"#;

fn cc(dir: &Path, args: &[&str]) {
    let out = Command::new("cc")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The counts of the program at `layers` and `steps`, under the counter.
fn counted(dir: &Path, layers: u32, steps: u32) -> String {
    let file = dir.join(format!("L{layers}-s{steps}.txt"));
    let st = Command::new(dir.join("prog"))
        .args([layers.to_string(), steps.to_string()])
        .env("LD_PRELOAD", dir.join("liblaunches.so"))
        .env("LAB_LAUNCHES", &file)
        .env("LD_LIBRARY_PATH", dir)
        .status()
        .unwrap();
    assert!(st.success(), "a call's result was not passed on: {st}");
    std::fs::read_to_string(file).unwrap()
}

#[test]
fn the_counter_counts_every_call_and_the_script_splits_steps_and_layers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("libs.c"), LIBS).unwrap();
    std::fs::write(dir.join("prog.c"), PROG).unwrap();
    cc(dir, &["-shared", "-fPIC", "-o", "libfake.so", "libs.c"]);
    cc(dir, &["-o", "prog", "prog.c", "-L.", "-lfake"]);
    let src = root().join("scripts/bench/launches.c");
    let src = src.to_str().unwrap();
    cc(
        dir,
        &[
            "-O2",
            "-Wall",
            "-Werror",
            "-shared",
            "-fPIC",
            "-o",
            "liblaunches.so",
            src,
            "-ldl",
            "-lpthread",
        ],
    );

    // 2 layers, 3 steps: 5 + 3·(3 + 2·4) launches, 3·2·3 products.
    let text = counted(dir, 2, 3);
    for line in [
        "launches 38",
        "gemms 18",
        "memsets 3",
        "copies_htod 1",
        "copies_dtoh 0",
        "allocs 3",
        "frees 3",
        "syncs 3",
        "kernel 5 k4096",
        "kernel 6 k8192",
        "kernel 6 k16432",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}:\n{text}");
    }
    // A wrapper that inherits the preload and exits after the program (`timeout`, `time`)
    // asked nothing of the GPU, and leaves the program's counts as they are.
    let file = dir.join("wrapped.txt");
    let st = Command::new("timeout")
        .args([
            "60".as_ref(),
            dir.join("prog").as_os_str(),
            "2".as_ref(),
            "3".as_ref(),
        ])
        .env("LD_PRELOAD", dir.join("liblaunches.so"))
        .env("LAB_LAUNCHES", &file)
        .env("LD_LIBRARY_PATH", dir)
        .status()
        .unwrap();
    assert!(st.success(), "{st}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        text,
        "wrapped in timeout"
    );
    // Without LAB_LAUNCHES it writes nothing and passes the calls on.
    let st = Command::new(dir.join("prog"))
        .args(["1", "1"])
        .env("LD_PRELOAD", dir.join("liblaunches.so"))
        .env("LD_LIBRARY_PATH", dir)
        .env_remove("LAB_LAUNCHES")
        .status()
        .unwrap();
    assert!(st.success());

    let Some(mut py) = python() else { return };
    let files: Vec<String> = [(2, 2), (2, 4), (6, 2), (6, 4)]
        .iter()
        .map(|&(l, s)| {
            counted(dir, l, s);
            dir.join(format!("L{l}-s{s}.txt")).display().to_string()
        })
        .collect();
    let out = py
        .arg(root().join("scripts/bench/launches.py"))
        .args(["2", &files[0], &files[1], "6", &files[2], &files[3], "2"])
        .args(["--kernels", "7"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A step at L = 2: 3 + 8 kernels and 6 products; a layer 4 + 3; outside the layers 3.
    assert!(
        text.starts_with(
            "17 a step at L = 2 (11 kernels, 6 cuBLAS products); a layer 7.0 (4.0 + 3.0); \
             outside the layers 3.0; a step also 1 memsets, 0/0/0 copies (htod/dtoh/dtod), \
             1 allocations, 1 host waits"
        ),
        "{text}"
    );
    // One run's calls a step alone (bench/gpu.sh's column): the same 17.
    let Some(mut py) = python() else { return };
    let out = py
        .arg(root().join("scripts/bench/launches.py"))
        .args(["--step", &files[0], &files[1], "2"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "17\n");
    // Most launched first; the setup's kernel, none a step, is left out.
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| `k")).collect();
    assert_eq!(rows.len(), 6, "{text}");
    assert!(rows.contains(&"| `k8192` | 2 |"), "{text}");
    assert_eq!(rows[5], "| `k12288` | 1 |", "{text}");
}

/// A program of the CUDA binary's calls against `scripts/bench/nocuda.c`: memory round-trips,
/// a freed block is reused for the next allocation of its class (a small one zeroed), a
/// module's kernels are found by the names its PTX declares and by no other (the same handle
/// each time), a launch of more threads than a block holds fails, and cuBLASLt's heuristic
/// offers an algorithm. The exit status is the number of the first check that failed.
const NOCUDA_PROG: &str = r#"
#include <string.h>
typedef unsigned long long P;
int cuInit(unsigned);
int cuMemAlloc_v2(P*, size_t);
int cuMemFree_v2(P);
int cuMemcpyHtoDAsync_v2(P, const void*, size_t, void*);
int cuMemcpyDtoHAsync_v2(void*, P, size_t, void*);
int cuMemsetD8Async(P, unsigned char, size_t, void*);
int cuModuleLoadData(void**, const void*);
int cuModuleGetFunction(void**, void*, const char*);
int cuFuncGetName(const char**, void*);
int cuLaunchKernel(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                   unsigned, void*, void**, void**);
int cublasLtMatmulAlgoGetHeuristic(void*, void*, void*, void*, void*, void*, void*, int,
                                   void*, int*);
int main(void) {
    if (cuInit(0)) return 1;
    P d;
    char in[6] = "abcde", out[6] = {0};
    if (cuMemAlloc_v2(&d, 6) || cuMemcpyHtoDAsync_v2(d, in, 6, 0)) return 2;
    if (cuMemcpyDtoHAsync_v2(out, d, 6, 0) || strcmp(in, out)) return 3;
    if (cuMemsetD8Async(d, 'z', 2, 0) || cuMemcpyDtoHAsync_v2(out, d, 6, 0)) return 4;
    if (strcmp(out, "zzcde")) return 5;
    P again, big, big2;
    if (cuMemFree_v2(d) || cuMemAlloc_v2(&again, 5) || again != d) return 13;
    if (cuMemcpyDtoHAsync_v2(out, again, 6, 0) || memcmp(out, "\0\0\0\0\0\0", 6)) return 14;
    if (cuMemAlloc_v2(&big, 1 << 20) || cuMemFree_v2(big)) return 15;
    if (cuMemAlloc_v2(&big2, (1 << 20) - 100) || big2 != big) return 16;
    void *m, *f, *f2;
    const char* ptx = ".visible .entry lab_ln_fwd(\n.param .u64 x\n)\n"
                      ".visible .entry lab_ln_fwd_rows(\n)\n";
    if (cuModuleLoadData(&m, ptx)) return 6;
    if (cuModuleGetFunction(&f, m, "lab_ln") != 500) return 7;
    if (cuModuleGetFunction(&f, m, "lab_ln_fwd")) return 8;
    const char* name;
    if (cuFuncGetName(&name, f) || strcmp(name, "lab_ln_fwd")) return 9;
    if (cuModuleGetFunction(&f2, m, "lab_ln_fwd") || f2 != f) return 17;
    if (cuLaunchKernel(f, 4, 1, 1, 128, 1, 1, 0, 0, 0, 0)) return 10;
    if (!cuLaunchKernel(f, 4, 1, 1, 2048, 1, 1, 0, 0, 0, 0)) return 11;
    char heur[96];
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(0, 0, 0, 0, 0, 0, 0, 1, heur, &found) || found != 1)
        return 12;
    return 0;
}
"#;

#[test]
fn the_stand_in_for_the_cuda_libraries_keeps_memory_pools_it_and_finds_only_declared_kernels() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let src = root().join("scripts/bench/nocuda.c");
    cc(
        dir,
        &[
            "-O2",
            "-Wall",
            "-Werror",
            "-Wno-unused-parameter",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcudart.so.13",
            "-Wl,--default-symver",
            "-o",
            "libnocuda.so",
            src.to_str().unwrap(),
        ],
    );
    // The library names itself libcudart.so.13, as the CUDA binary asks for its versions.
    std::os::unix::fs::symlink("libnocuda.so", dir.join("libcudart.so.13")).unwrap();
    std::fs::write(dir.join("prog.c"), NOCUDA_PROG).unwrap();
    cc(dir, &["-o", "prog", "prog.c", "-L.", "-lnocuda"]);
    let st = Command::new(dir.join("prog"))
        .env("LD_LIBRARY_PATH", dir)
        .status()
        .unwrap();
    assert!(st.success(), "check {:?} failed", st.code());
}
