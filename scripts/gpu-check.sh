#!/usr/bin/env bash
# The one-shot GPU check: proves the CUDA path and measures it in one device call of at most
# ~9 minutes on one GPU, and prints one table. A step that fails prints its error and the script
# goes on; the exit status is the number of failed steps (0: all passed). Each step runs under a
# timeout, and the whole check under LAB_GPU_CHECK_BUDGET seconds (default 540).
#
#   scripts/gpu-check.sh [--lab BIN]     on a GPU machine: --device cuda, the paper's shapes
#   scripts/gpu-check.sh --dry-run       the same steps on the CPU with tiny shapes (CI runs it)
#
# With $OUT set (the device tool sets it), the table and every step's log are written under it.
# The device call, from the repository root here (dist/ is git-ignored, so it must be carried):
#
#   scripts/build-cuda.sh          (here, no GPU: writes dist/lab-cuda, its .xz and liblaunches.so)
#   device run: carry ["dist/lab-cuda.xz", "dist/liblaunches.so"], timeout_s 600, command
#     "LAB_GPU_CHECK_BUDGET=270 bash scripts/gpu-check.sh; BENCH_BUDGET=290 bash scripts/bench/gpu.sh"
#   (the check, then the lab against PyTorch, in one call of under 10 minutes).
#
#   0. the libraries: ldd of the binary; when a CUDA 13 library is missing, it is looked for in
#      the toolkit paths, then in every nvidia/*/lib of the Python environments present, and
#      LD_LIBRARY_PATH is set for the rest of the run (RUNPATH does not reach cuBLAS's own
#      libcublasLt);
#   1. the binary: --lab BIN, else dist/lab-cuda; never built on the device machine (the dry run
#      uses target/release/lab); then `lab kernel-check --device cuda`: the lab's CUDA kernels
#      (LayerNorm, the cuBLASLt linear layer, GELU, packed attention, the loss's cross-entropy
#      and the head's loss with no logits kept, forward and every gradient; the multi-tensor AdamW) against their CPU
#      version, and one batch's loss and every parameter's gradient from the CUDA model (fp32
#      with TF32 off, and bf16; composed, and with the lab's kernels) against the CPU's fp32,
#      at 1m-L4, 10m-L6, 100m-L8 and the study shape (the dry run: tiny, on the CPU);
#   2. the first-step loss on the device equals the CPU loss on the same batch: fp32 (TF32
#      matmuls, tolerance 2e-3 relative) and bf16 (2e-2 relative), against the CPU's fp32;
#   3. the backward: 5 fp32 steps on the device and on the CPU from the same seed and batches;
#      the loss and gradient norm at every step (2e-3 relative on CUDA, 1e-4 in the dry run),
#      and every tensor's update after the last (relative L2, 0.1 on CUDA, 1e-2 in the dry run;
#      scripts/compare_updates.py); on CUDA with the composed kernels and again with the lab's
#      (--kernels fused: LayerNorm, cuBLASLt linear layers, bias+GELU, packed attention, the
#      head's loss and
#      the multi-tensor AdamW). In the dry run the "device" side runs the
#      composed kernels that CUDA runs (--kernels composed) and the CPU side the fused ones;
#   4. 200 steps of 10m-L6 and of 100m-L8 in bf16, of 100m-L8 in bf16 with the lab's kernels,
#      and of 100m-L8 in fp32: tokens/s, MFU, peak device memory;
#   5. a checkpoint written on the device resumes on the CPU: the next step's loss on the CPU
#      equals the device's (fp32, 2e-3 relative);
#   6. greedy decoding of the paper eval set with the 100m-L8 model of step 4: seconds and
#      generated tokens/s;
#   7. launches a step, a layer and outside the layers, composed and with the lab's kernels:
#      1m-L4 at 4 and 8 layers, bf16, 2 and 4 steps each under the preloaded launch counter
#      (dist/liblaunches.so, scripts/bench/launches.c); also cuBLAS products, memsets, copies,
#      allocations and host waits a step, and the 25 kernels launched most
#      (launches-<kernels>.md). The dry run counts the same with dist/lab-cuda over
#      scripts/bench/nocuda.c, a stand-in for the CUDA libraries, where it is built and no
#      --lab is given (else it runs tiny on the CPU and counts nothing), and runs every CUDA
#      path of kernel-check and a tiny epoch with the lab's kernels over it: none may error;
#   8. small runs packed on one GPU: K = 1, 4 and 8 concurrent runs (1 and 2 in the dry run) of
#      the 1m-L4 and 10m-L6 configs, their summed tokens/s: the GPU study's cost table; on CUDA,
#      1m-L4 again under an MPS daemon (nvidia-cuda-mps-control) where the machine has one.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dry=0
lab=""
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1 ;;
    --lab) lab=$2; shift ;;
    *) echo "usage: scripts/gpu-check.sh [--dry-run] [--lab BIN]" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT/gpu-check" && out=$(realpath "$OUT/gpu-check")
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
deadline=$(( $(date +%s) + ${LAB_GPU_CHECK_BUDGET:-540} ))
failed=0
table=()
row() { table+=("| $1 | $2 | $3 |"); }
fail() { # STEP LOGFILE
  echo "step $1 FAILED:" >&2
  [ -f "$2" ] && tail -n 5 "$2" >&2
  failed=$((failed + 1))
}
check() { # NAME OK FIGURES: a row that passed or failed on a comparison
  if [ "$2" = 1 ]; then row "$1" ok "$3"; else row "$1" FAILED "$3"; failed=$((failed + 1)); fi
}
limit() { # SECONDS: a step's timeout, cut to what is left of the whole budget
  local left=$(( deadline - $(date +%s) ))
  [ "$left" -lt "$1" ] && echo $(( left > 1 ? left : 1 )) || echo "$1"
}
. scripts/lib.sh
metric_at() { # RUN STEP KEY: the figure logged at that step
  python3 -c "
import json, sys
for l in open(sys.argv[1] + '/metrics.jsonl'):
    m = json.loads(l)
    if m.get('step') == int(sys.argv[2]) and sys.argv[3] in m:
        print(m[sys.argv[3]])" "$1" "$2" "$3"
}
loss_at() { metric_at "$1" "$2" train/loss; }
close() { # A B REL: |a - b| <= rel * |b|
  python3 -c "import sys; a, b, r = map(float, sys.argv[1:]); sys.exit(abs(a - b) > r * abs(b))" "$@"
}
summary() {
  echo
  echo "gpu-check on $dev ($([ $dry = 1 ] && echo 'dry run, tiny shapes' || nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)), $(date -u +%F)"
  echo "| step | result | figures |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${table[@]}"
}
finish() {
  summary | tee "$out/table.md"
  exit "$failed"
}

if [ $dry = 1 ]; then
  dev=cpu
  small=$root/configs/tiny.toml
  big=$root/configs/tiny.toml
  packs=("$root/configs/tiny.toml")
  ks=(1 2)
  steps=20
  pack_steps=20
  shape=(--set model.n_embd=64)
  composed=(--kernels composed)
  tol_step=1e-4
  tol_update=1e-2
else
  dev=cuda
  small=$root/configs/10m-L6.toml
  big=$root/configs/100m-L8.toml
  packs=("$root/configs/1m-L4.toml" "$root/configs/10m-L6.toml")
  ks=(1 4 8)
  steps=200
  pack_steps=100
  shape=()
  composed=()
  tol_step=2e-3
  tol_update=0.1
fi

# 1 (found first, reported second). The binary: never built here.
lab_given=$lab
if [ -z "$lab" ]; then
  if [ $dry = 1 ]; then
    lab=$root/target/release/lab
    how="target/release/lab (dry run)"
  else
    lab=$root/dist/lab-cuda
    how="carried: dist/lab-cuda"
    # Carried compressed (the binary is over the carry limit): unpacked here, once.
    if [ ! -x "$lab" ] && [ -f "$lab.xz" ]; then
      xz -dc "$lab.xz" >"$lab.part" && chmod +x "$lab.part" && mv "$lab.part" "$lab"
      how="carried: dist/lab-cuda.xz, unpacked"
    fi
  fi
else
  how="given: $lab"
fi
if ! lab=$(realpath "$(command -v "$lab" 2>/dev/null || echo "$lab")" 2>/dev/null) || [ ! -x "$lab" ]; then
  echo "step 1 FAILED: $how: no such executable. Build it where there is a registry (scripts/build-cuda.sh writes dist/lab-cuda) and carry dist/ to this machine; the check never builds here." >&2
  row "1 binary" FAILED "$how: missing (build with scripts/build-cuda.sh, carry dist/)"
  failed=$((failed + 1))
  finish
fi

# 0. The libraries the binary needs, found where a machine may keep them.
ldd "$lab" >"$out/ldd.log" 2>&1
missing=$(grep 'not found' "$out/ldd.log" | awk '{print $1}' | sort -u)
if [ -z "$missing" ]; then
  row "0 libraries" ok "ldd: nothing missing ($(grep -c '=>' "$out/ldd.log") resolved)"
else
  dirs=()
  cands=(/usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu /usr/lib64)
  for py in python3 /usr/bin/python3 /opt/conda/bin/python /usr/local/bin/python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    while IFS= read -r d; do cands+=("$d"); done < <("$py" -c '
import glob, site, sys
roots = set(site.getsitepackages() + [site.getusersitepackages()] + sys.path)
for r in sorted(roots):
    for d in sorted(glob.glob(r + "/nvidia/*/lib")):
        print(d)' 2>/dev/null)
  done
  for lib in $missing; do
    for d in "${cands[@]}"; do
      if [ -e "$d/$lib" ]; then
        case " ${dirs[*]-} " in *" $d "*) ;; *) dirs+=("$d") ;; esac
        break
      fi
    done
  done
  if [ ${#dirs[@]} -gt 0 ]; then
    LD_LIBRARY_PATH=$(IFS=:; echo "${dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
  fi
  ldd "$lab" >"$out/ldd-after.log" 2>&1
  still=$(grep 'not found' "$out/ldd-after.log" | awk '{print $1}' | sort -u | tr '\n' ' ')
  found="missing: $(echo $missing); LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  echo "libraries: $found" >&2
  if [ -z "$still" ]; then
    row "0 libraries" ok "$found"
  else
    row "0 libraries" FAILED "still missing: $still($found)"
    failed=$((failed + 1))
  fi
fi
t0=$(date +%s)
if timeout "$(limit 30)" "$lab" --version >"$out/version.log" 2>&1; then
  # Every run and the data it builds stay in the scratch directory.
  cd "$out"
  row "1 binary" ok "$how, $(cat "$out/version.log" | head -n 1), $(($(date +%s) - t0)) s"
else
  fail 1 "$out/version.log"
  row "1 binary" FAILED "$how"
  finish
fi
# 1. The lab's kernels against their CPU version, and the model's gradients against the CPU's.
if [ $dry = 1 ]; then kc=(--config "$root/configs/tiny.toml"); else kc=(); fi
if timeout "$(limit 240)" "$lab" kernel-check --device $dev --seed 1 "${kc[@]}" >"$out/s1-kernels.log" 2>&1; then
  row "1 kernel-check" ok "$(tail -n 1 "$out/s1-kernels.log")"
else
  fail 1 "$out/s1-kernels.log"
  row "1 kernel-check" FAILED "$(grep -c FAIL "$out/s1-kernels.log") rows failed: $(grep FAIL "$out/s1-kernels.log" | head -n 3 | tr '\n' ' ')"
fi
cp "$out/s1-kernels.log" "$out/kernel-check.md" 2>/dev/null

train() { # NAME CONFIG DEVICE SECONDS ARGS...: a run under $out/NAME, its log beside it
  local name=$1 cfg=$2 device=$3 secs=$4
  shift 4
  timeout "$(limit "$secs")" "$lab" train --config "$cfg" --device "$device" --out "$out/$name" \
    "${shape[@]}" "$@" >"$out/$name.log" 2>&1
}

# 2. First-step loss, device against CPU.
one=(--max-steps 1 --set train.log_every=1)
if train s2-cpu "$small" cpu 180 "${one[@]}" --set train.precision=fp32; then
  ref=$(loss_at "$out/s2-cpu" 1)
  for p in fp32 bf16; do
    tol=$([ $p = fp32 ] && echo 2e-3 || echo 2e-2)
    if train "s2-$p" "$small" $dev 60 "${one[@]}" --set train.precision=$p; then
      got=$(loss_at "$out/s2-$p" 1)
      close "$got" "$ref" "$tol" && ok=1 || ok=0
      check "2 first-step loss, $p" $ok "$dev $got, cpu fp32 $ref (tolerance $tol relative)"
    else
      fail 2 "$out/s2-$p.log"
      row "2 first-step loss, $p" FAILED "see the error above"
    fi
  done
else
  fail 2 "$out/s2-cpu.log"
  row "2 first-step loss" FAILED "the CPU reference did not train"
fi

# 3. The backward: N fp32 steps on both sides, every step's loss and gradient norm, and every
# tensor's update after the last; on CUDA with each kernel set.
n=5
fp32n=(--set train.precision=fp32 --set train.log_every=1)
if [ $dry = 1 ]; then variants=(composed); else variants=(composed fused); fi
if train s3-init "$small" cpu 60 --max-steps 0 "${fp32n[@]}" &&
  train s3-cpu "$small" cpu 120 --max-steps $n "${fp32n[@]}" --kernels fused; then
  for v in "${variants[@]}"; do
    if ! train "s3-dev-$v" "$small" $dev 60 --max-steps $n "${fp32n[@]}" --kernels "$v"; then
      fail 3 "$out/s3-dev-$v.log"
      row "3 backward, $v kernels" FAILED "see the error above"
      continue
    fi
    for key in train/loss train/grad_norm; do
      # The first step past the tolerance, else the last step.
      for s in $(seq 1 $n); do
        a=$(metric_at "$out/s3-dev-$v" "$s" $key)
        b=$(metric_at "$out/s3-cpu" "$s" $key)
        close "$a" "$b" "$tol_step" && ok=1 || { ok=0; break; }
      done
      check "3 backward, $v kernels, $key, $n steps" $ok \
        "step $s: $dev $a, cpu $b (tolerance $tol_step relative at every step)"
    done
    if figures=$(python3 "$root/scripts/compare_updates.py" "$out/s3-init/model.safetensors" \
      "$out/s3-dev-$v/model.safetensors" "$out/s3-cpu/model.safetensors" "$tol_update" 2>&1); then
      check "3 backward, $v kernels, updates after $n steps" 1 "$figures"
    else
      check "3 backward, $v kernels, updates after $n steps" 0 "$figures"
    fi
  done
else
  fail 3 "$(ls -t "$out"/s3-*.log | head -n 1)"
  row "3 backward" FAILED "see the error above"
fi

# 4. Throughput, MFU and peak memory over $steps steps.
mem_watch() { # poll the device's used memory (MiB) into $1 until killed
  if [ $dev = cuda ]; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$1" 2>/dev/null
  fi
}
# The big model in fp32 too: the composed optimizer once kept every step's graph alive in fp32
# (out of memory at step 21 of 100m-L8), which 5 steps of the small model did not show.
# On CUDA the big model in bf16 again with the lab's kernels (the multi-tensor AdamW, and the
# model's LayerNorm, bias+GELU, attention and cross-entropy on its f32 activations).
runs=(small:bf16:composed big:bf16:composed big:fp32:composed)
[ $dry = 1 ] || runs+=(big:bf16:fused)
for run in "${runs[@]}"; do
  IFS=: read -r size prec kern <<<"$run"
  if [ $size = small ]; then cfg=$small; else cfg=$big; fi
  name=s4-$size
  [ $prec = bf16 ] || name=$name-$prec
  [ $kern = composed ] || name=$name-$kern
  mem_watch "$out/$name.mem" &
  watch=$!
  if /usr/bin/time -f '%M' -o "$out/$name.rss" true 2>/dev/null; then
    timed=(/usr/bin/time -f '%M' -o "$out/$name.rss")
  else
    timed=()
  fi
  if timeout "$(limit 150)" "${timed[@]}" "$lab" train --config "$cfg" --device $dev \
    --out "$out/$name" "${shape[@]}" --max-steps "$steps" --set train.precision=$prec \
    --kernels "$kern" --set train.log_every=10 >"$out/$name.log" 2>&1; then
    kill $watch 2>/dev/null
    tps=$(grep 'throughput:' "$out/$name.log" | num 'throughput:')
    mfu=$(python3 -c "
import json, sys
m = [json.loads(l) for l in open(sys.argv[1] + '/metrics.jsonl')]
v = [x['train/mfu'] for x in m if x.get('train/mfu') is not None]
print(f'{100 * v[-1]:.1f}%' if v else 'n/a')" "$out/$name")
    if [ $dev = cuda ]; then
      mem="$(sort -n "$out/$name.mem" | tail -n 1) MiB on the GPU"
    else
      mem="$(cat "$out/$name.rss" 2>/dev/null || echo '?') KiB peak RSS"
    fi
    row "4 $steps steps $(basename "$cfg" .toml), $prec, $kern" ok "$tps tokens/s, MFU $mfu, $mem"
  else
    kill $watch 2>/dev/null
    fail 4 "$out/$name.log"
    row "4 $steps steps $(basename "$cfg" .toml), $prec, $kern" FAILED "see the error above"
  fi
done

# 5. A device checkpoint resumes on the CPU with the same next loss.
fp32=(--set train.precision=fp32 --set train.log_every=1)
if train s5 "$small" $dev 60 --max-steps 3 "${fp32[@]}" && cp -r "$out/s5" "$out/s5-cpu" &&
  train s5 "$small" $dev 60 --max-steps 4 --resume "${fp32[@]}" &&
  train s5-cpu "$small" cpu 60 --max-steps 4 --resume "${fp32[@]}"; then
  a=$(loss_at "$out/s5" 4)
  b=$(loss_at "$out/s5-cpu" 4)
  close "$b" "$a" 2e-3 && ok=1 || ok=0
  check "5 $dev checkpoint resumed on cpu" $ok "step 4 loss: $dev $a, cpu $b"
else
  fail 5 "$(ls -t "$out"/s5*.log | head -n 1)"
  row "5 $dev checkpoint resumed on cpu" FAILED "see the error above"
fi

# 6. Greedy decoding of the eval set with the big model of step 4.
if timeout "$(limit 120)" "$lab" eval --run "$out/s4-big" --device $dev >"$out/s6.log" 2>&1; then
  line=$(grep 'decoded' "$out/s6.log")
  row "6 greedy decode, $(basename "$big" .toml)" ok "${line#  decoded }"
else
  fail 6 "$out/s6.log"
  row "6 greedy decode, $(basename "$big" .toml)" FAILED "see the error above"
fi

# 7. Launches: what one step asks of the GPU, per layer and outside the layers (issue 50's
# budget: 40 a layer, 20 for the embedding, head, loss and optimizer), counted by the preloaded
# scripts/bench/launches.c (built with the binary: dist/liblaunches.so; the dry run builds its
# own, and counts nothing on the CPU) in the small config at two depths, 2 and 4 steps each.
# The dry run without --lab counts the CUDA binary's launches where this machine has one
# (dist/lab-cuda, from scripts/build-cuda.sh): it runs over scripts/bench/nocuda.c, a stand-in
# for the CUDA libraries whose kernels do nothing, so every count is the GPU's and every value
# zero.
shim=$root/dist/liblaunches.so
lab7=$lab dev7=$dev cfg7=${packs[0]} shape7=("${shape[@]}") env7=()
depths=(4 8)
prec=(--set train.precision=bf16)
if [ $dry = 1 ]; then
  shim=$out/liblaunches.so
  cc -O2 -shared -fPIC -o "$shim" "$root/scripts/bench/launches.c" -ldl -lpthread 2>"$out/s7-cc.log" ||
    fail 7 "$out/s7-cc.log"
  if [ -z "$lab_given" ] && [ -x "$root/dist/lab-cuda" ]; then
    (cd "$root" && nocuda "$out/nocuda") 2>>"$out/s7-cc.log" || fail 7 "$out/s7-cc.log"
    lab7=$root/dist/lab-cuda dev7=cuda cfg7=$root/configs/1m-L4.toml shape7=()
    env7=(LD_LIBRARY_PATH="$out/nocuda")
  else
    depths=(1 2)
    prec=()
  fi
fi
if [ ! -f "$shim" ]; then
  row "7 launches" FAILED "$shim missing (scripts/build-cuda.sh builds it; carry dist/)"
  failed=$((failed + 1))
else
  for k in composed fused; do
    files=()
    ok=1
    for l in "${depths[@]}"; do
      for s in 2 4; do
        f=$out/s7-$k-L$l-s$s.txt
        files+=("$f")
        timeout "$(limit 60)" env "${env7[@]}" LD_PRELOAD="$shim" LAB_LAUNCHES="$f" "$lab7" train \
          --config "$cfg7" --device "$dev7" --out "$out/s7-$k-L$l-s$s" "${shape7[@]}" \
          --max-steps $s --kernels $k --set model.n_layer=$l --set train.log_every=100 "${prec[@]}" \
          >"$out/s7-$k-L$l-s$s.log" 2>&1 || { ok=0; break 2; }
      done
    done
    if [ $ok = 1 ] && line=$(python3 "$root/scripts/bench/launches.py" "${depths[0]}" "${files[0]}" \
      "${files[1]}" "${depths[1]}" "${files[2]}" "${files[3]}" 2 --kernels 25 2>&1); then
      printf '%s\n' "$line" >"$out/launches-$k.md"
      row "7 launches, $(basename "$cfg7" .toml), $k" ok "$(head -n 1 <<<"$line")${env7:+ (no GPU: dist/lab-cuda over scripts/bench/nocuda.c)}"
    else
      fail 7 "$(ls -t "$out"/s7-$k-*.log | head -n 1)"
      row "7 launches, $k" FAILED "see the error above"
    fi
  done
fi

# Where the dry run counted over the stand-in, every CUDA path of kernel-check and a tiny epoch
# with the lab's kernels run over it too: nothing may error (a launch shape, a kernel's name,
# a cuBLASLt layout). Every value is the stand-in's zero, so every comparison fails by value.
if [ ${#env7[@]} -gt 0 ]; then
  env "${env7[@]}" timeout "$(limit 120)" "$lab7" kernel-check --device cuda --config tiny \
    --seed 1 >"$out/s7-paths.txt" 2>&1
  ran=$(grep -c '^| tiny |' "$out/s7-paths.txt" || true)
  errors=$(grep -c '| error:' "$out/s7-paths.txt" || true)
  if [ "$ran" -gt 0 ] && [ "$errors" = 0 ] &&
    env "${env7[@]}" timeout "$(limit 120)" "$lab7" train --config "$root/configs/tiny.toml" \
      --device cuda --kernels fused --out "$out/s7-epoch" --set train.epochs=1 \
      >"$out/s7-epoch.log" 2>&1; then
    row "7 CUDA paths over the stand-in" ok "$ran kernel-check rows ran on cuda, none errored \
(their values are the stand-in's, not computed); a tiny epoch with the lab's kernels trained, validated \
and evaluated"
  else
    fail 7 "$out/s7-epoch.log"
    grep '| error:' "$out/s7-paths.txt" >&2 || true
    row "7 CUDA paths over the stand-in" FAILED "$ran kernel-check rows, $errors errored; see above"
  fi
fi

# 8. Small runs packed on one device: K at once, their tokens/s summed (each run's own rate,
# from the end of its first step to its last), and the wall time of the K together. Without
# MPS a GPU time-slices the K processes' contexts; under MPS their kernels share the GPU, so
# on CUDA the first config is packed again under an MPS daemon of its own, where there is one.
pack() { # CONFIG K [LABEL]
  local cfg=$1 k=$2 label=${3:-} c t0 secs pids ok p wall total
  c=$(basename "$cfg" .toml)
  t0=$(date +%s.%N)
  secs=$(limit 90)
  pids=()
  for i in $(seq 1 "$k"); do
    timeout "$secs" "$lab" train --config "$cfg" --device $dev --out "$out/s8-$c-k$k$label-$i" \
      "${shape[@]}" --max-steps "$pack_steps" --set train.log_every=10 \
      >"$out/s8-$c-k$k$label-$i.log" 2>&1 &
    pids+=($!)
  done
  ok=1
  for p in "${pids[@]}"; do wait "$p" || ok=0; done
  wall=$(python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$t0")
  if [ $ok = 1 ]; then
    total=$(cat "$out"/s8-$c-k$k$label-*.log | grep 'throughput:' | num 'throughput:' |
      python3 -c "import sys; print(f'{sum(float(x) for x in sys.stdin):.0f}')")
    row "8 $k × $c at once${label:+, $label}, $pack_steps steps" ok "$total tokens/s in all, $wall s wall"
  else
    fail 8 "$(ls -t "$out"/s8-$c-k$k$label-*.log | head -n 1)"
    row "8 $k × $c at once${label:+, $label}" FAILED "see the error above"
  fi
}
for cfg in "${packs[@]}"; do
  # The data once, before K trainers would race to build it.
  "$lab" data --config "$cfg" >"$out/s8-$(basename "$cfg" .toml)-data.log" 2>&1
  for k in "${ks[@]}"; do pack "$cfg" "$k"; done
done
if [ $dev = cuda ] && command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
  export CUDA_MPS_PIPE_DIRECTORY=$out/mps CUDA_MPS_LOG_DIRECTORY=$out/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d >"$out/mps.log" 2>&1; then
    for k in "${ks[@]}"; do pack "${packs[0]}" "$k" mps; done
    echo quit | nvidia-cuda-mps-control >>"$out/mps.log" 2>&1
  else
    fail 8 "$out/mps.log"
    row "8 MPS" FAILED "the MPS daemon did not start"
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi

finish
