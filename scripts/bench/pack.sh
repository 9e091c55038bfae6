#!/usr/bin/env bash
# A pack against the same runs one after another, on this machine (issue 51's CPU target): N
# runs of one shipped config with seeds 1..N, S steps each, first alone in turn, then as one
# pack (`lab train --pack-with`); the wall seconds of each and their ratio. The FLOPs are the
# same, so the CPU gains only what per-op overhead the pack saves; the GPU is where packing
# pays. Run it on a quiet machine (pause a running study with SIGSTOP).
#
#   scripts/bench/pack.sh [CONFIG] [N] [STEPS] [SET...]    default: 1m-L4 8 40
#   scripts/bench/pack.sh fair-cpu 8 40 --set model.n_layer=16 --set model.n_embd=24
set -euo pipefail
cd "$(dirname "$0")/../.."
cfg=${1:-1m-L4} n=${2:-8} steps=${3:-40}
shift $(( $# < 3 ? $# : 3 ))
cargo build --release --quiet
lab=$PWD/target/release/lab
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$lab" configs "$cfg" --out "$work/base.toml" >/dev/null
"$lab" data --config "$work/base.toml" "$@" >/dev/null
configs=()
for i in $(seq 1 "$n"); do
  # Each run its own name and seed, in the config's [train] table (appended where it has none).
  if grep -q '^\[train\]' "$work/base.toml"; then
    sed -e "s/^name = .*/name = \"run$i\"/" -e "s/^\[train\]$/[train]\nseed = $i/" \
      "$work/base.toml" >"$work/run$i.toml"
  else
    sed -e "s/^name = .*/name = \"run$i\"/" "$work/base.toml" >"$work/run$i.toml"
    printf '\n[train]\nseed = %d\n' "$i" >>"$work/run$i.toml"
  fi
  configs+=("$work/run$i.toml")
done
t0=$(date +%s.%N)
for c in "${configs[@]}"; do
  "$lab" train --device cpu --config "$c" --out "$work/alone/$(basename "$c" .toml)" \
    --max-steps "$steps" "$@" >/dev/null 2>&1
done
t1=$(date +%s.%N)
packs=()
for c in "${configs[@]:1}"; do packs+=(--pack-with "$c"); done
"$lab" train --device cpu --config "${configs[0]}" "${packs[@]}" --out "$work/pack" \
  --max-steps "$steps" "$@" >/dev/null 2>"$work/pack.log"
t2=$(date +%s.%N)
same=0
for c in "${configs[@]}"; do
  r=$(basename "$c" .toml)
  cmp -s "$work/alone/$r/model.safetensors" "$work/pack/$r/model.safetensors" && same=$((same + 1))
done
python3 - "$t0" "$t1" "$t2" "$cfg" "$n" "$steps" "$same" "$*" <<'PY'
import sys
t0, t1, t2 = map(float, sys.argv[1:4])
cfg, n, steps, same, extra = sys.argv[4:9]
a, p = t1 - t0, t2 - t1
print(f"{n} x {cfg}{(' ' + extra) if extra else ''}, {steps} steps each: one after another {a:.1f} s, "
      f"as one pack {p:.1f} s, ratio {p / a:.2f} (models byte-identical: {same} of {n})")
PY
