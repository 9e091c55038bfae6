"""PyTorch's side of the LM head's denormal weight gradient (benches/kernels.rs, last rows).

dyᵀ·x with dy of 1,194 rows (the kernel bench's 64 sequences) over a 2,112-token vocabulary,
x of width 576 (the 1M L×E arm's L = 1), one thread, best of 5 rounds of 2 calls: with dy
normal and denormal, PyTorch's default (denormals kept) and torch.set_flush_denormal(True).
Run: target/bench-py/bin/python scripts/bench/denormals.py (the venv of scripts/bench/train.sh).
"""

import time

import torch

torch.set_num_threads(1)
torch.manual_seed(0)
ROWS, VOCAB, WIDTH = 1194, 2112, 576


def best_us(f, calls=2, rounds=5):
    f()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e6


x = torch.randn(ROWS, WIDTH)
print(f"torch {torch.__version__}, 1 thread; µs per call, best of 5 x 2")
print("| PyTorch dyᵀ·x | flush_denormal | µs |")
print("| --- | --- | --- |")
for flush in (False, True):
    torch.set_flush_denormal(flush)
    for what, scale in (("normal", 1e-3), ("denormal", 1e-40)):
        dy = torch.rand(ROWS, VOCAB) * scale
        print(f"| dy {what} | {flush} | {best_us(lambda: dy.t() @ x):.0f} |")
