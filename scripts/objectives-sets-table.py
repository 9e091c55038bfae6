# Why the set scores differ: per (depth, setting) of the objectives study, from each run's
# last-evaluation sets (eval/epoch-16.samples.summary.json), the mean over seeds of the K = 16
# answers' valid rate, distinct valid paths per query, repeats per query (answers whose text an
# earlier answer of the query already gave) and set score; the plain runs' chosen temperatures.
# Descriptive, no test.  Run: python3 scripts/objectives-sets-table.py [bucket: 100k (default) | 1m]
import collections, glob, json, os, re, statistics as st, sys
bucket = sys.argv[1] if len(sys.argv) > 1 else '100k'
cells = collections.defaultdict(list)
for d in sorted(glob.glob(f'results/objectives-cpu/runs/objectives-{bucket}-*')):
    m = re.search(rf'objectives-{bucket}(-hash(?:-once)?)?-L(\d+)-E\d+-H\d+-(?:objective(\w+?)-)?seed', d)
    if not os.path.exists(f'{d}/eval/epoch-16.samples.summary.json'):
        continue  # a run still training
    s = json.load(open(f'{d}/eval/epoch-16.samples.summary.json'))
    metrics = [json.loads(l) for l in open(f'{d}/metrics.jsonl')]
    temp = next((r['eval/set/temperature'] for r in reversed(metrics)
                 if 'eval/set/temperature' in r), None)
    setting = (m[3] or 'ntp') + {None: '', '-hash': ' + hash', '-hash-once': ' + hash once'}[m[1]]
    cells[(int(m[2]), setting)].append((s['valid_rate'], s['set']['distinct_valid'],
                                        s['set']['repeats'], s['set']['score'], temp))
print('| L | setting | runs | valid rate | distinct valid / query | repeats / query | s(S) | temperatures |')
print('| --- | --- | --- | --- | --- | --- | --- | --- |')
for (l, setting), v in sorted(cells.items()):
    mean = lambda i: st.mean(r[i] for r in v)
    temps = ', '.join(str(r[4]) for r in v) if v[0][4] is not None else 'greedy'
    print(f'| {l} | {setting} | {len(v)} | {mean(0):.3f} | {mean(1):.2f} | {mean(2):.2f} | '
          f'{mean(3):.2f} | {temps} |')
