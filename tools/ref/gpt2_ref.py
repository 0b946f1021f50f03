#!/usr/bin/env python3
"""GPT-2 in plain PyTorch (an independent implementation of models/gpt2/gpt2.yaml), to check `stg step`.

  python3 tools/ref/gpt2_ref.py --dims d_model=768,n_layers=2,n_heads=12 --make-params P.safetensors \\
      --make-batch B.npy --batch-shape 2,37
  stg step models/gpt2/124M.yaml --precision fp64 --set n_layers=2 --set batch=2 --set ctx=37 \\
      --set fused_head=off --init P.safetensors --batch B.npy --dump D.safetensors
  python3 tools/ref/gpt2_ref.py --dims d_model=768,n_layers=2,n_heads=12 --params P.safetensors \\
      --batch B.npy --dump D.safetensors          # loss, logits, every gradient to 1e-10 (float64)

Same parameter names (Hugging Face's GPT-2 names; linear weights [d_out, d_in]) and the same init
(N(0, 0.02); attn.c_proj and mlp.c_proj N(0, 0.02 / sqrt(2 n_layers)); biases 0; LayerNorm 1, 0).
Learned position embeddings, LayerNorm with bias (eps 1e-5), fused qkv c_attn split in three,
causal attention written out, GELU's tanh form, LM head tied to wte, mean cross-entropy.
Dims default to GPT-2 124M's: vocab 50257, n_positions 1024, d_model 768, n_layers 12, n_heads 12.
"""
import math, sys, os
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon

DEFAULTS = {"vocab": 50257, "n_positions": 1024, "d_model": 768, "n_layers": 12, "n_heads": 12}


def complete_dims(d):
    d = {**DEFAULTS, **d}
    d.setdefault("d_ff", 4 * d["d_model"])
    return d


def shapes(d):
    D, F, L = d["d_model"], d["d_ff"], d["n_layers"]
    proj = ("normal", 0.02 / math.sqrt(2 * L))
    s = {"wte.weight": ([d["vocab"], D], ("normal", 0.02)), "wpe.weight": ([d["n_positions"], D], ("normal", 0.02))}
    for i in range(L):
        p = f"h.{i}."
        s.update({
            p + "ln_1.weight": ([D], ("ones",)), p + "ln_1.bias": ([D], ("zeros",)),
            p + "attn.c_attn.weight": ([3 * D, D], ("normal", 0.02)), p + "attn.c_attn.bias": ([3 * D], ("zeros",)),
            p + "attn.c_proj.weight": ([D, D], proj), p + "attn.c_proj.bias": ([D], ("zeros",)),
            p + "ln_2.weight": ([D], ("ones",)), p + "ln_2.bias": ([D], ("zeros",)),
            p + "mlp.c_fc.weight": ([F, D], ("normal", 0.02)), p + "mlp.c_fc.bias": ([F], ("zeros",)),
            p + "mlp.c_proj.weight": ([D, F], proj), p + "mlp.c_proj.bias": ([D], ("zeros",)),
        })
    s.update({"ln_f.weight": ([D], ("ones",)), "ln_f.bias": ([D], ("zeros",))})
    return s


def layernorm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(P, tokens, targets, d):
    B, S = tokens.shape
    D, H = d["d_model"], d["n_heads"]
    Dh = D // H
    x = P["wte.weight"][tokens] + P["wpe.weight"][:S]
    for i in range(d["n_layers"]):
        p = lambda n: P[f"h.{i}.{n}"]
        h = layernorm(x, p("ln_1.weight"), p("ln_1.bias"))
        qkv = h @ p("attn.c_attn.weight").T + p("attn.c_attn.bias")
        q, k, v = (t.reshape(B, S, H, Dh).transpose(1, 2) for t in qkv.split(D, dim=-1))
        o = refcommon.causal_attention(q, k, v).transpose(1, 2).reshape(B, S, D)
        x = x + o @ p("attn.c_proj.weight").T + p("attn.c_proj.bias")
        h2 = layernorm(x, p("ln_2.weight"), p("ln_2.bias"))
        x = x + gelu_tanh(h2 @ p("mlp.c_fc.weight").T + p("mlp.c_fc.bias")) @ p("mlp.c_proj.weight").T + p("mlp.c_proj.bias")
    logits = layernorm(x, P["ln_f.weight"], P["ln_f.bias"]) @ P["wte.weight"].T  # the head is wte (tied)
    return refcommon.mean_cross_entropy(logits, targets), logits


if __name__ == "__main__":
    sys.exit(refcommon.run(sys.modules[__name__], __doc__))
