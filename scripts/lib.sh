# Shell helpers shared by the lab's scripts; source it from the repository root.

# num KEY: the number that follows "KEY " in each line of standard input.
num() { sed -E "s/.*$1 ([0-9.e+]+).*/\\1/"; }

# cuda_kit DIR: the pinned CUDA 13.0 nvcc, its front end and NVVM, the runtime and CCCL headers
# from PyPI's wheels, laid out in DIR like a toolkit (bin, include, nvvm, lib64). Keep nvcc at
# 13.0.x: a newer one writes PTX that driver 580 may refuse (docs/CUDA.md).
cuda_kit() {
  local kit=$1 cu
  [ -x "$kit/bin/nvcc" ] && return
  echo "== CUDA 13.0 toolkit from PyPI wheels into $kit"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$kit/wheels" \
    nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
  cu=$kit/wheels/nvidia/cu13
  for d in bin include nvvm; do ln -sfn "$cu/$d" "$kit/$d"; done
  mkdir -p "$kit/lib64/stubs"
  for f in "$cu"/lib/*.so*; do ln -sfn "$f" "$kit/lib64/$(basename "$f")"; done
  ln -sfn libcudart.so.13 "$kit/lib64/libcudart.so"
}
