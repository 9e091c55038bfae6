#!/usr/bin/env bash
# Compile every lab CUDA kernel (src/**/*.cu) with the real, pinned nvcc 13.0, as build.rs does
# in the CUDA build: PTX for compute_80 (A100, L40S, H100 by JIT) and sm_90a (Hopper), then
# ptxas on each PTX for its GPU, which rejects what a driver would and prints registers and
# shared memory per kernel. About a minute on a fresh machine (the wheels, 0.5 s a kernel);
# no GPU, no candle kernels. scripts/test runs it.
#
#   scripts/check-kernels.sh        (the toolkit goes to $LAB_CUDA_KIT, default .cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
kit=${LAB_CUDA_KIT:-$PWD/.cuda}
cuda_kit "$kit"
export PATH="$kit/bin:$PATH"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0
while IFS= read -r cu; do
  stem=$(basename "$cu" .cu)
  # The flags of build.rs's `kernels`.
  for arch in compute_80 sm_90a; do
    nvcc --ptx -O3 -fmad=false -std=c++17 -arch=$arch "$cu" -o "$out/$stem.$arch.ptx"
  done
  for gpu in sm_80:compute_80 sm_90a:sm_90a; do
    echo "== $cu for ${gpu%%:*}"
    ptxas -arch="${gpu%%:*}" -v "$out/$stem.${gpu#*:}.ptx" -o "$out/$stem.${gpu%%:*}.cubin" 2>&1 |
      grep -E 'entry function|Used' | sed -E "s/ptxas info *: //"
  done
  n=$((n + 1))
done < <(find src -name '*.cu' | sort)
[ $n -gt 0 ] || { echo "check-kernels: no .cu file under src/" >&2; exit 1; }
echo "check-kernels: $n kernel sources compiled for compute_80 and sm_90a, and assembled by ptxas"
