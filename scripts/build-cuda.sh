#!/usr/bin/env bash
# Build the CUDA binary of lab, dist/lab-cuda, on a machine with no GPU and no CUDA toolkit,
# from PyPI's CUDA 13.0 wheels (the facts behind this are in docs/CUDA.md):
#   - nvcc, its front end and NVVM, the CUDA runtime and CCCL headers come from pinned wheels
#     (keep nvcc at 13.0.x: newer PTX may be refused by driver 580);
#   - the driver library, cuBLAS, cuBLASLt, cuRAND and NVRTC are linked against stubs made from
#     cudarc's own bindings; the GPU machine's real libraries are used at run time;
#   - CUDA_COMPUTE_CAP=90 targets the H100/H200 (sm_90a). Override it for other GPUs.
# The binary finds the CUDA 13 libraries through its RUNPATH (build.rs) in the usual toolkit
# places; elsewhere, set LD_LIBRARY_PATH. A clean build, wheels fetched included, takes 10 min
# 48 s on a quiet 2-core machine (docs/CUDA.md); most of it is nvcc.
#
# usage: scripts/build-cuda.sh            (from anywhere; writes dist/lab-cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
kit=${LAB_CUDA_KIT:-$PWD/.cuda}
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}
export CUDARC_CUDA_VERSION=13000

. scripts/lib.sh
cuda_kit "$kit"

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
stub cublas libcublas.so.13 cublas 'cublas'
stub cublasLt libcublasLt.so.13 cublaslt 'cublasLt'
stub curand libcurand.so.10 curand 'curand'
stub nvrtc libnvrtc.so.13 nvrtc 'nvrtc'

export CUDA_ROOT=$kit CUDA_PATH=$kit PATH="$kit/bin:$PATH"
export RUSTFLAGS="${RUSTFLAGS:-} -L $kit/lib64/stubs -L $kit/lib64"
echo "== cargo build --release --features cuda (CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP)"
cargo build --release --features cuda --target-dir target/cuda
mkdir -p dist
# Stripped (about 53 MB instead of 142 MB with line tables), so that it can be carried to a GPU
# machine in one piece.
strip -o dist/lab-cuda target/cuda/release/lab
echo "== dist/lab-cuda ($(du -h dist/lab-cuda | cut -f1)); it needs, on the GPU machine:"
readelf -d dist/lab-cuda | grep -E 'NEEDED|RUNPATH' | grep -E 'cu|nvrtc|RUNPATH' || true
