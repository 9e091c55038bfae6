"""The backward check of scripts/gpu-check.sh: two runs trained the same N steps from the same
init, one on the device and one on the CPU, must have moved every parameter alike.

For each tensor, the update of each side is w_N - w_0 (w_0 from a --max-steps 0 run), and the
check is the relative L2 distance ||u_dev - u_cpu|| / ||u_cpu||. AdamW is blind to a scale error
in one tensor's gradient (it divides by the gradient's own size), so the losses and gradient
norms at every step (compared by the script) catch scale, and this catches direction. The
script prints the worst tensor and a checksum (sum and sum of squares of every parameter) of
each side, and exits 1 when the worst tensor is past the tolerance.

    python3 scripts/compare_updates.py INIT DEVICE CPU TOL      (model.safetensors paths)

Standard library only: the device machine may have no numpy.
"""

import array
import json
import math
import struct
import sys


def tensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F32":
            sys.exit(f"{path}: {name}: dtype {meta['dtype']}, expected F32")
        a, b = meta["data_offsets"]
        v = array.array("f")
        v.frombytes(blob[8 + n + a : 8 + n + b])
        out[name] = v
    return out


def main():
    init, dev, cpu, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    w0, wd, wc = tensors(init), tensors(dev), tensors(cpu)
    if not (w0.keys() == wd.keys() == wc.keys()):
        sys.exit("the checkpoints hold different tensors")
    worst, worst_name = 0.0, ""
    sums = {"dev": [0.0, 0.0], "cpu": [0.0, 0.0]}
    for name in sorted(w0):
        diff = ref = 0.0
        for x0, xd, xc in zip(w0[name], wd[name], wc[name]):
            ud, uc = xd - x0, xc - x0
            diff += (ud - uc) ** 2
            ref += uc * uc
            sums["dev"][0] += xd
            sums["dev"][1] += xd * xd
            sums["cpu"][0] += xc
            sums["cpu"][1] += xc * xc
        if ref == 0.0:
            rel = 0.0 if diff == 0.0 else math.inf
        else:
            rel = math.sqrt(diff / ref)
        if not rel <= worst:
            worst, worst_name = rel, name
    d, c = sums["dev"], sums["cpu"]
    print(
        f"worst update {worst:.2e} ({worst_name}), tolerance {tol:g}; "
        f"checksum device {d[0]:.6e}/{d[1]:.6e}, cpu {c[0]:.6e}/{c[1]:.6e}"
    )
    sys.exit(0 if worst <= tol else 1)


main()
