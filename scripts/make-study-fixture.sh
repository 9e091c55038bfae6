#!/usr/bin/env bash
# Re-make the committed study fixture (tests/fixtures/study): train its two micro sweeps with
# scripts/study.sh, export the runs, collect and report; tests/it/study.rs then checks that the
# figures, findings.json and every answer file regenerate from the committed runs alone.
set -euo pipefail
cd "$(dirname "$0")/.."
f=tests/fixtures/study
rm -rf "$f/runs" checkpoints/fixture-depth checkpoints/fixture-width
STUDY_COMMIT=0 bash scripts/study.sh "$f/depth.toml" "$f/width.toml"
# The committed layout (docs/RESULTS.md): the answers the report reads, each evaluation's figures.
cargo run --release --quiet -- sweep slim "$f"
# Keep what the test compares; the figures regenerate.
find "$f" -maxdepth 1 -type f \( -name '*.svg' -o -name '*.png' -o -name '*.csv' -o -name 'report.md' \) \
  ! -name results.csv -delete
