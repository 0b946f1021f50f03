#!/usr/bin/env python3
"""A plain PyTorch Llama (and GPT-2; no transformers library) that loads a Hugging Face model
directory, to check what `stg export --hf DIR` writes.

  python3 tools/ref/hf_llama.py logits --hf DIR --batch B.npy --dump STG_STEP.safetensors [--tol 1e-4]
      B.npy: int32 [2, batch, ctx] (tokens, targets), as `stg step --batch` reads it; the dump is what
      `stg step --dump` wrote for the same parameters. Compares the logits (and the loss).
  python3 tools/ref/hf_llama.py eval --hf DIR --data F.bin --ctx N [--tokens N] [--expect LOSS --tol 1e-5]
      The mean loss over every non-overlapping ctx-window of the token file, as `stg eval` defines it
      (window w: inputs [w ctx, (w+1) ctx), targets one further; the targets after the last whole
      window are not scored). Prints one JSON line; with --expect, exits 1 when the relative
      difference is above --tol.

The model is the Hugging Face Llama as its config.json describes it: RMSNorm (x / sqrt(mean(x^2) +
eps) * w), rotary embeddings on halves (rotate_half: pairs (x[k], x[k + d/2]), frequencies
theta^(-2k/d)), causal softmax attention with grouped key/value heads, SwiGLU (down(silu(gate(x)) *
up(x))), a final RMSNorm and the LM head (the embedding when tie_word_embeddings); or GPT-2 as
GPT2LMHeadModel (learned positions, LayerNorm with bias, Conv1D weights [d_in, d_out], the tanh GELU,
the head tied to wte). It is written
from the architecture, not from stg: the check is that stg's export (which permutes the q and k
rows from stg's adjacent-pair RoPE) gives this model stg's numbers. --dtype float64 runs it in
double. Exit status 77: PyTorch or NumPy is missing (the test reports itself skipped).
"""
import argparse, json, math, os, sys

try:
    import numpy as np
    import torch
except ImportError as e:  # the test skips
    print(f"skipped: {e}", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcommon import read_safetensors  # noqa: E402


def load_hf(path, dtype):
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    if not {"LlamaForCausalLM", "GPT2LMHeadModel"} & set(cfg.get("architectures", [])):
        raise SystemExit(f"{path}: neither a LlamaForCausalLM nor a GPT2LMHeadModel")
    files = [os.path.join(path, "model.safetensors")]
    if not os.path.exists(files[0]):
        with open(os.path.join(path, "model.safetensors.index.json")) as f:
            files = sorted({os.path.join(path, v) for v in json.load(f)["weight_map"].values()})
    W = {}
    for fn in files:
        W.update({k: torch.tensor(v, dtype=dtype) for k, v in read_safetensors(fn).items()})
    if "GPT2LMHeadModel" in cfg["architectures"]:  # names saved with or without the base model's prefix
        W = {(k if k.startswith("transformer.") or k.startswith("lm_head") else "transformer." + k): v for k, v in W.items()}
    return cfg, W


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def gelu_new(x):  # GPT-2's GELU, the tanh approximation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def forward_gpt2(cfg, W, tokens):
    """GPT2LMHeadModel: logits (B, S, V). Conv1D weights are [d_in, d_out]: y = x W + b."""
    B, S = tokens.shape
    D, H, eps = cfg["n_embd"], cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    Dh = D // H
    p = lambda n: W["transformer." + n]
    ln = lambda x, n: torch.nn.functional.layer_norm(x, (D,), p(n + ".weight"), p(n + ".bias"), eps)
    x = p("wte.weight")[tokens] + p("wpe.weight")[torch.arange(S)][None]
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    for i in range(cfg["n_layer"]):
        h = ln(x, f"h.{i}.ln_1")
        qkv = h @ p(f"h.{i}.attn.c_attn.weight") + p(f"h.{i}.attn.c_attn.bias")
        q, k, v = (t.view(B, S, H, Dh).transpose(1, 2) for t in qkv.split(D, dim=-1))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(Dh)
        o = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + o.transpose(1, 2).reshape(B, S, D) @ p(f"h.{i}.attn.c_proj.weight") + p(f"h.{i}.attn.c_proj.bias")
        h2 = ln(x, f"h.{i}.ln_2")
        m = gelu_new(h2 @ p(f"h.{i}.mlp.c_fc.weight") + p(f"h.{i}.mlp.c_fc.bias"))
        x = x + m @ p(f"h.{i}.mlp.c_proj.weight") + p(f"h.{i}.mlp.c_proj.bias")
    head = W["lm_head.weight"] if "lm_head.weight" in W else p("wte.weight")  # tied
    return ln(x, "ln_f") @ head.T


def forward(cfg, W, tokens):
    """logits (B, S, V) for tokens (B, S)."""
    if "GPT2LMHeadModel" in cfg["architectures"]:
        return forward_gpt2(cfg, W, tokens)
    B, S = tokens.shape
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads") or H
    Dh = cfg.get("head_dim") or D // H
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    dt = W["model.embed_tokens.weight"].dtype
    inv_freq = 1.0 / theta ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    ang = torch.arange(S, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (S, Dh/2)
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos().to(dt), emb.sin().to(dt)  # (S, Dh)
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    x = W["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = lambda n: W[f"model.layers.{i}.{n}.weight"]
        h = rmsnorm(x, p("input_layernorm"), eps)
        q = (h @ p("self_attn.q_proj").T).view(B, S, H, Dh).transpose(1, 2)
        k = (h @ p("self_attn.k_proj").T).view(B, S, Hkv, Dh).transpose(1, 2)
        v = (h @ p("self_attn.v_proj").T).view(B, S, Hkv, Dh).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if Hkv != H:  # query head h reads key/value head h // (H / Hkv)
            k = k.repeat_interleave(H // Hkv, dim=1)
            v = v.repeat_interleave(H // Hkv, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(Dh)
        o = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + o.transpose(1, 2).reshape(B, S, H * Dh) @ p("self_attn.o_proj").T
        h2 = rmsnorm(x, p("post_attention_layernorm"), eps)
        g, u = h2 @ p("mlp.gate_proj").T, h2 @ p("mlp.up_proj").T
        x = x + (torch.nn.functional.silu(g) * u) @ p("mlp.down_proj").T
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") and "lm_head.weight" not in W else W["lm_head.weight"]
    return rmsnorm(x, W["model.norm.weight"], eps) @ head.T


def read_tokens(path):
    if path.endswith(".npy"):
        return np.load(path).astype(np.int64)
    raw = open(path, "rb").read()
    if len(raw) >= 16 and raw[:8] == b"STGTOKU4" and (len(raw) - 16) % 4 == 0:
        return np.frombuffer(raw[16:], dtype="<u4").astype(np.int64)
    return np.frombuffer(raw, dtype="<u2").astype(np.int64)


def rel(ref, val):
    ref, val = np.asarray(ref, dtype=np.float64), np.asarray(val, dtype=np.float64).reshape(np.shape(ref))
    if np.isnan(ref).any() or np.isnan(val).any():
        return float("inf")
    return float(np.max(np.abs(ref - val)) / max(np.max(np.abs(ref)), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["logits", "eval"])
    ap.add_argument("--hf", required=True)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--batch")
    ap.add_argument("--dump")
    ap.add_argument("--data")
    ap.add_argument("--ctx", type=int)
    ap.add_argument("--tokens", type=int, default=0)
    ap.add_argument("--rows", type=int, default=8, help="windows per forward pass (eval)")
    ap.add_argument("--expect", type=float)
    ap.add_argument("--tol", type=float)
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    dtype = torch.float32 if a.dtype == "float32" else torch.float64
    cfg, W = load_hf(a.hf, dtype)
    with torch.no_grad():
        if a.what == "logits":
            bt = np.load(a.batch)
            tokens, targets = torch.tensor(bt[0], dtype=torch.long), torch.tensor(bt[1], dtype=torch.long)
            logits = forward(cfg, W, tokens)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), targets.reshape(-1)).item()
            got = read_safetensors(a.dump)
            el, eo = rel(loss, got["loss"]), rel(logits.numpy(), got["logits"])
            tol = a.tol if a.tol is not None else 1e-4
            print(json.dumps({"loss": loss, "stg_loss": float(got["loss"]), "loss_rel_err": el, "logits_rel_err": eo, "tol": tol}))
            return 0 if el <= tol and eo <= tol else 1
        x = read_tokens(a.data)
        n = min(len(x), a.tokens) if a.tokens > 0 else len(x)
        ctx = a.ctx
        windows = (n - 1) // ctx
        if windows < 1:
            raise SystemExit(f"{a.data}: {n} tokens hold no window of {ctx} + 1")
        total = 0.0
        for w0 in range(0, windows, a.rows):
            w1 = min(windows, w0 + a.rows)
            idx = np.arange(w0, w1)[:, None] * ctx + np.arange(ctx)[None, :]
            tok, tgt = torch.tensor(x[idx]), torch.tensor(x[idx + 1])
            logits = forward(cfg, W, tok)
            ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="sum")
            total += float(ce.double())
        loss = total / (windows * ctx)
        out = {"windows": windows, "targets": windows * ctx, "dropped": n - 1 - windows * ctx, "loss": loss}
        if a.expect is not None:
            out["expect"] = a.expect
            out["rel_err"] = abs(loss - a.expect) / abs(a.expect)
        print(json.dumps(out))
        tol = a.tol if a.tol is not None else 1e-5
        return 0 if a.expect is None or out["rel_err"] <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
