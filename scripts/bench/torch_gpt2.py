#!/usr/bin/env python3
"""PyTorch reference for `lab train` throughput: the same GPT-2 (HF GPT2LMHeadModel, SDPA
attention), the same batches read from the lab's token cache (same order, same dynamic
padding, same masked loss), and AdamW (fused) with clipping. Prints non-padding tokens/s.
The strongest variant computes the LM head only at the loss positions (as the lab does) and
compiles the forward with `torch.compile(dynamic=True)` (batches vary in length).

On a GPU (--device cuda): bf16 autocast (--bf16), and `torch.compile` in a mode of choice
(--compile-mode reduce-overhead: CUDA graphs); the step is timed between synchronisations and
the CUDA kernels a step launches are counted with torch.profiler (--count-launches).

usage: torch_gpt2.py DATA_DIR --layers L --embd E --heads H [--batch 64] [--steps 30]
       [--threads 2] [--warmup 3] [--head-at-loss] [--compile] [--compile-mode MODE]
       [--device cpu|cuda] [--bf16] [--count-launches]
"""
import argparse
import math
import struct
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

ap = argparse.ArgumentParser()
ap.add_argument("data_dir")
ap.add_argument("--layers", type=int, required=True)
ap.add_argument("--embd", type=int, required=True)
ap.add_argument("--heads", type=int, required=True)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--positions", type=int, default=64)
ap.add_argument("--head-at-loss", action="store_true",
                help="compute the LM head only at loss positions (the lab's trick)")
ap.add_argument("--compile", action="store_true",
                help="torch.compile the forward and loss (implies --head-at-loss)")
ap.add_argument("--compile-mode", default=None,
                help="torch.compile's mode (default, reduce-overhead, max-autotune); implies --compile")
ap.add_argument("--device", default="cpu")
ap.add_argument("--bf16", action="store_true", help="bf16 autocast (the parameters stay fp32)")
ap.add_argument("--count-launches", action="store_true",
                help="count the CUDA kernels of one step with torch.profiler")
a = ap.parse_args()
if a.compile_mode:
    a.compile = True
dev = torch.device(a.device)
cuda = dev.type == "cuda"
torch.set_num_threads(a.threads)
torch.manual_seed(0)

# The lab's token cache: magic, n, n_tokens, offsets (n+1 u64), prompt_len (n u32), tokens.
raw = open(f"{a.data_dir}/cache/train.tok", "rb").read()
assert raw[:8] == b"LABTOK01", "run `lab train` once first so that the token cache exists"
n, nt = struct.unpack_from("<QQ", raw, 8)
offsets = struct.unpack_from(f"<{n + 1}Q", raw, 24)
p0 = 24 + 8 * (n + 1)
prompt = struct.unpack_from(f"<{n}I", raw, p0)
tokens = torch.frombuffer(bytearray(raw[p0 + 4 * n:]), dtype=torch.int32).long()
vocab = int(tokens.max()) + 1
vocab = (vocab + 63) // 64 * 64


def batch(idx):
    seqs = [tokens[offsets[i]:offsets[i + 1]] for i in idx]
    t = max(len(s) - 1 for s in seqs)
    ids = torch.zeros(len(idx), t, dtype=torch.long)
    labels = torch.full((len(idx), t), -100, dtype=torch.long)
    for r, (i, s) in enumerate(zip(idx, seqs)):
        ids[r, :len(s) - 1] = s[:-1]
        p = prompt[i]
        labels[r, p - 1:len(s) - 1] = s[p:]
    return ids, labels, sum(len(s) - 1 for s in seqs)


cfg = GPT2Config(vocab_size=vocab, n_positions=a.positions, n_embd=a.embd, n_layer=a.layers,
                 n_head=a.heads, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                 attn_pdrop=0.0, bos_token_id=1, eos_token_id=1, attn_implementation="sdpa")
model = GPT2LMHeadModel(cfg).to(dev)
decay = [p for p in model.parameters() if p.dim() >= 2]
other = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                         {"params": other, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.95),
                        eps=1e-8, fused=True)
autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.bf16)


def loss_at(ids, rows, targets):
    """Cross-entropy of the LM head at the loss rows of the flattened batch only."""
    h = model.transformer(ids).last_hidden_state.reshape(-1, a.embd)
    return torch.nn.functional.cross_entropy(model.lm_head(h.index_select(0, rows)), targets)


if a.compile:
    a.head_at_loss = True
    a.warmup = max(a.warmup, 5)  # the first shapes compile
    mode = None if a.compile_mode in (None, "default") else a.compile_mode
    loss_at = torch.compile(loss_at, dynamic=True, mode=mode)
order = torch.randperm(n, generator=torch.Generator().manual_seed(0)).tolist()
sync = torch.cuda.synchronize if cuda else (lambda: None)


def step(i):
    ids, labels, ntok = batch(order[i * a.batch:(i + 1) * a.batch])
    ids, labels = ids.to(dev, non_blocking=True), labels.to(dev, non_blocking=True)
    with autocast:
        if a.head_at_loss:
            flat = labels.reshape(-1)
            rows = (flat != -100).nonzero().squeeze(1)
            loss = loss_at(ids, rows, flat.index_select(0, rows))
        else:
            logits = model(ids).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab).float(),
                                                     labels.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss, ntok


done_tokens, t_start = 0, None
for i in range(a.steps):
    if i == a.warmup:
        sync()
        t_start, done_tokens = time.perf_counter(), 0
    loss, ntok = step(i)
    done_tokens += ntok
sync()
dt = time.perf_counter() - t_start
launches = ""
if a.count_launches and cuda:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(a.steps)
        sync()
    k = sum(e.count for e in prof.key_averages() if e.device_type.name == "CUDA")
    launches = f", {k} CUDA kernels a step"
kind = f"compile({a.compile_mode or 'default'})" if a.compile else "eager"
steps = a.steps - a.warmup
print(f"torch {kind} L={a.layers} E={a.embd} H={a.heads} batch {a.batch}: "
      f"{done_tokens / dt:.0f} tokens/s over {steps} steps, {1000 * dt / steps:.2f} ms a step "
      f"(device {a.device}{', bf16 autocast' if a.bf16 else ''}, threads {a.threads}, "
      f"head {'at loss positions' if a.head_at_loss else 'full'}, final loss {loss.item():.3f}"
      f"{launches})")
