#!/usr/bin/env bash
# Type-check the `cuda` feature on a machine without CUDA, in about 2 minutes: a fake nvcc
# (scripts/cuda/nvcc-fake) stands in for the toolkit, so candle-kernels' build script runs but
# compiles nothing. This catches type errors and lints (clippy, -D warnings) in CUDA-only code;
# it builds no usable binary.
# For a real CUDA binary use scripts/build-cuda.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
mkdir -p "$fake/bin" "$fake/include" "$fake/lib64"
cp scripts/cuda/nvcc-fake "$fake/bin/nvcc"
PATH="$fake/bin:$PATH" CUDA_ROOT="$fake" CUDA_PATH="$fake" CUDA_COMPUTE_CAP=90 \
  CUDARC_CUDA_VERSION=13000 CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/cuda-check" \
  cargo clippy --features cuda --all-targets -- -D warnings
