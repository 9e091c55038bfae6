"""The GPU study's cost at measured rates: each bucket's training FLOPs (a CSV of bucket,
config, flops; results/gpu/study-flops.csv) over the FLOP/s its config reached on the GPU
(scripts/bench/gpu.sh's fastest lab row at the paper's batch, one run a GPU), in GPU-hours.

    study_cost.py FLOPS_CSV CONFIG=FLOP/S ...

Prints a markdown table and the total; a bucket whose config was not measured says so and
leaves the total out.
"""

import csv
import sys


def main(argv):
    if len(argv) < 1:
        sys.exit(__doc__)
    rates = {}
    for a in argv[1:]:
        if "=" not in a:
            sys.exit(f"study_cost.py: {a}: not CONFIG=FLOP/S")
        name, value = a.split("=", 1)
        try:
            rates[name] = float(value)
        except ValueError:
            sys.exit(f"study_cost.py: {a}: the rate is not a number")
        if not rates[name] > 0:
            sys.exit(f"study_cost.py: {a}: the rate must be above 0")
    with open(argv[0]) as f:
        rows = list(csv.DictReader(l for l in f if not l.startswith("#")))
    print("| bucket | training FLOPs | priced at | FLOP/s | GPU-hours |")
    print("| --- | --- | --- | --- | --- |")
    total, complete = 0.0, True
    for r in rows:
        flops, cfg = float(r["flops"]), r["config"]
        if cfg in rates:
            hours = flops / rates[cfg] / 3600
            total += hours
            print(f"| {r['bucket']} | {flops:.3g} | {cfg} | {rates[cfg]:.3g} | {hours:.1f} |")
        else:
            complete = False
            print(f"| {r['bucket']} | {flops:.3g} | {cfg} | not measured | |")
    if complete:
        print(f"\nthe study: {total:.1f} GPU-hours, one run a GPU")
    else:
        print("\nthe study: no total (a bucket's config was not measured)")


if __name__ == "__main__":
    main(sys.argv[1:])
