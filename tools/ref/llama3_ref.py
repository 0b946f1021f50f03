#!/usr/bin/env python3
"""Llama 3 in plain PyTorch (an independent implementation of models/llama3/llama3.yaml), to check `stg step`.

  python3 tools/ref/llama3_ref.py --dims vocab=300,d_model=256,n_layers=2,n_heads=4,n_kv_heads=1,d_ff=160 \\
      --make-params P.safetensors --make-batch B.npy --batch-shape 2,37
  stg step models/llama3/8B.yaml --precision fp64 --set vocab=300 --set d_model=256 ... --set fused_head=off \\
      --init P.safetensors --batch B.npy --dump D.safetensors
  python3 tools/ref/llama3_ref.py --dims ... --params P.safetensors --batch B.npy --dump D.safetensors

Same parameter names (Meta's: tok_embeddings.weight, layers.{i}.attention.wq.weight, ...,
norm.weight, output.weight) and the same init (N(0, 0.02), RMSNorm weights one). RMSNorm (eps 1e-5),
RoPE theta 500000 on interleaved pairs (Meta's convention), grouped-query causal attention written
out (query head h reads kv head h // (n_heads / n_kv_heads)), SwiGLU, the head tied to the embedding
when --dims has tie=1, mean cross-entropy. Dims default to Llama 3.1-8B's.
"""
import sys, os
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon

DEFAULTS = {"vocab": 128256, "d_model": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "d_ff": 14336,
            "rope_theta": 500000, "tie": 0}


def complete_dims(d):
    return {**DEFAULTS, **d}


def shapes(d):
    D, F, H, Hkv = d["d_model"], d["d_ff"], d["n_heads"], d["n_kv_heads"]
    Dh = D // H
    w = ("normal", 0.02)
    s = {"tok_embeddings.weight": ([d["vocab"], D], w)}
    for i in range(d["n_layers"]):
        p = f"layers.{i}."
        s.update({
            p + "attention_norm.weight": ([D], ("ones",)),
            p + "attention.wq.weight": ([H * Dh, D], w), p + "attention.wk.weight": ([Hkv * Dh, D], w),
            p + "attention.wv.weight": ([Hkv * Dh, D], w), p + "attention.wo.weight": ([D, H * Dh], w),
            p + "ffn_norm.weight": ([D], ("ones",)),
            p + "feed_forward.w1.weight": ([F, D], w), p + "feed_forward.w2.weight": ([D, F], w),
            p + "feed_forward.w3.weight": ([F, D], w),
        })
    s["norm.weight"] = ([D], ("ones",))
    if not d["tie"]:
        s["output.weight"] = ([d["vocab"], D], w)
    return s


def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    # x (B, S, H, Dh): adjacent pairs (x[2k], x[2k+1]) rotated by position * theta^(-2k/Dh)
    B, S, H, Dh = x.shape
    k = torch.arange(Dh // 2, dtype=torch.float64)
    ang = torch.arange(S, dtype=torch.float64)[:, None] * float(theta) ** (-2.0 * k / Dh)
    c = torch.cos(ang).to(x.dtype)[None, :, None, :]
    s = torch.sin(ang).to(x.dtype)[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).reshape(B, S, H, Dh)


def forward(P, tokens, targets, d):
    B, S = tokens.shape
    D, H, Hkv = d["d_model"], d["n_heads"], d["n_kv_heads"]
    Dh = D // H
    x = P["tok_embeddings.weight"][tokens]
    for i in range(d["n_layers"]):
        p = lambda n: P[f"layers.{i}.{n}"]
        h = rmsnorm(x, p("attention_norm.weight"))
        q = rope((h @ p("attention.wq.weight").T).reshape(B, S, H, Dh), d["rope_theta"]).transpose(1, 2)
        k = rope((h @ p("attention.wk.weight").T).reshape(B, S, Hkv, Dh), d["rope_theta"]).transpose(1, 2)
        v = (h @ p("attention.wv.weight").T).reshape(B, S, Hkv, Dh).transpose(1, 2)
        o = refcommon.causal_attention(q, k, v).transpose(1, 2).reshape(B, S, H * Dh)
        x = x + o @ p("attention.wo.weight").T
        h2 = rmsnorm(x, p("ffn_norm.weight"))
        a, b = h2 @ p("feed_forward.w1.weight").T, h2 @ p("feed_forward.w3.weight").T
        x = x + (a * torch.sigmoid(a) * b) @ p("feed_forward.w2.weight").T
    head = P["tok_embeddings.weight"] if d["tie"] else P["output.weight"]
    logits = rmsnorm(x, P["norm.weight"]) @ head.T
    return refcommon.mean_cross_entropy(logits, targets), logits


if __name__ == "__main__":
    sys.exit(refcommon.run(sys.modules[__name__], __doc__))
