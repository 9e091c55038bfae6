#!/usr/bin/env python3
"""Prove a `lab train` run directory is a Hugging Face model: load it with
`GPT2LMHeadModel.from_pretrained(RUN_DIR)` and its `tokenizer.json` with transformers, run
every eval query with its reference path through it, and compare the masked validation loss
(averaged over tokens, SPEC §5) with the last `val/loss` in `metrics.jsonl`. Also decodes a
few eval queries greedily with `generate`.

usage: check_hf.py RUN_DIR [--tol 1e-4] [--show 5]
needs: torch, transformers (not installed by CI)
exit: 0 when the losses agree within --tol (relative), 1 otherwise
"""
import argparse
import json
import math
import sys
from pathlib import Path

import torch
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

ap = argparse.ArgumentParser()
ap.add_argument("run_dir", type=Path)
ap.add_argument("--tol", type=float, default=1e-4)
ap.add_argument("--show", type=int, default=5)
a = ap.parse_args()

model = GPT2LMHeadModel.from_pretrained(a.run_dir).eval()
tok = PreTrainedTokenizerFast(tokenizer_file=str(a.run_dir / "tokenizer.json"),
                              pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
run = json.loads((a.run_dir / "run.json").read_text())
data = Path(run["data_dir"])
queries = [json.loads(l) for l in (data / "eval.jsonl").read_text().splitlines()]


def prompt(q):
    return f"{q['u']} {q['v']} [ {' '.join(q['include'])} ] [ {' '.join(q['exclude'])} ] :".replace("  ", " ")


total, count = 0.0, 0
with torch.no_grad():
    for i in range(0, len(queries), 64):
        chunk = queries[i:i + 64]
        for q in chunk:
            p_ids = tok(prompt(q), add_special_tokens=False)["input_ids"]
            path = tok(" ".join(q["path"]) + " <eos>", add_special_tokens=False)["input_ids"]
            ids = torch.tensor([p_ids + path])
            logits = model(ids[:, :-1]).logits[0]
            targets = ids[0, 1:]
            lp = torch.log_softmax(logits.double(), dim=-1)
            start = len(p_ids) - 1
            nll = -lp[torch.arange(start, len(targets)), targets[start:]]
            total += nll.sum().item()
            count += len(nll)
hf = total / count

lines = [json.loads(l) for l in (a.run_dir / "metrics.jsonl").read_text().splitlines()]
vals = [l for l in lines if "val/loss" in l]
if not vals:
    sys.exit(f"{a.run_dir}/metrics.jsonl has no val/loss yet (train at least one epoch)")
lab = vals[-1]["val/loss"]
rel = abs(hf - lab) / max(abs(lab), 1e-12)
print(f"{a.run_dir}: transformers loaded {sum(p.numel() for p in model.parameters())} parameters "
      f"(vocab {model.config.vocab_size}, L={model.config.n_layer}, E={model.config.n_embd})")
print(f"val/loss over {len(queries)} eval queries ({count} tokens): transformers {hf:.6f}, "
      f"lab {lab:.6f} (epoch {vals[-1]['epoch']}), relative difference {rel:.2e}")
with torch.no_grad():
    for q in queries[:: max(1, len(queries) // max(a.show, 1))][:a.show]:
        p_ids = tok(prompt(q), add_special_tokens=False, return_tensors="pt")["input_ids"]
        out = model.generate(p_ids, max_new_tokens=2 * 10 + 2, do_sample=False,
                             eos_token_id=1, pad_token_id=0)
        text = tok.decode(out[0, p_ids.shape[1]:], skip_special_tokens=False)
        print(f"  {prompt(q)}  ->  {text.split('<eos>')[0].strip()}   (reference {' '.join(q['path'])})")
ok = rel <= a.tol
print("agree" if ok else f"DISAGREE (tolerance {a.tol})")
sys.exit(0 if ok else 1)
