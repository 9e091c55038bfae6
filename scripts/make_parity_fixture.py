#!/usr/bin/env python3
"""Write tests/fixtures/parity.safetensors: a tiny GPT-2 in PyTorch/transformers with fixed
weights and batch, and everything the Rust parity test (tests/it/parity.rs) checks, in the
manner of llm.c's train_gpt2.py::write_state:

  param.<name>      the weights (HF names, Conv1D (in, out) layout)
  ids, lengths      (B, T) input ids, right-padded with <pad> = 0, and each row's length
  rows, targets     the loss positions (flat indices into B*T) and their target ids
  logits            (B, T, V) logits
  loss              the masked mean cross-entropy
  grad.<name>       the gradient of that loss for every parameter
  adamw_losses      the loss before each of 5 AdamW steps on this batch, with the lab's
                    schedule (linear warmup, cosine to lr*min_lr_frac), decay on rank >= 2
                    tensors only, and clipping at grad_clip
  teacherless.*     the same loss and gradients for a teacherless batch (inputs of path
                    positions replaced by <dummy>, labels unchanged)

Run: python3 scripts/make_parity_fixture.py  (needs torch, transformers, safetensors)
"""
import math
import sys

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/parity.safetensors"
HP = dict(vocab_size=128, n_positions=16, n_embd=32, n_layer=2, n_head=4)
OPT = dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0,
           warmup_frac=0.2, min_lr_frac=0.1, total_steps=10, steps=5)
DUMMY = 7  # any id will do for the fixture; the lab uses its <dummy> token

torch.manual_seed(1234)
torch.use_deterministic_algorithms(True)
cfg = GPT2Config(**HP, bos_token_id=1, eos_token_id=1, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                 attn_pdrop=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True)
model = GPT2LMHeadModel(cfg).eval()  # eval: dropout off (it is 0 anyway)
# Make biases and norms non-trivial so that their gradients are tested too.
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith(".bias") or ".ln_" in name or "ln_f" in name:
            p.add_(0.1 * torch.randn_like(p))

B, T = 3, 12
lengths = [12, 9, 7]      # real tokens per row, the rest is <pad> = 0
prompt = [5, 4, 3]        # loss starts after this many tokens (the prompt)
ids = torch.randint(8, HP["vocab_size"], (B, T))
for b in range(B):
    ids[b, lengths[b]:] = 0
rows, targets = [], []
for b in range(B):
    for t in range(prompt[b] - 1, lengths[b] - 1):
        rows.append(b * T + t)
        targets.append(int(ids[b, t + 1]))
rows_t = torch.tensor(rows)
targets_t = torch.tensor(targets)

named = dict(model.named_parameters())
names = [n for n in named if n != "lm_head.weight"]


def masked_loss(inp):
    logits = model(inp).logits
    flat = logits.reshape(B * T, -1)[rows_t]
    return logits, torch.nn.functional.cross_entropy(flat, targets_t)


out = {f"param.{n}": named[n].detach().clone().contiguous() for n in names}
model.zero_grad()
logits, loss = masked_loss(ids)
loss.backward()
out["ids"] = ids.to(torch.int64)
out["lengths"] = torch.tensor(lengths, dtype=torch.int64)
out["rows"] = rows_t.to(torch.int64)
out["targets"] = targets_t.to(torch.int64)
out["logits"] = logits.detach().contiguous()
out["loss"] = loss.detach().reshape(1)
for n in names:
    out[f"grad.{n}"] = named[n].grad.detach().clone().contiguous()

# Teacherless: inputs at the path positions (after the prompt) become <dummy>.
tl_ids = ids.clone()
for b in range(B):
    tl_ids[b, prompt[b]:lengths[b]] = DUMMY
model.zero_grad()
_, tl_loss = masked_loss(tl_ids)
tl_loss.backward()
out["teacherless.ids"] = tl_ids.to(torch.int64)
out["teacherless.loss"] = tl_loss.detach().reshape(1)
for n in names:
    out[f"teacherless.grad.{n}"] = named[n].grad.detach().clone().contiguous()

# Five AdamW steps with the lab's schedule and clipping.
decay = [named[n] for n in names if named[n].dim() >= 2]
no_decay = [named[n] for n in names if named[n].dim() < 2]
opt = torch.optim.AdamW([
    {"params": decay, "weight_decay": OPT["weight_decay"]},
    {"params": no_decay, "weight_decay": 0.0},
], lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"])
S = OPT["total_steps"]
W = round(OPT["warmup_frac"] * S)


def lr_at(step):
    peak, low = OPT["lr"], OPT["lr"] * OPT["min_lr_frac"]
    if step < W:
        return peak * (step + 1) / W
    progress = (step - W) / max(1, S - W)
    return low + 0.5 * (peak - low) * (1 + math.cos(math.pi * progress))


losses = []
for step in range(OPT["steps"]):
    for g in opt.param_groups:
        g["lr"] = lr_at(step)
    opt.zero_grad()
    _, l = masked_loss(ids)
    l.backward()
    torch.nn.utils.clip_grad_norm_([named[n] for n in names], OPT["grad_clip"])
    opt.step()
    losses.append(l.item())
out["adamw_losses"] = torch.tensor(losses, dtype=torch.float64)

meta = {k: str(v) for k, v in {**HP, **OPT, "dummy": DUMMY}.items()}
save_file(out, OUT, metadata=meta)
print(f"wrote {OUT}: loss {loss.item():.6f}, teacherless {tl_loss.item():.6f}, adamw {losses}")
