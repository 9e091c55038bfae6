#!/usr/bin/env bash
# The lab against PyTorch on the same GPU, side by side in one run, as one table: the same model
# (GPT-2, tied head), the same batches (the lab's token cache, read by
# scripts/bench/torch_gpt2.py in the same order and padding), bf16, AdamW with clipping.
#   - lab, composed kernels (CUDA's default) and with the lab's kernels (--kernels fused: the
#     multi-tensor AdamW on CUDA);
#   - PyTorch eager: bf16 autocast, fused AdamW, the LM head at the loss positions only;
#   - torch.compile of the same, default mode and mode="reduce-overhead" (CUDA graphs).
# Rows: 100m-L8, 1m-L4 and 10m-L6 at the paper's batch (64 sequences, about 1,300 tokens), and
# 100m-L8 at 1,600 sequences (about 33k tokens). Columns: ms a step, tokens/s, MFU (the lab's
# FLOP count, which PyTorch's runs share: same model, same tokens) and CUDA kernels a step
# (PyTorch: torch.profiler over one step; the lab: kernels and cuBLAS products of steps 3 and 4
# under the launch counter dist/liblaunches.so, which scripts/build-cuda.sh builds). Then the
# GPU study's cost in GPU-hours: each bucket's training FLOPs (results/gpu/study-flops.csv) at
# its config's fastest lab row at the paper's batch, one run a GPU (scripts/bench/study_cost.py).
#
#   scripts/bench/gpu.sh [--lab BIN]     on a GPU machine, after scripts/gpu-check.sh or alone;
#                                        default BIN dist/lab-cuda; the table goes to
#                                        $OUT/bench-gpu.md (or stdout only)
# The whole run stays under BENCH_BUDGET seconds (default 420); each figure is a 40-step run
# after 10 warm-up steps (compile's first shapes are slow and fall in the warm-up).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
lab=$root/dist/lab-cuda
[ "${1:-}" = --lab ] && lab=$(realpath "$2")
. scripts/lib.sh
deadline=$(( $(date +%s) + ${BENCH_BUDGET:-420} ))
limit() { local left=$(( deadline - $(date +%s) )); [ "$left" -lt "$1" ] && echo $(( left > 1 ? left : 1 )) || echo "$1"; }
work=${OUT:-$(mktemp -d)}/bench-gpu
mkdir -p "$work"
cd "$work"
steps=50 warm=10
table=("| model | batch | runner | ms a step | tokens/s | MFU | kernels a step |"
  "| --- | --- | --- | --- | --- | --- | --- |")
py=python3
declare -A rates

# The issue's targets first (100m-L8 at the paper's batch, 1m-L4 alone, 100m-L8 at 32k tokens),
# so that a budget cut short still measures them; BENCH_ROWS="CONFIG:BATCH ..." picks others.
for row in ${BENCH_ROWS:-100m-L8:64 1m-L4:64 100m-L8:1600 10m-L6:64}; do
  cfg=${row%:*} batch=${row#*:}
  conf=$root/configs/$cfg.toml
  set_batch=(--set train.batch_size=$batch --set train.precision=bf16 --set train.log_every=10)
  # The lab, both kernel sets; its data directory is the one PyTorch reads.
  lab_tps=""
  lab_mfu=""
  for k in composed fused; do
    log=$work/lab-$cfg-$batch-$k.log
    if timeout "$(limit 120)" "$lab" train --config "$conf" --device cuda --out "$work/lab-$cfg-$batch-$k" \
      --max-steps $steps --kernels $k "${set_batch[@]}" >"$log" 2>&1; then
      tps=$(grep 'throughput:' "$log" | num 'throughput:')
      mfu=$(python3 -c "
import json, sys
m = [json.loads(l) for l in open(sys.argv[1] + '/metrics.jsonl')]
v = [x['train/mfu'] for x in m if x.get('train/mfu') is not None]
print(v[-1] if v else '')" "$work/lab-$cfg-$batch-$k")
      # Mean tokens a step, from the summary's "after N steps" and "T tokens".
      n=$(grep -oE 'after [0-9]+ steps' "$log" | num after)
      tok=$(grep -oE '[0-9]+ tokens,' "$log" | sed -E 's/ tokens,//')
      [ -z "$lab_tps" ] && { lab_tps=$tps; lab_mfu=$mfu; }
      ms=$(python3 -c "import sys; t, n, tps = map(float, sys.argv[1:]); print(f'{1000 * t / n / tps:.2f}')" "$tok" "$n" "$tps" 2>/dev/null || echo '?')
      # FLOP/s: the run's FLOPs over its time (its tokens at its rate); the fastest kernel set
      # at the paper's batch prices the config's bucket in the study's cost below.
      flops=$(grep -oE '[0-9.e+]+ FLOPs in all' "$log" | cut -d' ' -f1)
      rate=$(python3 -c "import sys; f, t, tps = map(float, sys.argv[1:]); print(f * tps / t)" "$flops" "$tok" "$tps" 2>/dev/null)
      if [ "$batch" = 64 ] && [ -n "$rate" ]; then
        rates[$cfg]=$(python3 -c "import sys; print(max(float(x) for x in sys.argv[1:] if x))" "$rate" "${rates[$cfg]:-}")
      fi
      pct=$(python3 -c "import sys; print(f'{100 * float(sys.argv[1]):.1f}%' if sys.argv[1] else '?')" "$mfu")
      launches=""
      if [ -f "$root/dist/liblaunches.so" ]; then
        # Calls of steps 3 and 4 alone (kernels and cuBLAS products): 4 steps less 2, halved.
        for s in 2 4; do
          LD_PRELOAD=$root/dist/liblaunches.so LAB_LAUNCHES=$work/launches-$cfg-$batch-$k-$s.txt \
            timeout "$(limit 60)" "$lab" train --config "$conf" --device cuda \
            --out "$work/launches-$cfg-$batch-$k-$s" --max-steps $s --kernels $k "${set_batch[@]}" \
            >/dev/null 2>&1
        done
        launches=$(python3 "$root/scripts/bench/launches.py" --step \
          "$work/launches-$cfg-$batch-$k-2.txt" "$work/launches-$cfg-$batch-$k-4.txt" 2 2>/dev/null)
      fi
      table+=("| $cfg | $batch | lab $k | $ms | $tps | $pct | ${launches:-n/a} |")
    else
      tail -n 3 "$log" >&2
      table+=("| $cfg | $batch | lab $k | FAILED | | | |")
    fi
  done
  # PyTorch on the same data directory's token cache.
  data=$("$lab" data --config "$conf" 2>/dev/null | sed -E 's/^(built|reused) ([^:]+):.*/\2/')
  read -r l e h < <(python3 -c "
import tomllib, sys
c = tomllib.load(open(sys.argv[1]))['model']
print(c['n_layer'], c['n_embd'], c['n_head'])" "$conf")
  for mode in eager default reduce-overhead; do
    args=(--layers "$l" --embd "$e" --heads "$h" --batch "$batch" --steps $steps --warmup $warm
      --device cuda --bf16 --head-at-loss --count-launches)
    [ $mode = eager ] || args+=(--compile-mode $mode)
    log=$work/torch-$cfg-$batch-$mode.log
    if PYTHONUNBUFFERED=1 timeout "$(limit 240)" $py "$root/scripts/bench/torch_gpt2.py" "$data" "${args[@]}" >"$log" 2>&1; then
      line=$(grep '^torch ' "$log")
      tps=$(echo "$line" | num ':')
      ms=$(echo "$line" | sed -E 's/.*, ([0-9.]+) ms a step.*/\1/')
      k=$(echo "$line" | sed -nE 's/.*, ([0-9]+) CUDA kernels a step.*/\1/p')
      pct=$(python3 -c "import sys; a, b, m = sys.argv[1:]; print(f'{100 * float(m) * float(a) / float(b):.1f}%' if m and b else '?')" "$tps" "${lab_tps:-}" "${lab_mfu:-}")
      table+=("| $cfg | $batch | torch $mode | $ms | $tps | $pct | ${k:-?} |")
    else
      tail -n 3 "$log" >&2
      table+=("| $cfg | $batch | torch $mode | FAILED | | | |")
    fi
  done
done

{
  echo "bench-gpu on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1), $(date -u +%F): $steps steps, the first $warm not timed (torch); bf16"
  printf '%s\n' "${table[@]}"
  echo
  echo "The GPU study's cost at these rates (scripts/bench/study_cost.py):"
  args=()
  for c in "${!rates[@]}"; do args+=("$c=${rates[$c]}"); done
  python3 "$root/scripts/bench/study_cost.py" "$root/results/gpu/study-flops.csv" "${args[@]}"
} | tee "$work/../bench-gpu.md"
