#!/usr/bin/env python3
"""An independent implementation of the CS336 LM in PyTorch (float64, CPU), to check `stg step`.

  python3 tools/ref/torch_step.py --params P.safetensors --batch B.npy --dump STG_OUT.safetensors \
      --dims vocab=256,d_model=64,d_ff=176,n_layers=2,n_heads=4 [--make-batch B.npy --batch-shape 8,64]

Reads the parameters by their stg names, runs one forward and backward on the batch (int32 [2, B, S]:
tokens, targets) and compares the loss, the logits and every gradient with what `stg step` wrote.
Prints the worst relative error (max |a - b| / max |ref| per tensor) and exits 1 above --tol.
"""
import argparse, math, os, sys
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcommon import read_safetensors  # noqa: E402


def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w

def rope(x, theta=10000.0):
    # x (B, S, H, Dh): rotate adjacent pairs (x[2k], x[2k+1]) by position * theta^(-2k/Dh)
    B, S, H, Dh = x.shape
    k = torch.arange(Dh // 2, dtype=torch.float64)
    ang = torch.arange(S, dtype=torch.float64)[:, None] * theta ** (-2.0 * k / Dh)  # (S, Dh/2)
    c, s = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).reshape(B, S, H, Dh)

def forward(P, tokens, targets, d):
    B, S = tokens.shape
    H, D = d["n_heads"], d["d_model"]
    Dh = D // H
    x = P["tok_emb"][tokens]
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    for i in range(d["n_layers"]):
        p = lambda n: P[f"blocks.{i}.{n}"]
        h = rmsnorm(x, p("ln1"))
        q = rope((h @ p("wq").T).reshape(B, S, H, Dh)).transpose(1, 2)
        k = rope((h @ p("wk").T).reshape(B, S, H, Dh)).transpose(1, 2)
        v = (h @ p("wv").T).reshape(B, S, H, Dh).transpose(1, 2)
        sc = (q @ k.transpose(-1, -2)) / math.sqrt(Dh)
        o = torch.softmax(sc.masked_fill(mask, float("-inf")), -1) @ v
        x = x + o.transpose(1, 2).reshape(B, S, D) @ p("wo").T
        h2 = rmsnorm(x, p("ln2"))
        a, b = h2 @ p("w1").T, h2 @ p("w3").T
        x = x + (a * torch.sigmoid(a) * b) @ p("w2").T
    logits = rmsnorm(x, P["ln_f"]) @ P["lm_head"].T
    loss = torch.nn.functional.cross_entropy(logits.reshape(B * S, -1), targets.reshape(-1))
    return loss, logits

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", required=True)
    ap.add_argument("--batch", required=True)
    ap.add_argument("--dump")
    ap.add_argument("--dims", required=True)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--make-batch", action="store_true", help="write a random batch to --batch and exit")
    ap.add_argument("--batch-shape", default="8,64")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    d = {k: int(v) for k, v in (kv.split("=") for kv in a.dims.split(","))}
    if a.make_batch:
        B, S = (int(t) for t in a.batch_shape.split(","))
        rng = np.random.default_rng(a.seed)
        np.save(a.batch, rng.integers(0, d["vocab"], size=(2, B, S), dtype=np.int32))
        return 0
    raw = read_safetensors(a.params)
    P = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in raw.items() if ".adam_" not in n}
    bt = np.load(a.batch)
    tokens, targets = torch.tensor(bt[0], dtype=torch.long), torch.tensor(bt[1], dtype=torch.long)
    loss, logits = forward(P, tokens, targets, d)
    loss.backward()
    print(f"reference loss {loss.item():.9f}")
    if not a.dump:
        return 0
    got = read_safetensors(a.dump)
    worst, bad = 0.0, []
    def cmp(name, ref, val):
        nonlocal worst
        ref = np.asarray(ref, dtype=np.float64); val = np.asarray(val, dtype=np.float64).reshape(ref.shape)
        err = float(np.max(np.abs(ref - val)) / max(np.max(np.abs(ref)), 1e-30))
        worst = max(worst, err)
        if not err < a.tol:
            bad.append((name, err))
        return err
    print(f"loss   rel err {cmp('loss', loss.item(), got['loss']):.3e}")
    if "logits" in got:
        print(f"logits rel err {cmp('logits', logits.detach().numpy(), got['logits']):.3e}")
    else:  # the fused LM head (fused_head=on) never materialises them
        print("logits not in the dump (the model's LM head is fused with the loss); compared the loss and gradients")
    for n, p in P.items():
        cmp(n, p.grad.numpy(), got[n])
    what = "the logits and " if "logits" in got else ""
    print(f"worst relative error over the loss, {what}{len(P)} gradients: {worst:.3e} (tolerance {a.tol:g})")
    for n, e in bad:
        print(f"  FAIL {n}: {e:.3e}")
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit(main())
