#!/usr/bin/env bash
# Training throughput of `lab train` against PyTorch eager on the same model and batches, on
# this machine, for model (a) L=4 E=128 H=4 and model (b) L=6 E=384 H=6 on the paper graph
# (vocabulary 17,664 after padding, batch 64). Prints tokens/s for each and the ratio.
#
# usage: scripts/bench/train.sh [STEPS_A] [STEPS_B]    (run from the repository root)
# needs: python3 with torch and transformers (not installed by CI; about 5 GB)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps_a=${1:-40}
steps_b=${2:-16}
threads=${RAYON_NUM_THREADS:-2}
cargo build --release --quiet
lab=target/release/lab
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

bench() { # name config layers embd heads steps
  local name=$1 cfg=$2 l=$3 e=$4 h=$5 steps=$6
  local line ours data theirs
  line=$(RAYON_NUM_THREADS=$threads $lab train --config "$cfg" --device cpu --max-steps "$steps" \
    --out "$out/$name" | grep 'throughput:')
  ours=$(echo "$line" | sed -E 's/.*throughput: ([0-9]+) tokens.*/\1/')
  data=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['data_dir'])" "$out/$name/run.json")
  theirs=$(python3 scripts/bench/torch_gpt2.py "$data" --layers "$l" --embd "$e" --heads "$h" \
    --steps "$steps" --threads "$threads" 2>/dev/null | sed -E 's/.*: ([0-9]+) tokens.*/\1/')
  printf '%-26s lab %6s tokens/s   torch eager %6s tokens/s   ratio %s\n' \
    "($name) L=$l E=$e H=$h" "$ours" "$theirs" "$(python3 -c "print(f'{$ours/$theirs:.2f}x')")"
}

bench a configs/1m-L4.toml 4 128 4 "$steps_a"
bench b configs/10m-L6.toml 6 384 6 "$steps_b"
