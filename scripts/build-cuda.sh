#!/usr/bin/env bash
# Build the CUDA binary of lab, dist/lab-cuda, on a machine with no GPU and no CUDA toolkit,
# from PyPI's CUDA 13.0 wheels (the facts behind this are in docs/CUDA.md):
#   - nvcc, its front end and NVVM, the CUDA runtime and CCCL headers come from pinned wheels
#     (keep nvcc at 13.0.x: newer PTX may be refused by driver 580);
#   - the driver library, cuBLAS, cuBLASLt, cuRAND and NVRTC are linked against stubs made from
#     cudarc's own bindings; the GPU machine's real libraries are used at run time;
#   - CUDA_COMPUTE_CAP=90 targets the H100/H200 (sm_90a) with candle's kernels; 80 makes them
#     PTX for sm_80, which the A100, L40S and H100 all run (dist/lab-cuda-sm80). The lab's own
#     kernels carry both compute_80 and sm_90a PTX in every build.
# The binary finds the CUDA 13 libraries through its RUNPATH (build.rs) in the usual toolkit
# places; elsewhere, set LD_LIBRARY_PATH. A clean build, wheels fetched included, takes 10 min
# 48 s on a quiet 2-core machine (docs/CUDA.md); most of it is nvcc.
#
# --cuda 12 builds dist/lab-cuda12 instead, for clusters whose driver predates 580 (550 or later):
# nvcc 12.4 (Debian's, headers from PyPI's CUDA 12 wheels: scripts/lib.sh cuda_kit12), cudarc's
# CUDA 12.4 bindings, and the CUDA 12 libraries (libcublas.so.12, ...) at run time.
#
# usage: scripts/build-cuda.sh [--cuda 13|12]   (from anywhere; writes dist/lab-cuda or dist/lab-cuda12)
set -euo pipefail
cd "$(dirname "$0")/.."
major=13
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda)
      [ $# -ge 2 ] || { echo "build-cuda: --cuda: give 13 or 12" >&2; exit 2; }
      major=$2; shift 2 ;;
    *) echo "build-cuda: unknown argument '$1' (usage: scripts/build-cuda.sh [--cuda 13|12])" >&2; exit 2 ;;
  esac
done
case "$major" in
  13) kit=${LAB_CUDA_KIT:-$PWD/.cuda}; suffix=""; export CUDARC_CUDA_VERSION=13000 ;;
  12) kit=${LAB_CUDA_KIT:-$PWD/.cuda12}; suffix=12; export CUDARC_CUDA_VERSION=12040 ;;
  *) echo "build-cuda: --cuda: '$major' is not 13 or 12" >&2; exit 2 ;;
esac
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
# Another GPU's build is another binary (and build tree): dist/lab-cuda-sm80, dist/lab-cuda12-sm80.
[ "$CUDA_COMPUTE_CAP" = 90 ] || suffix=$suffix-sm$CUDA_COMPUTE_CAP
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}

. scripts/lib.sh
cuda_kit "$kit" "$major"

# Stubs: one empty function per symbol cudarc declares, with the real library's soname.
# cudarc's sources in the registry, fetched first on a fresh machine (where ls finds nothing,
# which is not an error under pipefail).
cudarc_src() { ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.* 2>/dev/null | sort | tail -1; }
cudarc=$(cudarc_src || true)
if [ -z "$cudarc" ]; then
  cargo fetch --quiet
  cudarc=$(cudarc_src) || { echo "build-cuda: cudarc 0.19 is not in the registry after cargo fetch" >&2; exit 1; }
fi
stub() { # name soname source-dir prefix-regex
  local out="$kit/lib64/stubs/lib$1.so"
  [ -f "$out" ] && return
  grep -ohE "fn ($4)[A-Za-z0-9_]*\(" "$cudarc/src/$3"/sys/*.rs | sed -E 's/fn ([A-Za-z0-9_]+)\(/void \1(void) {}/' \
    | sort -u > "$kit/lib64/stubs/$1.c"
  gcc -shared -fPIC -Wl,-soname,"$2" -o "$out" "$kit/lib64/stubs/$1.c"
}
stub cuda libcuda.so.1 driver 'cu[A-Z]'
stub cublas "libcublas.so.$major" cublas 'cublas'
stub cublasLt "libcublasLt.so.$major" cublaslt 'cublasLt'
stub curand libcurand.so.10 curand 'curand'
stub nvrtc "libnvrtc.so.$major" nvrtc 'nvrtc'

export CUDA_ROOT=$kit CUDA_PATH=$kit PATH="$kit/bin:$PATH"
export RUSTFLAGS="${RUSTFLAGS:-} -L $kit/lib64/stubs -L $kit/lib64"
echo "== cargo build --release --features cuda (CUDA $major, CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP)"
cargo build --release --features cuda --target-dir "target/cuda$suffix"
mkdir -p dist
# Stripped (about 53 MB instead of 142 MB with line tables), so that it can be carried to a GPU
# machine in one piece.
bin=dist/lab-cuda$suffix
strip -o "$bin" "target/cuda$suffix/release/lab"
echo "== $bin ($(du -h "$bin" | cut -f1)); it needs, on the GPU machine:"
readelf -d "$bin" | grep -E 'NEEDED|RUNPATH' | grep -E 'cu|nvrtc|RUNPATH' || true
# Compressed to be carried (the device tool carries 64 MiB in all; gpu-check unpacks it).
xz -T2 -6 -c "$bin" >"$bin.xz.part" && mv "$bin.xz.part" "$bin.xz"
echo "== $bin.xz ($(du -h "$bin.xz" | cut -f1)), to carry"
# The launch counter that gpu-check preloads (scripts/bench/launches.c): host code only, built
# here with the binary since nothing is built on the GPU machine.
cc -O2 -Wall -Werror -shared -fPIC -o dist/liblaunches.so scripts/bench/launches.c -ldl -lpthread
echo "== dist/liblaunches.so (the launch counter gpu-check preloads)"
