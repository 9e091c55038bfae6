#!/usr/bin/env bash
# cargo-mutants on the numeric core (issue 26), each file with the tests that cover it, in a
# worktree of its own (target/mutants/tree, at HEAD, mutated in place) so that no build of this
# tree, such as a running study's, ever sees a mutant. Results: target/mutants/<name>/mutants.out
# (caught.txt, missed.txt, unviable.txt, timeout.txt); a summary line per file on stdout.
#
#   scripts/mutants.sh                 # every file below, in order
#   scripts/mutants.sh score decode    # some of them
#
# --iterate: a run cut short continues where it stopped (mutants already caught are skipped).
# ops.rs: the backward kernels and each op's bwd. About 10 s a mutant on 2 quiet cores once the worktree's first build is done (about 10 min).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked
root=$(pwd)/target/mutants
tree=$root/tree
if [ ! -d "$tree" ]; then
  git worktree add --detach "$tree" HEAD -q
else
  git -C "$tree" checkout -q -- . && git -C "$tree" checkout -q --detach "$(git rev-parse HEAD)"
fi
# name, the file, the mutant filter (a regex on the mutant's name, empty: all), the test filter.
# decode.rs: its sampling, with its unit tests (the batched decoder around it is held by
# eval_cli's end-to-end tests, at about a minute a mutant).
runs=(
  "adamw|src/train/adamw.rs||adamw parity"
  "sets|src/eval/sets.rs||sets"
  "score|src/eval/score.rs||score eval_score"
  "decode|src/eval/decode.rs|at_temperature|sample_stream|choose|restrict|decode"
  "ops|src/model/ops.rs|Bwd>::cpu_fwd|ln_bwd_rows|>::bwd|ops parity"
)
want=("$@")
for r in "${runs[@]}"; do
  name=${r%%|*}
  rest=${r#*|}
  file=${rest%%|*}
  rest=${rest#*|}
  filter=${rest%|*}
  tests=${rest##*|}
  if [ ${#want[@]} -gt 0 ] && [[ ! " ${want[*]} " == *" $name "* ]]; then continue; fi
  re=()
  [ -n "$filter" ] && re=(--re "$filter")
  # shellcheck disable=SC2086 # the test filter is several words on purpose
  (cd "$tree" && cargo mutants --in-place --iterate --baseline skip --timeout 300 --build-timeout 900 \
    -f "$file" "${re[@]}" --output "$root/$name" -- --lib --test it -- $tests) \
    > "$root/$name.log" 2>&1 || true
  git -C "$tree" checkout -q -- . && rm -rf "$tree/tests/proptest-regressions"
  echo "$name: $(tail -1 "$root/$name.log")"
done
