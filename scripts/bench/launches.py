"""Launches a step, a layer and outside the layers, from scripts/bench/launches.c's counts.

    launches.py L1 SHORT1 LONG1 L2 SHORT2 LONG2 STEPS [--kernels N]
    launches.py --step SHORT LONG STEPS

Two depths L1 < L2 of one model, each run twice: SHORT and LONG are the count files of runs
STEPS apart (2 and 4 steps: the setup, the checkpoint at the end and anything else done once
cancels). A step's figure is (long - short) / STEPS; a layer's is the difference of the two
depths' steps over L2 - L1; what the step does outside the layers (embedding, head, loss and
optimizer) is the step at L1 less L1 layers. Prints one line (the gpu-check row), then with
--kernels N the N kernels launched most in a step at L1. With --step, one run's count files
only: the calls (kernels and cuBLAS products) a step (scripts/bench/gpu.sh's column).
"""

import sys


def read(path):
    counts, kernels = {}, {}
    with open(path) as f:
        for line in f:
            parts = line.split(maxsplit=2)
            if parts[0] == "kernel":
                name = parts[2].strip() if len(parts) > 2 else "?"
                kernels[name] = kernels.get(name, 0) + int(parts[1])
            else:
                counts[parts[0]] = int(parts[1])
    return counts, kernels


def per_step(short, long, steps):
    (a, ka), (b, kb) = read(short), read(long)
    counts = {k: (b.get(k, 0) - a.get(k, 0)) / steps for k in b}
    kernels = {k: (kb.get(k, 0) - ka.get(k, 0)) / steps for k in kb}
    return counts, kernels


def calls(c):
    return c.get("launches", 0) + c.get("gemms", 0)


def main(argv):
    if argv[:1] == ["--step"]:
        if len(argv) != 4:
            sys.exit(__doc__)
        c, _ = per_step(argv[1], argv[2], int(argv[3]))
        print(f"{calls(c):.0f}")
        return
    top = 0
    if "--kernels" in argv:
        i = argv.index("--kernels")
        top = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    if len(argv) != 7:
        sys.exit(__doc__)
    l1, s1, g1, l2, s2, g2, steps = argv
    l1, l2, steps = int(l1), int(l2), int(steps)
    if l2 <= l1 or steps <= 0:
        sys.exit("launches.py: the second depth must be the larger, and STEPS above 0")
    c1, k1 = per_step(s1, g1, steps)
    c2, _ = per_step(s2, g2, steps)
    layer = {k: (c2.get(k, 0) - c1.get(k, 0)) / (l2 - l1) for k in c1}
    fixed = {k: c1[k] - l1 * layer[k] for k in c1}

    print(
        f"{calls(c1):.0f} a step at L = {l1} ({c1.get('launches', 0):.0f} kernels, "
        f"{c1.get('gemms', 0):.0f} cuBLAS products); a layer {calls(layer):.1f} "
        f"({layer.get('launches', 0):.1f} + {layer.get('gemms', 0):.1f}); outside the layers "
        f"{calls(fixed):.1f}; a step also {c1.get('memsets', 0):.0f} memsets, "
        f"{c1.get('copies_htod', 0):.0f}/{c1.get('copies_dtoh', 0):.0f}/"
        f"{c1.get('copies_dtod', 0):.0f} copies (htod/dtoh/dtod), "
        f"{c1.get('allocs', 0):.0f} allocations, {c1.get('syncs', 0):.0f} host waits"
    )
    if top:
        print("| kernel | launches a step |")
        print("| --- | --- |")
        for name, n in sorted(k1.items(), key=lambda kv: (-kv[1], kv[0]))[:top]:
            if n > 0:
                print(f"| `{name}` | {n:g} |")


if __name__ == "__main__":
    main(sys.argv[1:])
