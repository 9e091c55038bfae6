#!/usr/bin/env bash
# Compile every lab CUDA kernel (src/**/*.cu) with the real, pinned nvcc 13.0, as build.rs does
# in the CUDA build: PTX for compute_80 (A100, L40S, H100 by JIT) and sm_90a (Hopper), then
# ptxas on each PTX for its GPU, which rejects what a driver would and prints registers and
# shared memory per kernel. Then the same with the CUDA 12.4 kit of `build-cuda.sh --cuda 12`
# (Debian's nvcc 12.4, scripts/lib.sh cuda_kit12), so that no kernel needs what CUDA 12 lacks.
# About two minutes on a fresh machine (the kits, 0.5 s a kernel); no GPU, no candle kernels.
# scripts/test runs it.
#
#   scripts/check-kernels.sh        (the toolkits go to $LAB_CUDA_KIT, default .cuda, and .cuda12)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# check MAJOR KIT: every kernel through that kit's nvcc and ptxas; registers printed for 13.
check() {
  local major=$1 kit=$2 n=0 cu stem arch gpu
  cuda_kit "$kit" "$major"
  while IFS= read -r cu; do
    stem=$(basename "$cu" .cu)
    # The flags of build.rs's `kernels`.
    for arch in compute_80 sm_90a; do
      "$kit/bin/nvcc" --ptx -O3 -fmad=false -std=c++17 -arch=$arch "$cu" -o "$out/$stem.$arch.ptx"
    done
    for gpu in sm_80:compute_80 sm_90a:sm_90a; do
      [ "$major" = 13 ] && echo "== $cu for ${gpu%%:*}"
      "$kit/bin/ptxas" -arch="${gpu%%:*}" -v "$out/$stem.${gpu#*:}.ptx" -o "$out/$stem.${gpu%%:*}.cubin" 2>&1 |
        { if [ "$major" = 13 ]; then grep -E 'entry function|Used' | sed -E "s/ptxas info *: //"; else cat >/dev/null; fi; }
    done
    n=$((n + 1))
  done < <(find src -name '*.cu' | sort)
  [ $n -gt 0 ] || { echo "check-kernels: no .cu file under src/" >&2; exit 1; }
  echo "check-kernels: $n kernel sources compiled by $("$kit/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/nvcc \1/p') for compute_80 and sm_90a, and assembled by ptxas"
}
check 13 "${LAB_CUDA_KIT:-$PWD/.cuda}"
check 12 "$PWD/.cuda12"
