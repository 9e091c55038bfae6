# When a depth cannot be placed at a bucket's common compute (its first evaluation already costs
# more: L = 1 in the L x E arms), the voted depth test is inconclusive. This bounds it instead:
# if C does not fall between initialisation and a run's first evaluation, that first evaluation's
# C is an upper bound on the run's C at the common compute. The placeable runs are read as the
# lab reads them (C interpolated linearly in log compute between evaluations); the bootstrap over
# seeds (10,000 resamples within each depth, seed 0) then gives P(interior best) with the bound
# standing in, which can only favour the unplaceable depth. SWEEPS as in fair-depth-contrast.py.
#   python3 scripts/fair-l1-bound.py [1M|100k] SWEEPS
import csv, collections, math, random, statistics as st, sys

bucket, sweeps = sys.argv[1], sys.argv[2].split(",")
# depth -> sweep -> seed -> [(flops, C)] at every evaluation
by = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(list)))
for r in csv.DictReader(open("results/fair-cpu/results.csv")):
    if r["sweep"] in sweeps and r["bucket"] == bucket and r["eval/creativity"]:
        by[int(r["n_layer"])][r["sweep"]][r["seed"]].append(
            (float(r["flops"]), float(r["eval/creativity"])))
# Each depth's runs from the first sweep that has it, as an arm borrows.
runs = {l: [sorted(p) for p in next(v[s] for s in sweeps if s in v).values()]
        for l, v in by.items()}
if len(runs) < 3:
    sys.exit(f"{','.join(sweeps)}: {len(runs)} depths in results/fair-cpu/results.csv; need 3")
common = min(p[-1][0] for v in runs.values() for p in v)


def at(points):
    """C at the common compute, or C at the first evaluation when that lies beyond it."""
    if points[0][0] >= common:
        return points[0][1]
    (f0, c0), (f1, c1) = next(pair for pair in zip(points, points[1:]) if pair[1][0] >= common)
    return c0 + (math.log(common / f0) / math.log(f1 / f0)) * (c1 - c0)


c = {l: [at(p) for p in v] for l, v in sorted(runs.items())}
print(f"{bucket}, {','.join(sweeps)}: common compute {common:.3g} FLOPs")
for l, v in c.items():
    bounded = any(p[0][0] > common for p in runs[l])
    tag = "  (upper bound: C at the first evaluation)" if bounded else ""
    print(f"L = {l}: C {st.mean(v):.2f}  ({', '.join(f'{x:.2f}' for x in v)}){tag}")
rng, depths, wins = random.Random(0), sorted(c), collections.Counter()
for _ in range(10_000):
    means = {l: st.mean(rng.choices(v, k=len(v))) for l, v in c.items()}
    wins[max(depths, key=means.get)] += 1
print("P(best): " + ", ".join(f"L = {l} {wins[l] / 10_000:.3f}" for l in depths))
print(f"P(interior best) = {sum(wins[l] for l in depths[1:-1]) / 10_000:.3f}")
