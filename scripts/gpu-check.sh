#!/usr/bin/env bash
# The one-shot GPU check: proves the CUDA path and measures it in one run of at most ~8 minutes
# on one GPU, and prints one table. A step that fails prints its error and the script goes on;
# the exit status is the number of failed steps (0: all passed).
#
#   scripts/gpu-check.sh [--lab BIN]     on a GPU machine: --device cuda, the paper's shapes
#   scripts/gpu-check.sh --dry-run       the same steps on the CPU with tiny shapes (CI runs it)
#
#   1. the binary: --lab BIN, else dist/lab-cuda when present (carried: built here with
#      scripts/build-cuda.sh, no GPU needed), else built on the spot (cargo build --release
#      --features cuda: minutes on the GPU machine); the dry run uses target/release/lab;
#   2. the first-step loss on the device equals the CPU loss on the same batch: fp32 (TF32
#      matmuls, tolerance 2e-3 relative) and bf16 (2e-2 relative), against the CPU's fp32;
#   3. 200 steps of 10m-L6 and of 100m-L8 in bf16: tokens/s, MFU, peak device memory;
#   4. a checkpoint written on the device resumes on the CPU: the next step's loss on the CPU
#      equals the device's (fp32, 2e-3 relative);
#   5. greedy decoding of the paper eval set with the 100m-L8 model of step 3: seconds and
#      generated tokens/s.
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
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0
table=()
row() { table+=("| $1 | $2 | $3 |"); }
fail() { # STEP LOGFILE
  echo "step $1 FAILED:" >&2
  [ -f "$2" ] && tail -n 5 "$2" >&2
  failed=$((failed + 1))
}
. scripts/lib.sh
loss_at() { # RUN STEP: train/loss logged at that step
  python3 -c "
import json, sys
for l in open(sys.argv[1] + '/metrics.jsonl'):
    m = json.loads(l)
    if m.get('step') == int(sys.argv[2]) and 'train/loss' in m:
        print(m['train/loss'])" "$1" "$2"
}
close() { # A B REL: |a - b| <= rel * |b|
  python3 -c "import sys; a, b, r = map(float, sys.argv[1:]); sys.exit(abs(a - b) > r * abs(b))" "$@"
}

if [ $dry = 1 ]; then
  dev=cpu
  small=$root/configs/tiny.toml
  big=$root/configs/tiny.toml
  steps=20
  shape=(--set model.n_embd=64)
else
  dev=cuda
  small=$root/configs/10m-L6.toml
  big=$root/configs/100m-L8.toml
  steps=200
  shape=()
fi

# 1. The binary.
t0=$(date +%s)
if [ -z "$lab" ]; then
  if [ $dry = 1 ]; then
    cargo build --release --quiet >"$out/build.log" 2>&1 && lab=target/release/lab
    how="built for the CPU (dry run)"
  elif [ -x dist/lab-cuda ]; then
    lab=dist/lab-cuda
    how="carried: dist/lab-cuda"
  else
    cargo build --release --features cuda >"$out/build.log" 2>&1 && lab=target/release/lab
    how="built here: cargo build --release --features cuda"
  fi
else
  how="given: $lab"
fi
if [ -n "$lab" ] && "$lab" --version >>"$out/build.log" 2>&1; then
  lab=$(realpath "$(command -v "$lab")")
  # Every run and the data it builds stay in the scratch directory.
  cd "$out"
  row "1 binary" ok "$how, $(($(date +%s) - t0)) s"
else
  fail 1 "$out/build.log"
  row "1 binary" FAILED "$how"
  printf '%s\n' "${table[@]}"
  exit "$failed"
fi
train() { # NAME CONFIG DEVICE ARGS...: a run under $out/NAME, its log beside it
  local name=$1 cfg=$2 device=$3
  shift 3
  "$lab" train --config "$cfg" --device "$device" --out "$out/$name" "${shape[@]}" "$@" \
    >"$out/$name.log" 2>&1
}

# 2. First-step loss, device against CPU.
one=(--max-steps 1 --set train.log_every=1)
if train s2-cpu "$small" cpu "${one[@]}" --set train.precision=fp32; then
  ref=$(loss_at "$out/s2-cpu" 1)
  for p in fp32 bf16; do
    tol=$([ $p = fp32 ] && echo 2e-3 || echo 2e-2)
    if train "s2-$p" "$small" $dev "${one[@]}" --set train.precision=$p; then
      got=$(loss_at "$out/s2-$p" 1)
      if close "$got" "$ref" "$tol"; then
        row "2 first-step loss, $p" ok "$dev $got, cpu fp32 $ref (tolerance $tol relative)"
      else
        row "2 first-step loss, $p" FAILED "$dev $got, cpu fp32 $ref (tolerance $tol relative)"
        failed=$((failed + 1))
      fi
    else
      fail 2 "$out/s2-$p.log"
      row "2 first-step loss, $p" FAILED "see the error above"
    fi
  done
else
  fail 2 "$out/s2-cpu.log"
  row "2 first-step loss" FAILED "the CPU reference did not train"
fi

# 3. Throughput, MFU and peak memory over $steps steps.
mem_watch() { # poll the device's used memory (MiB) into $1 until killed
  if [ $dev = cuda ]; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$1" 2>/dev/null
  fi
}
for size in small big; do
  if [ $size = small ]; then cfg=$small; else cfg=$big; fi
  name=s3-$size
  mem_watch "$out/$name.mem" &
  watch=$!
  if /usr/bin/time -f '%M' -o "$out/$name.rss" true 2>/dev/null; then
    timed=(/usr/bin/time -f '%M' -o "$out/$name.rss")
  else
    timed=()
  fi
  if "${timed[@]}" "$lab" train --config "$cfg" --device $dev --out "$out/$name" "${shape[@]}" \
    --max-steps "$steps" --set train.precision=bf16 --set train.log_every=10 \
    >"$out/$name.log" 2>&1; then
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
    row "3 $steps steps $(basename "$cfg" .toml), bf16" ok "$tps tokens/s, MFU $mfu, $mem"
  else
    kill $watch 2>/dev/null
    fail 3 "$out/$name.log"
    row "3 $steps steps $(basename "$cfg" .toml), bf16" FAILED "see the error above"
  fi
done

# 4. A device checkpoint resumes on the CPU with the same next loss.
fp32=(--set train.precision=fp32 --set train.log_every=1)
if train s4 "$small" $dev --max-steps 3 "${fp32[@]}" && cp -r "$out/s4" "$out/s4-cpu" &&
  train s4 "$small" $dev --max-steps 4 --resume "${fp32[@]}" &&
  train s4-cpu "$small" cpu --max-steps 4 --resume "${fp32[@]}"; then
  a=$(loss_at "$out/s4" 4)
  b=$(loss_at "$out/s4-cpu" 4)
  if close "$b" "$a" 2e-3; then
    row "4 $dev checkpoint resumed on cpu" ok "step 4 loss: $dev $a, cpu $b"
  else
    row "4 $dev checkpoint resumed on cpu" FAILED "step 4 loss: $dev $a, cpu $b"
    failed=$((failed + 1))
  fi
else
  fail 4 "$(ls -t "$out"/s4*.log | head -n 1)"
  row "4 $dev checkpoint resumed on cpu" FAILED "see the error above"
fi

# 5. Greedy decoding of the eval set with the big model of step 3.
run=$out/s3-big
if "$lab" eval --run "$run" --device $dev >"$out/s5.log" 2>&1; then
  line=$(grep 'decoded' "$out/s5.log")
  row "5 greedy decode, $(basename "$big" .toml)" ok "${line#  decoded }"
else
  fail 5 "$out/s5.log"
  row "5 greedy decode, $(basename "$big" .toml)" FAILED "see the error above"
fi

echo
echo "gpu-check on $dev ($([ $dry = 1 ] && echo 'dry run, tiny shapes' || nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)), $(date -u +%F)"
echo "| step | result | figures |"
echo "| --- | --- | --- |"
printf '%s\n' "${table[@]}"
exit "$failed"
