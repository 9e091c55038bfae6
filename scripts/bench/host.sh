#!/usr/bin/env bash
# The host's own time a step of the CUDA binary, measured without a GPU: dist/lab-cuda trains
# over scripts/bench/nocuda.c, whose kernels, products, large copies and memsets cost nothing
# and whose memory is pooled as a GPU's stream-ordered pool is, so a step's wall time there is
# the lab's, candle's and the calls' host work: the floor of a step on a GPU without CUDA
# graphs (a GPU's driver adds its own few microseconds a call). Each row: 80 steps, bf16, the
# median of the 10-step windows after the first 20 (the first fill the pool).
#
#   scripts/bench/host.sh [CONFIG:BATCH ...]    default 1m-L4:64 100m-L8:64; needs dist/lab-cuda
#                                               (scripts/build-cuda.sh); a quiet machine
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib.sh
[ -x dist/lab-cuda ] || { echo "host.sh: dist/lab-cuda missing (scripts/build-cuda.sh builds it)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nocuda "$work/nocuda"
echo "| model | batch | kernels | host ms a step | tokens a step |"
echo "| --- | --- | --- | --- | --- |"
for row in "${@:-1m-L4:64 100m-L8:64}"; do
  for r in $row; do
    cfg=${r%:*} batch=${r#*:}
    for k in composed fused; do
      out=$work/$cfg-$batch-$k
      if ! LD_LIBRARY_PATH=$work/nocuda dist/lab-cuda train --config "configs/$cfg.toml" --device cuda \
        --out "$out" --max-steps 80 --kernels "$k" --set train.batch_size="$batch" \
        --set train.precision=bf16 --set train.log_every=10 >"$out.log" 2>&1; then
        tail -n 3 "$out.log" >&2
        echo "| $cfg | $batch | $k | FAILED | |"
        continue
      fi
      python3 - "$out/metrics.jsonl" "$out.log" "$cfg" "$batch" "$k" <<'EOF'
import json, re, statistics, sys
metrics, log, cfg, batch, k = sys.argv[1:]
rates = [json.loads(l)["train/tokens_per_s"] for l in open(metrics)][2:]
tokens = int(re.search(r"(\d+) tokens,", open(log).read()).group(1)) / 80
print(f"| {cfg} | {batch} | {k} | {1000 * tokens / statistics.median(rates):.2f} | {tokens:.0f} |")
EOF
    done
  done
done
