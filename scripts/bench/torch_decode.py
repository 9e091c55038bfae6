#!/usr/bin/env python3
"""PyTorch reference for `lab eval`'s greedy decoding speed: the run's own weights loaded by
transformers (SDPA attention), the eval set's prompts in the lab's order and batches (256 rows,
left-padded, each row's positions counted from its first real token), greedy over the real
vocabulary with the KV cache, at most 2*h_max_train + 2 new tokens, and rows that emit <eos>
dropped from the batch and the cache as the lab does. Prints seconds and generated tokens/s
(each answer's tokens plus its <eos>, as `lab eval` counts them).

usage: torch_decode.py RUN_DIR [--threads 2] [--batch-rows 256] [--h-max-train 10]
"""
import argparse
import json
import time

import torch
from tokenizers import Tokenizer
from transformers import GPT2LMHeadModel

ap = argparse.ArgumentParser()
ap.add_argument("run_dir")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--batch-rows", type=int, default=256)
ap.add_argument("--h-max-train", type=int, default=10)
a = ap.parse_args()
torch.set_num_threads(a.threads)

data_dir = json.load(open(f"{a.run_dir}/run.json"))["data_dir"]
tok = Tokenizer.from_file(f"{data_dir}/tokenizer.json")
n_tokens = tok.get_vocab_size()
PAD, EOS = 0, 1
prompts = []
for line in open(f"{data_dir}/eval.jsonl"):
    q = json.loads(line)
    text = f"{q['u']} {q['v']} [ {' '.join(q['include'])} ] [ {' '.join(q['exclude'])} ] :"
    prompts.append(tok.encode(" ".join(text.split())).ids)
budget = 2 * a.h_max_train + 2
model = GPT2LMHeadModel.from_pretrained(a.run_dir, attn_implementation="sdpa").eval()


def decode(batch):
    n = len(batch)
    width = max(map(len, batch))
    ids = torch.full((n, width), PAD, dtype=torch.long)
    pos = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for r, p in enumerate(batch):
        ids[r, width - len(p):] = torch.tensor(p)
        pos[r, width - len(p):] = torch.arange(len(p))
        mask[r, width - len(p):] = 1
    out = model(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=True)
    cache, logits = out.past_key_values, out.logits[:, -1, :n_tokens]
    lens = torch.tensor([len(p) for p in batch])
    active = torch.arange(n)
    generated = 0
    for step in range(budget):
        nxt = logits.argmax(-1)
        generated += len(active)
        keep = nxt != EOS
        if step + 1 == budget or not keep.any():
            break
        if not keep.all():
            idx = keep.nonzero().squeeze(1)
            cache.batch_select_indices(idx)
            active, nxt, mask, lens = active[idx], nxt[idx], mask[idx], lens[idx]
        mask = torch.cat([mask, torch.ones((len(active), 1), dtype=torch.long)], 1)
        out = model(input_ids=nxt[:, None], position_ids=(lens + step)[:, None],
                    attention_mask=mask, past_key_values=cache, use_cache=True)
        cache, logits = out.past_key_values, out.logits[:, -1, :n_tokens]
    return generated


with torch.inference_mode():
    decode(prompts[:8])  # warm-up
    t0 = time.perf_counter()
    total = sum(decode(prompts[i:i + a.batch_rows]) for i in range(0, len(prompts),
                                                                     a.batch_rows))
    dt = time.perf_counter() - t0
print(f"torch decode: {len(prompts)} queries in {dt:.2f} s: {total / dt:.0f} generated tokens/s "
      f"({total} tokens, threads {a.threads})")
