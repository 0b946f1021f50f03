#!/usr/bin/env python3
"""The timed PyTorch peer of a Llama 3 training step (issue 24's "Llama 3.2-1B at ctx 4096, batch 1"):

  python3 tools/ref/llama3_peer.py --model models/llama3/1B.yaml [--ctx 4096] [--batch 1]
      [--compile-mode default|reduce-overhead] [--warm 5] [--iters 20] [--out F.json]
  python3 tools/ref/llama3_peer.py --check      (CPU, float64: the module equals llama3_ref.py)

The model is Llama 3 as models/llama3/llama3.yaml writes it (the same architecture as
tools/ref/llama3_ref.py, here as an nn.Module made for speed): token embedding, n_layers x [RMSNorm
(eps 1e-5) -> q, k, v projections (no bias) -> RoPE (theta from the model file, default 500000,
adjacent pairs) -> causal grouped-query attention through F.scaled_dot_product_attention with the
cuDNN backend pinned (k and v repeated to the query heads first, as Hugging Face's Llama does) ->
output projection -> residual, RMSNorm -> SwiGLU -> residual], RMSNorm, the LM head (tied to the
embedding when the model file says `tie_embeddings: on`), mean cross-entropy in float32.

The step: bf16 autocast forward, backward, fused AdamW on fp32 parameters (lr 1e-4), gradients set to
None: what `stg bench --precision bf16` times (fp32 master weights and AdamW state, bf16 compute).
The forward is torch.compile'd whole (static shapes; --compile-mode reduce-overhead adds CUDA
graphs). Timing: --warm steps (compilation), then --iters steps each timed with CUDA events; the
median is reported with the peak allocated memory. Dims come from the model file's `dims: {...}` and
`options: {...}` lines (no YAML library needed); --set NAME=VALUE overrides a dim.
"""
import argparse, json, os, re, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F


def section(text, key):
    """The `key:` mapping of a model file, flow style (`key: {a: 1, b: 2}`) or block style (indented
    `a: 1` lines); values as strings with comments dropped, a list value as its first item."""
    out = {}
    m = re.search(r"^%s:\s*\{([^}]*)\}" % key, text, re.M)
    if m:
        items = [i.split(":", 1) for i in m.group(1).split(",") if ":" in i]
    else:
        m = re.search(r"^%s:\s*(#.*)?\n((?:[ \t]+.*\n?|\s*\n)*)" % key, text, re.M)
        lines = m.group(2).splitlines() if m else []
        items = [l.split("#", 1)[0].strip().split(":", 1) for l in lines if re.match(r"^  \w", l)]
    for kv in items:
        if len(kv) == 2:
            v = kv[1].split("#", 1)[0].strip()
            out[kv[0].strip()] = v.strip("[]").split(",")[0].strip() if v.startswith("[") else v
    return out


def model_dims(path, sets):
    text = open(path).read()
    dims, opts = {}, {}
    inc = re.search(r"^include:\s*(\S+)", text, re.M)
    if inc:
        bt = open(os.path.join(os.path.dirname(path), inc.group(1))).read()
        dims.update(section(bt, "dims"))
        opts.update(section(bt, "options"))
    dims.update(section(text, "dims"))
    opts.update(section(text, "options"))
    for s in sets:
        k, v = s.split("=", 1)
        (opts if k in opts else dims)[k] = v
    d = {}
    for k in ("vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "batch", "ctx"):
        try:
            d[k] = int(dims[k])
        except (KeyError, ValueError):
            sys.exit(f"llama3_peer.py: {path}: dim {k} is missing or not a number")
    d["rope_theta"] = float(dims.get("rope_theta", 500000))
    d["tie"] = opts.get("tie_embeddings", "off") == "on"
    return d


def up(x):  # at least float32 (bf16 under autocast), float64 stays
    return x if x.dtype == torch.float64 else x.float()


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        xf = up(x)
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * self.weight


def rope_tables(S, Dh, theta, dev):
    k = torch.arange(Dh // 2, dtype=torch.float64, device=dev)
    ang = torch.arange(S, dtype=torch.float64, device=dev)[:, None] * theta ** (-2.0 * k / Dh)
    return torch.cos(ang), torch.sin(ang)  # float64: rope() multiplies in float32 or float64


def rope(x, c, s):
    # x (B, S, H, Dh): pairs (x[2k], x[2k+1]) rotated by the position's angle
    x0, x1 = up(x[..., 0::2]), up(x[..., 1::2])
    c, s = c[None, :, None, :].to(x0.dtype), s[None, :, None, :].to(x0.dtype)
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2).to(x.dtype)


def sdpa(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # older PyTorch (the --check on a CPU): written out
    S = q.shape[-2]
    a = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    a = a.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(a, -1) @ v


def check():
    """float64 on the CPU, small dims with 4:1 groups and a tied head: this module's logits and loss
    equal tools/ref/llama3_ref.py's from the same parameters, to 1e-10 relative."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import llama3_ref
    d = dict(vocab=97, d_model=64, n_layers=2, n_heads=8, n_kv_heads=2, d_ff=80, batch=2, ctx=19,
             rope_theta=500000.0, tie=True)
    torch.manual_seed(1)
    m = Llama(d).double()
    P = {"tok_embeddings.weight": m.tok_embeddings.weight, "norm.weight": m.norm.weight}
    names = {"attention_norm": "attention_norm", "ffn_norm": "ffn_norm", "wq": "attention.wq", "wk": "attention.wk",
             "wv": "attention.wv", "wo": "attention.wo", "w1": "feed_forward.w1", "w2": "feed_forward.w2",
             "w3": "feed_forward.w3"}
    for i, b in enumerate(m.layers):
        for mine, meta in names.items():
            P[f"layers.{i}.{meta}.weight"] = getattr(b, mine).weight
    for p_ in m.parameters():  # RMSNorm weights away from one, so a swapped norm would show
        if p_.dim() == 1:
            with torch.no_grad():
                p_.uniform_(0.5, 1.5)
    t = torch.randint(0, d["vocab"], (d["batch"], d["ctx"]))
    y = torch.randint(0, d["vocab"], (d["batch"], d["ctx"]))
    rd = llama3_ref.complete_dims({k: d[k] for k in ("vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff")})
    rd["tie"] = 1
    with torch.no_grad():
        ref_loss, ref_logits = llama3_ref.forward(P, t, y, rd)
        logits = m(t)
        loss = F.cross_entropy(logits.view(-1, d["vocab"]), y.view(-1))
    e1 = ((logits - ref_logits).abs().max() / ref_logits.abs().max()).item()
    e2 = abs(loss.item() - ref_loss.item()) / abs(ref_loss.item())
    print(json.dumps(dict(check="llama3_peer vs llama3_ref", logits_rel=e1, loss_rel=e2)))
    return 0 if e1 < 1e-10 and e2 < 1e-10 else 1


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        D, H, Hkv, Ff = d["d_model"], d["n_heads"], d["n_kv_heads"], d["d_ff"]
        self.H, self.Hkv, self.Dh = H, Hkv, D // H
        self.attention_norm, self.ffn_norm = RMSNorm(D), RMSNorm(D)
        self.wq = nn.Linear(D, H * self.Dh, bias=False)
        self.wk = nn.Linear(D, Hkv * self.Dh, bias=False)
        self.wv = nn.Linear(D, Hkv * self.Dh, bias=False)
        self.wo = nn.Linear(H * self.Dh, D, bias=False)
        self.w1 = nn.Linear(D, Ff, bias=False)
        self.w2 = nn.Linear(Ff, D, bias=False)
        self.w3 = nn.Linear(D, Ff, bias=False)

    def forward(self, x, c, s):
        B, S, _ = x.shape
        h = self.attention_norm(x)
        q = rope(self.wq(h).view(B, S, self.H, self.Dh), c, s).transpose(1, 2)
        k = rope(self.wk(h).view(B, S, self.Hkv, self.Dh), c, s).transpose(1, 2)
        v = self.wv(h).view(B, S, self.Hkv, self.Dh).transpose(1, 2)
        g = self.H // self.Hkv
        if g > 1:  # query head h reads kv head h // g
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        o = sdpa(q, k, v)
        x = x + self.wo(o.transpose(1, 2).reshape(B, S, self.H * self.Dh))
        h2 = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h2)) * self.w3(h2))


class Llama(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.tok_embeddings = nn.Embedding(d["vocab"], d["d_model"])
        self.layers = nn.ModuleList(Block(d) for _ in range(d["n_layers"]))
        self.norm = RMSNorm(d["d_model"])
        self.output = None if d["tie"] else nn.Linear(d["d_model"], d["vocab"], bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)
        self.theta = d["rope_theta"]

    def forward(self, t):
        x = self.tok_embeddings(t)
        c, s = rope_tables(t.shape[1], self.layers[0].Dh, self.theta, t.device)
        for b in self.layers:
            x = b(x, c, s)
        x = self.norm(x)
        return F.linear(x, self.tok_embeddings.weight) if self.output is None else self.output(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/llama3/1B.yaml")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--ctx", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--compile-mode", default="default", choices=["default", "reduce-overhead", "none"])
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out")
    ap.add_argument("--check", action="store_true", help="float64 CPU check against tools/ref/llama3_ref.py")
    a = ap.parse_args()
    if a.check:
        return check()
    d = model_dims(a.model, a.set)
    if a.ctx: d["ctx"] = a.ctx
    if a.batch: d["batch"] = a.batch
    if d["n_heads"] % d["n_kv_heads"]:
        sys.exit("llama3_peer.py: n_heads must be a multiple of n_kv_heads")
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_math_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(True)
    torch.manual_seed(0)
    dev = "cuda"
    m = Llama(d).to(dev)
    n = sum(p.numel() for p in m.parameters())
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
    f = m if a.compile_mode == "none" else (torch.compile(m, dynamic=False) if a.compile_mode == "default"
                                            else torch.compile(m, dynamic=False, mode=a.compile_mode))
    B, S, V = d["batch"], d["ctx"], d["vocab"]
    x = torch.randint(0, V, (B, S), device=dev)
    y = torch.randint(0, V, (B, S), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = f(x)
        loss = F.cross_entropy(logits.float().view(-1, V), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    for _ in range(a.warm):
        step()
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    times = []
    for _ in range(a.iters):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); l = step(); e1.record(); torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1))
    times.sort()
    med = times[len(times) // 2]
    L, D = d["n_layers"], d["d_model"]
    # dense 6 N per token plus attention 12 L S D per token (no causal discount), the torch_lm.py rule
    flops = 6 * n * B * S + 12 * L * B * S * S * D
    r = dict(model=a.model, dims=d, params=n, compile_mode=a.compile_mode, sdpa="cudnn", step_ms_median=med,
             step_ms_min=times[0], step_ms_max=times[-1], warm_s=warm_s,
             peak_alloc_GiB=torch.cuda.max_memory_allocated() / 2**30, tflops=flops / med / 1e9,
             loss=float(l), device=torch.cuda.get_device_name(), torch=torch.__version__)
    print(json.dumps(r), flush=True)
    if a.out:
        json.dump(r, open(a.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
