# Shell helpers shared by the lab's scripts; source it from the repository root.

# num KEY: the number that follows "KEY " in each line of standard input.
num() { sed -E "s/.*$1 ([0-9.e+]+).*/\\1/"; }

# cuda_kit DIR [13|12]: the pinned CUDA 13.0 nvcc, its front end and NVVM, the runtime and CCCL
# headers from PyPI's wheels, laid out in DIR like a toolkit (bin, include, nvvm, lib64). Keep nvcc
# at 13.0.x: a newer one writes PTX that driver 580 may refuse (docs/CUDA.md). With 12: the CUDA
# 12.4 kit of cuda_kit12.
cuda_kit() {
  local kit=$1 cu
  [ -x "$kit/bin/nvcc" ] && return
  [ "${2:-13}" = 12 ] && { cuda_kit12 "$kit"; return; }
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

# cuda_kit12 DIR: a CUDA 12.4 toolkit for clusters whose driver predates 580 (550 or later reads
# its PTX, ISA 8.4). PyPI's CUDA 12 nvcc wheels hold ptxas, headers and libnvvm but no nvcc and no
# cicc, so the compiler comes from Debian's non-free nvidia-cuda-toolkit 12.4.131 package (its
# binaries run on bookworm; the .deb is checked against its sha256 and unpacked, not installed),
# and the headers and cudart from the CUDA 12.4 wheels.
cuda_kit12() {
  local kit=$1 deb=nvidia-cuda-toolkit_12.4.131~12.4.1-2_amd64.deb d w
  echo "== CUDA 12.4 toolkit (Debian's nvcc, PyPI's headers) into $kit"
  mkdir -p "$kit/download" "$kit/bin" "$kit/nvvm/bin" "$kit/nvvm/libdevice" "$kit/include" "$kit/lib64/stubs"
  [ -f "$kit/download/$deb" ] ||
    curl -fsS -o "$kit/download/$deb" "http://deb.debian.org/debian/pool/non-free/n/nvidia-cuda-toolkit/$deb"
  echo "cd5fe85aee38d108b315f408a688641478f2402622a10c677478eb7a6c4e5319  $kit/download/$deb" | sha256sum -c --quiet
  dpkg-deb -x "$kit/download/$deb" "$kit/deb"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$kit/wheels" \
    nvidia-cuda-nvcc-cu12==12.4.131 nvidia-cuda-runtime-cu12==12.4.127 nvidia-cuda-cccl-cu12==12.4.127.post1
  d=$kit/deb/usr w=$kit/wheels/nvidia
  for h in cuda_runtime cuda_nvcc cuda_cccl; do cp -rn "$w/$h/include/." "$kit/include/"; done
  rm -f "$kit/include/__init__.py"
  cp "$d"/bin/{cudafe++,fatbinary,nvlink,ptxas,bin2c} "$kit/bin/"
  cp -r "$d/lib/nvidia-cuda-toolkit/bin/crt" "$kit/bin/"
  cp "$d/lib/nvidia-cuda-toolkit/bin/cicc" "$kit/nvvm/bin/"
  cp "$d/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc" "$kit/nvvm/libdevice/"
  cp -P "$w"/cuda_runtime/lib/*.so* "$kit/lib64/"
  ln -sfn libcudart.so.12 "$kit/lib64/libcudart.so"
  # The toolkit's own profile, pointing at this layout (Debian's points at /usr).
  cat > "$kit/bin/nvcc.profile" <<'PROFILE'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
PROFILE
  # nvcc last: its presence marks the kit complete.
  cp "$d/lib/nvidia-cuda-toolkit/bin/nvcc" "$kit/bin/"
  rm -rf "$kit/deb"
}

# nocuda DIR: scripts/bench/nocuda.c, the stand-in for the CUDA libraries, built into DIR under
# every name the CUDA binary asks for, so that LD_LIBRARY_PATH=DIR dist/lab-cuda runs without a
# GPU. Compiler errors go to standard error.
nocuda() {
  mkdir -p "$1"
  cc -O2 -shared -fPIC -Wl,-soname,libcudart.so.13 -Wl,--default-symver \
    -o "$1/libnocuda.so" scripts/bench/nocuda.c || return 1
  for n in libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10; do
    ln -sf libnocuda.so "$1/$n"
  done
}
