# C at the last evaluation (epoch 16) per (depth, heads) of the heads arm: the heads sweep's
# runs plus the fair baseline's H = 4 runs, mean and 95% t-interval over seeds 1-3.
import csv, collections, statistics as st, sys
from tstats import mean_ci
rows = [r for r in csv.DictReader(open('results/fair-cpu/results.csv'))
        if r['sweep'] in ('fair-cpu-heads-100k', 'fair-cpu-seeds-100k') and r['epoch'] == '16']
c = collections.defaultdict(list)
for r in rows:
    c[(int(r['n_layer']), int(r['n_embd']), int(r['n_head']))].append(float(r['eval/creativity']))
for (l, e, h), v in sorted(c.items()):
    m, half = mean_ci(v)
    print(f"L{l} E{e} H{h} hd{e // h}: C {m:.2f} [{m - half:.2f}, {m + half:.2f}] n={len(v)}")

# Best head per depth: a bootstrap over seeds (10,000 resamples within each (depth, heads)),
# the best depth by each depth's best head mean. The best head is picked on the same runs, so
# this favours depths with more head counts (L = 1 and 2 have 4, the rest 3): descriptive.
import random
random.seed(22)
depths = sorted({l for l, _, _ in c})
best = collections.Counter()
for _ in range(10_000):
    score = {}
    for l in depths:
        score[l] = max(st.mean(random.choices(v, k=len(v))) for (ll, _, _), v in c.items() if ll == l)
    best[max(score, key=score.get)] += 1
print("P(best depth), best head per depth:", {l: best[l] / 10_000 for l in depths})
