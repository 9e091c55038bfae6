#!/usr/bin/env python3
"""Write tests/fixtures/attention.safetensors: the causal self-attention of packed sequences,
computed by PyTorch, for the head sizes the studies use, so that tests/it/parity.rs holds the
lab's fused kernel (forward and backward) to it at every head size and sequence length.

Each case <c> has:
  <c>.qkv     (N, 3E) q|k|v rows as HF GPT-2's c_attn lays them out, sequences back to back
  <c>.lens    the sequence lengths (summing to N)
  <c>.dy      (N, E) an upstream gradient
  <c>.y       (N, E) the attention output, heads concatenated
  <c>.dqkv    (N, 3E) d(y·dy)/d(qkv)
and the metadata "<c>.n_head". The lengths run from 1 to 64, the longest sequence a config
allows (model.n_positions); the repro-cpu data's longest is 37 tokens.

Run: python3 scripts/make_attention_fixture.py  (needs torch, safetensors)
"""
import sys

import torch
from safetensors.torch import save_file

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/attention.safetensors"
# (head size, heads): head sizes 1, 3, 6 and 8 at 4 heads, and the widest single head.
CASES = [(1, 4), (3, 4), (6, 4), (8, 4), (3, 8), (88, 1)]
LENS = [1, 2, 7, 8, 9, 16, 37, 64]

torch.manual_seed(2026)
out, meta = {}, {}
for hd, h in CASES:
    e = hd * h
    n = sum(LENS)
    qkv = (torch.randn(n, 3 * e, dtype=torch.float64) * 1.5).requires_grad_()
    dy = torch.randn(n, e, dtype=torch.float64)
    ys, start = [], 0
    for t in LENS:
        x = qkv[start:start + t].reshape(t, 3, h, hd).permute(1, 2, 0, 3)  # (3, H, T, hd)
        q, k, v = x[0], x[1], x[2]
        att = (q @ k.transpose(-1, -2)) / hd ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        ys.append((att @ v).permute(1, 0, 2).reshape(t, e))
        start += t
    y = torch.cat(ys)
    (y * dy).sum().backward()
    c = f"hd{hd}h{h}"
    out[f"{c}.qkv"] = qkv.detach().float().contiguous()
    out[f"{c}.lens"] = torch.tensor(LENS, dtype=torch.int64)
    out[f"{c}.dy"] = dy.float().contiguous()
    out[f"{c}.y"] = y.detach().float().contiguous()
    out[f"{c}.dqkv"] = qkv.grad.float().contiguous()
    meta[f"{c}.n_head"] = str(h)
save_file(out, OUT, metadata=meta)
print(f"wrote {OUT}: {len(CASES)} cases, lengths {LENS}")
