# A second test of an interior optimum depth, beside findings.json's bootstrap (which, with 3
# seeds per depth, says P = 1.000 whenever the best depth's worst seed beats every other
# depth's best mean). C at the last evaluation (16 epochs) of each fair-baseline run of a
# bucket; the best interior depth against the better of the two ends (L = 1 and L = 16), as a
# difference of means with a Welch 95% t-interval (df rounded down: conservative). SWEEPS is a
# comma-separated list: each depth's runs come from the first sweep that has it, as an arm
# borrows (the second reading at 1M: fair-cpu-tunec-1m,fair-cpu-seeds-1m).
#   python3 scripts/fair-depth-contrast.py [1M|100k] [SWEEPS]
import csv, collections, statistics as st, sys
from tstats import T, mean_ci

bucket = sys.argv[1] if len(sys.argv) > 1 else "1M"
sweeps = (sys.argv[2] if len(sys.argv) > 2 else "fair-cpu-seeds-" + bucket.lower()).split(",")
rows = [r for r in csv.DictReader(open("results/fair-cpu/results.csv"))
        if r["sweep"] in sweeps and r["bucket"] == bucket and r["epoch"] == "16"]
by = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows:
    by[int(r["n_layer"])][r["sweep"]].append(float(r["eval/creativity"]))
c = {l: next(v[s] for s in sweeps if s in v) for l, v in by.items()}
if len(c) < 3:
    sys.exit(f"{','.join(sweeps)}: {len(c)} depths at epoch 16 in results/fair-cpu/results.csv; need 3")
for l, v in sorted(c.items()):
    m, half = mean_ci(v)
    print(f"L = {l}: C {m:.2f} [{m - half:.2f}, {m + half:.2f}] n = {len(v)}  ({', '.join(f'{x:.2f}' for x in v)})")
depths = sorted(c)
inner = max(depths[1:-1], key=lambda l: st.mean(c[l]))
end = max((depths[0], depths[-1]), key=lambda l: st.mean(c[l]))
a, b = c[inner], c[end]
va, vb = st.variance(a) / len(a), st.variance(b) / len(b)
df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
d, half = st.mean(a) - st.mean(b), T[max(1, min(8, int(df)))] * (va + vb) ** 0.5
print(f"best interior L = {inner} minus best end L = {end}: {d:+.2f} [{d - half:+.2f}, {d + half:+.2f}] (Welch, df {df:.1f})")
