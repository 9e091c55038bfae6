#!/usr/bin/env bash
# Training and decoding speed of the lab against the strongest PyTorch baselines, on this
# machine, in one invocation, printed as one table (the README's performance table):
#   - the f32 matmul peak, measured now on the run's threads (the lab's gemm and torch.mm);
#   - model (a) L=4 E=128 H=4 and model (b) L=6 E=384 H=6 on the paper graph (vocabulary
#     17,664 after padding, batch 64): `lab train` tokens/s and % of peak, and PyTorch on the
#     same model and batches (scripts/bench/torch_gpt2.py): eager with the LM head at every
#     position, eager with the head at the loss positions only, and torch.compile of the latter;
#   - greedy decoding of the paper eval set with (a): `lab eval` against PyTorch with a KV
#     cache (scripts/bench/torch_decode.py), same weights, prompts and batches;
#   - the lab's per-op profile (LAB_PROFILE) of each training run and of the decoding;
#   - "study shapes, 1 thread": the four shapes the depth studies spend their time on (the
#     repro-cpu world, 100k and 1M buckets at L = 1 and 16), as the studies run them, one
#     thread per run: lab, PyTorch eager with the head at the loss positions, torch.compile,
#     lab ÷ compile, and % of the one-thread matmul peak; plus the lab's profile of each.
#
# usage: scripts/bench/train.sh [STEPS_A] [STEPS_B]    (run from anywhere; 2 threads unless
#        RAYON_NUM_THREADS says otherwise; about 15 minutes on 2 cores)
#        BENCH_TABLES=study scripts/bench/train.sh      (the study shapes' table alone)
# The PyTorch side lives in target/bench-py (scripts/bench/requirements.txt, ~5 GB, made on
# first use). Run it on a quiet machine: anything else on the cores shows in every figure.
set -euo pipefail
cd "$(dirname "$0")/../.."
steps_a=${1:-60}
steps_b=${2:-20}
threads=${RAYON_NUM_THREADS:-2}
py=target/bench-py/bin/python
if [ ! -x "$py" ] || ! "$py" -c 'import torch, transformers' 2>/dev/null; then
  echo "making target/bench-py (scripts/bench/requirements.txt) ..." >&2
  python3 -m venv target/bench-py
  "$py" -m pip install --quiet -r scripts/bench/requirements.txt
fi
cargo build --release --quiet
lab=target/release/lab
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export RAYON_NUM_THREADS=$threads

field() { # FILE KEY: a number from a JSON file
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"
}
. scripts/lib.sh

mm_peak() { # THREADS: torch.mm's f32 FLOP/s, 1024³, best of 13
  "$py" - "$1" <<'EOF'
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
n = 1024
a, b = torch.ones(n, n), torch.ones(n, n)
best = min((lambda t: (torch.mm(a, b), time.perf_counter() - t)[1])(time.perf_counter())
           for _ in range(13))
print(f"{2 * n ** 3 / best:.4g}")
EOF
}

declare -A tps flops peak
train() { # NAME CONFIG STEPS [--set KEY=VALUE ...]
  local name=$1 cfg=$2 steps=$3 log=$out/$1.log
  shift 3
  LAB_PROFILE=1 $lab train --config "$cfg" --device cpu --max-steps "$steps" --out "$out/$name" \
    "$@" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  tps[$name]=$(grep 'throughput:' "$log" | num 'throughput:')
  peak[$name]=$(grep 'MFU against' "$log" | num 'against')
  local st=$out/$name/trainer_state.json
  # Model FLOPs per token (LM head at the loss positions counted), over the same batches.
  flops[$name]=$(python3 -c "import json,sys; s=json.load(open(sys.argv[1])); \
print((s['flops'] + s['flops_head']) / s['tokens'])" "$st")
}
torch_train() { # NAME L E H STEPS FLAGS...: tokens/s
  local data=$(field "$out/$1/run.json" data_dir) l=$2 e=$3 h=$4 steps=$5
  shift 5
  "$py" scripts/bench/torch_gpt2.py "$data" --layers "$l" --embd "$e" --heads "$h" \
    --steps "$steps" --threads "$threads" "$@" 2>/dev/null | tail -1 | num ':'
}

# The study shapes, 1 thread each (issue 21): lab, eager head-at-loss, compile.
study_table() {
  local peak1 shapes=("100k L1 E88 H4" "100k L16 E24 H4" "1M L1 E288 H4" "1M L16 E72 H4")
  peak1=$(mm_peak 1)
  local rows="" s name l e h eager comp
  for s in "${shapes[@]}"; do
    set -- $s
    name=study-$1-$2; l=${2#L}; e=${3#E}; h=${4#H}
    RAYON_NUM_THREADS=1 train "$name" configs/repro-cpu.toml 300 \
      --set model.n_layer="$l" --set model.n_embd="$e" --set model.n_head="$h"
    eager=$(threads=1 torch_train "$name" "$l" "$e" "$h" 60 --head-at-loss)
    comp=$(threads=1 torch_train "$name" "$l" "$e" "$h" 60 --compile)
    rows+="$s|${tps[$name]}|${flops[$name]}|${peak[$name]}|$eager|$comp;"
  done
  python3 - "$peak1" "$rows" <<'EOF'
import sys
torch_peak, rows = float(sys.argv[1]), [r.split("|") for r in sys.argv[2].split(";") if r]
peak = max([torch_peak] + [float(r[3]) for r in rows])
print(f"study shapes, 1 thread (repro-cpu world, batch 64, 300 lab steps, 60 torch steps); "
      f"one-thread f32 matmul peak {peak / 1e9:.0f} GFLOP/s")
print()
print("| shape | lab tokens/s | % of 1-thread peak | torch eager, head at loss "
      "| torch.compile, head at loss | lab ÷ compile |")
print("| --- | --- | --- | --- | --- | --- |")
for shape, lab, fpt, _, eager, comp in rows:
    lab, fpt, eager, comp = map(float, (lab, fpt, eager, comp))
    print(f"| {shape} | {lab:,.0f} | {100 * lab * fpt / peak:.0f}% | {eager:,.0f} "
          f"| {comp:,.0f} | {lab / comp:.2f}x |")
EOF
  for s in "${shapes[@]}"; do
    set -- $s
    echo
    echo "(study $s) $(sed -n 's/^profile (LAB_PROFILE)/lab per-op profile/p' "$out/study-$1-$2.log")"
    sed -n '/^profile (LAB_PROFILE)/,/^[^ ]/p' "$out/study-$1-$2.log" | grep '^  '
  done
}
if [ "${BENCH_TABLES:-all}" = study ]; then
  study_table
  exit 0
fi
torch_peak=$(mm_peak "$threads")
train a configs/1m-L4.toml "$steps_a"
train b configs/10m-L6.toml "$steps_b"
declare -A full loss comp
for m in a b; do
  if [ $m = a ]; then set -- 4 128 4 "$steps_a"; else set -- 6 384 6 "$steps_b"; fi
  full[$m]=$(torch_train $m "$@")
  loss[$m]=$(torch_train $m "$@" --head-at-loss)
  comp[$m]=$(torch_train $m "$@" --compile)
done
LAB_PROFILE=1 $lab eval --run "$out/a" >"$out/decode.log" 2>&1 || { cat "$out/decode.log" >&2; exit 1; }
dec=$(grep 'decoded' "$out/decode.log")
tdec=$("$py" scripts/bench/torch_decode.py "$out/a" --threads "$threads" 2>/dev/null | tail -1)

python3 - "$torch_peak" "${peak[a]}" "${peak[b]}" <<EOF
import re, sys
torch_peak, lab_peak = float(sys.argv[1]), max(map(float, sys.argv[2:]))
peak = max(torch_peak, lab_peak)
rows = {"a": ("L4 E128 H4", ${tps[a]}, ${flops[a]}, ${full[a]}, ${loss[a]}, ${comp[a]}),
        "b": ("L6 E384 H6", ${tps[b]}, ${flops[b]}, ${full[b]}, ${loss[b]}, ${comp[b]})}
print(f"machine: $(lscpu | sed -n 's/^Model name: *//p'), $threads threads, $(date -u +%F)")
print(f"f32 matmul peak (1024³, best of 10): lab gemm {lab_peak / 1e9:.0f} GFLOP/s, "
      f"torch.mm {torch_peak / 1e9:.0f} GFLOP/s; % of peak below is of {peak / 1e9:.0f}")
print()
print("| model | lab tokens/s | % of peak | torch eager, head everywhere | eager, head at loss "
      "| torch.compile, head at loss | lab ÷ best torch |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for m, (shape, lab, fpt, full, loss, comp) in rows.items():
    best = max(loss, comp)
    print(f"| ({m}) {shape} | {lab:,.0f} | {100 * lab * fpt / peak:.0f}% | {full:,.0f} "
          f"| {loss:,.0f} | {comp:,.0f} | {lab / best:.2f}x |")
lab_s = float(re.search(r"in ([0-9.]+) s", "$dec").group(1))
lab_t = float(re.search(r"s: ([0-9.]+) generated", "$dec").group(1))
t_s = float(re.search(r"in ([0-9.]+) s", "$tdec").group(1))
t_t = float(re.search(r"s: ([0-9.]+) generated", "$tdec").group(1))
print()
print("| greedy decode of the paper eval set, model (a) | seconds | generated tokens/s |")
print("| --- | --- | --- |")
print(f"| lab | {lab_s:.2f} | {lab_t:,.0f} |")
print(f"| torch, KV cache | {t_s:.2f} | {t_t:,.0f} |")
print(f"| lab ÷ torch | {t_s / lab_s:.2f}x faster | |")
EOF
for m in a b decode; do
  echo
  echo "($m) $(sed -n 's/^profile (LAB_PROFILE)/lab per-op profile/p' "$out/$m.log")"
  sed -n '/^profile (LAB_PROFILE)/,/^[^ ]/p' "$out/$m.log" | grep '^  '
done
echo
study_table
