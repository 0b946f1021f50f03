#!/usr/bin/env python3
"""The PyTorch peer of `stg sample` (issue 26): the CS336 LM decoding greedily with a static KV cache.

  python3 tools/ref/torch_decode.py --size 2.7B --batch 1 --prompt 512 --new 512 [--compile|--no-compile]
  python3 tools/ref/torch_decode.py --check [--stg BUILD/stg]      (CPU, float64: the correctness tests)

The model is the CS336 LM as models/cs336/lm.yaml writes it: token embedding, n_layers x [RMSNorm (eps
1e-5) -> causal multi-head attention with RoPE (theta 10000, adjacent pairs (x[2k], x[2k+1]) rotated
by p * theta^(-2k/Dh), as stg's rope op) -> residual, RMSNorm -> SwiGLU -> residual], RMSNorm, an
untied LM head. Weights are [d_out, d_in] applied as x W^T under stg's names (tok_emb, blocks.{i}.wq,
..., ln_f, lm_head); q/k/v and w1/w3 are concatenated into one weight each (one matmul, as gpt-fast
does; the same products). Dims come from the model file (--size NAME: models/cs336/NAME.yaml, or
--model PATH; its `dims: {...}` line, no YAML library needed) or --d-model etc.

Decoding: the KV cache is preallocated per layer, [batch, heads, ctx, head_dim] (the layout
scaled_dot_product_attention reads), written in place at the current position, which is a device
tensor: the decode step's shapes never change, so torch.compile(mode="reduce-overhead") captures it
as a CUDA graph. Each step attends over the whole cache with a mask (positions <= pos). The prompt (P
tokens) is prefilled eagerly (fused causal attention); its last logits give the first new token; then
N - 1 decode steps give the rest, greedily (the first largest logit, as stg). Timing: a warm-up pass
(prefill and a few decode steps: compilation, CUDA-graph recording), then a timed prefill and the
N - 1 decode steps, timed with CUDA events. decode_tokens_per_s = batch x decode steps / decode time,
stg sample --json's definition (its prefill also draws the first token).

--check: tiny dims, float64 on the CPU: the prefill's logits equal a full forward's (an independent,
written-out implementation) at every prompt position, each decode step's logits equal the full
forward's last row over the same prefix, to 1e-10 relative; the greedy tokens equal the argmax chain
of repeated full forwards. With --stg BIN it also checks the greedy tokens against `stg sample`
(fp64, CPU) from the same parameters (a checkpoint of `stg train --steps 1`).

Prints one JSON line per batch size. Exit status: 0, 1 when a check fails, 2 on bad input.
"""
import argparse, json, math, os, re, struct, subprocess, sys, tempfile, time
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIM_KEYS = ("vocab", "d_model", "d_ff", "n_layers", "n_heads", "ctx")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}


def die(msg):
    print(f"torch_decode.py: {msg}", file=sys.stderr)
    sys.exit(2)


# ---- model dims and parameters -------------------------------------------------------------------

def model_dims(path):
    """The integer dims of a model file: its `dims: {...}` line (the size files) or its block (lm.yaml),
    then the files it includes for what it leaves out."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        die(f"{path}: {e.strerror}")
    dims = {}
    m = re.search(r"^dims:\s*\{([^}]*)\}", text, re.M)
    if m:
        items = [kv.split(":", 1) for kv in m.group(1).split(",") if ":" in kv]
    else:  # a block mapping: "dims:" then indented "key: value" lines
        b = re.search(r"^dims:\s*\n((?:[ \t]+\S.*\n?)+)", text, re.M)
        items = [ln.split(":", 1) for ln in (b.group(1).splitlines() if b else []) if ":" in ln]
    for k, v in items:
        v = v.split("#", 1)[0].strip()
        if re.fullmatch(r"\d+", v):
            dims[k.strip()] = int(v)
    inc = re.search(r"^include:\s*(\S+)", text, re.M)
    if inc:
        base = model_dims(os.path.join(os.path.dirname(path), inc.group(1)))
        base.update(dims)
        dims = base
    return dims


def resolve_dims(a):
    if a.check and not (a.model or a.size):
        d = dict(vocab=97, d_model=48, d_ff=80, n_layers=2, n_heads=4, ctx=40)  # head_dim 12
    else:
        path = a.model
        if not path:
            name = a.size or "small"
            path = os.path.join(ROOT, "models", "tiny.yaml") if name == "tiny" else os.path.join(ROOT, "models", "cs336", f"{name}.yaml")
            if not os.path.exists(path):
                die(f"--size {name}: no {path} (small, medium, large, xl, 2.7B or tiny)")
        d = model_dims(path)
    for k in DIM_KEYS:
        v = getattr(a, k)
        if v is not None:
            d[k] = v
    for k in DIM_KEYS[:5]:
        if k not in d:
            die(f"the model's {k} is not known: give --{k.replace('_', '-')}")
        if d[k] < 1:
            die(f"{k} {d[k]}: must be at least 1")
    if d["d_model"] % d["n_heads"] or (d["d_model"] // d["n_heads"]) % 2:
        die(f"d_model {d['d_model']} / n_heads {d['n_heads']} must be an even head dim (RoPE rotates pairs)")
    return d


def param_shapes(d):
    D, Fd, V = d["d_model"], d["d_ff"], d["vocab"]
    s = {"tok_emb": (V, D)}
    for i in range(d["n_layers"]):
        for n, sh in (("ln1", (D,)), ("wq", (D, D)), ("wk", (D, D)), ("wv", (D, D)), ("wo", (D, D)),
                      ("ln2", (D,)), ("w1", (Fd, D)), ("w2", (D, Fd)), ("w3", (Fd, D))):
            s[f"blocks.{i}.{n}"] = sh
    s["ln_f"] = (D,)
    s["lm_head"] = (V, D)
    return s


def random_params(d, seed, device, dtype):
    """CS336's initialisation (stg's init=linear|embedding|ones): linear weights N(0, 2/(d_in+d_out))
    truncated at 3 sigma, the embedding N(0, 1) truncated at 3, norms ones. Drawn in float32 (float64
    for dtype float64) on the device, then cast."""
    torch.manual_seed(seed)
    wd = torch.float64 if dtype == torch.float64 else torch.float32
    out = {}
    for n, sh in param_shapes(d).items():
        if len(sh) == 1:
            t = torch.ones(sh, dtype=wd, device=device)
        else:
            std = 1.0 if n == "tok_emb" else math.sqrt(2.0 / (sh[0] + sh[1]))
            t = torch.empty(sh, dtype=wd, device=device)
            nn.init.trunc_normal_(t, 0.0, std, -3 * std, 3 * std)
        out[n] = t.to(dtype)
    return out


def read_safetensors(path, want):
    """The tensors named in want (name -> shape) from a safetensors file (F32, F64 or BF16), as float64."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        die(f"--init {path}: {e.strerror}")
    try:
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        die(f"--init {path}: not a safetensors file ({e})")
    data = memoryview(raw)[8 + n:]
    types = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16}
    out = {}
    for name, shape in want.items():
        h = header.get(name)
        if h is None:
            die(f"--init {path}: no parameter '{name}' (the model's dims: is this file for another model?)")
        if h.get("dtype") not in types:
            die(f"--init {path}: '{name}' has dtype {h.get('dtype')}; expected F32, F64 or BF16")
        if tuple(h["shape"]) != tuple(shape):
            die(f"--init {path}: '{name}' has shape {h['shape']}, the model's is {list(shape)}")
        a, b = h["data_offsets"]
        dt = types[h["dtype"]]
        if b - a != math.prod(shape) * torch.tensor([], dtype=dt).element_size() or b > len(data):
            die(f"--init {path}: '{name}': its data offsets do not fit its shape or the file")
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=dt).reshape(shape).to(torch.float64)
    return out


# ---- the model with a static KV cache ------------------------------------------------------------

def rmsnorm(x, w, eps=1e-5):
    xf = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope_rotate(x, cos, sin):
    """x (..., S, H, Dh); cos, sin (S, Dh/2): pairs (x[2k], x[2k+1]) rotated (in float32 for bf16)."""
    xf = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    x0, x1 = xf[..., 0::2], xf[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2).to(x.dtype)


class Block(nn.Module):
    def __init__(self, D, Fd, device, dtype):
        super().__init__()
        e = dict(device=device, dtype=dtype)
        self.ln1 = nn.Parameter(torch.empty(D, **e), requires_grad=False)
        self.wqkv = nn.Parameter(torch.empty(3 * D, D, **e), requires_grad=False)
        self.wo = nn.Parameter(torch.empty(D, D, **e), requires_grad=False)
        self.ln2 = nn.Parameter(torch.empty(D, **e), requires_grad=False)
        self.w13 = nn.Parameter(torch.empty(2 * Fd, D, **e), requires_grad=False)
        self.w2 = nn.Parameter(torch.empty(D, Fd, **e), requires_grad=False)
        self.register_buffer("kc", None, persistent=False)  # the KV cache (LM.setup)
        self.register_buffer("vc", None, persistent=False)


class LM(nn.Module):
    def __init__(self, d, device, dtype, attn="sdpa"):
        super().__init__()
        self.d, self.device, self.dtype, self.attn = d, device, dtype, attn
        self.H, self.D = d["n_heads"], d["d_model"]
        self.Dh = self.D // self.H
        e = dict(device=device, dtype=dtype)
        self.tok_emb = nn.Parameter(torch.empty(d["vocab"], self.D, **e), requires_grad=False)
        self.blocks = nn.ModuleList(Block(self.D, d["d_ff"], device, dtype) for _ in range(d["n_layers"]))
        self.ln_f = nn.Parameter(torch.empty(self.D, **e), requires_grad=False)
        self.lm_head = nn.Parameter(torch.empty(d["vocab"], self.D, **e), requires_grad=False)
        for n in ("cos", "sin", "causal"):  # RoPE's tables and the causal mask (LM.setup)
            self.register_buffer(n, None, persistent=False)
        self.batch = self.ctx = 0

    def load(self, P):
        """Parameters by stg's names (any float dtype; cast to the model's)."""
        with torch.no_grad():
            self.tok_emb.copy_(P["tok_emb"])
            for i, b in enumerate(self.blocks):
                p = lambda n: P[f"blocks.{i}.{n}"].to(self.device)
                b.ln1.copy_(p("ln1")); b.wo.copy_(p("wo")); b.ln2.copy_(p("ln2")); b.w2.copy_(p("w2"))
                b.wqkv.copy_(torch.cat((p("wq"), p("wk"), p("wv")), 0))
                b.w13.copy_(torch.cat((p("w1"), p("w3")), 0))
            self.ln_f.copy_(P["ln_f"]); self.lm_head.copy_(P["lm_head"])

    def setup(self, batch, ctx):
        """The static state: a zeroed KV cache per layer (batch, heads, ctx, head_dim), RoPE's tables
        and the causal mask rows for ctx positions. Marked as static addresses for CUDA graphs."""
        self.batch, self.ctx = batch, ctx
        for b in self.blocks:
            b.kc = b.vc = None  # free the old cache first
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        for b in self.blocks:
            b.kc = torch.zeros(batch, self.H, ctx, self.Dh, device=self.device, dtype=self.dtype)
            b.vc = torch.zeros_like(b.kc)
        tab = torch.float64 if self.dtype == torch.float64 else torch.float32
        k = torch.arange(self.Dh // 2, dtype=torch.float64)
        ang = torch.arange(ctx, dtype=torch.float64)[:, None] * torch.pow(torch.tensor(10000.0, dtype=torch.float64), -2.0 * k / self.Dh)
        self.cos = torch.cos(ang).to(self.device, tab)
        self.sin = torch.sin(ang).to(self.device, tab)
        self.causal = torch.ones(ctx, ctx, dtype=torch.bool, device=self.device).tril()
        if hasattr(torch, "_dynamo") and hasattr(torch._dynamo, "mark_static_address"):
            for t in [self.cos, self.sin, self.causal] + [c for b in self.blocks for c in (b.kc, b.vc)]:
                torch._dynamo.mark_static_address(t)

    def attend(self, q, k, v, mask=None, causal=False):
        # q (B, H, Sq, Dh), k, v (B, H, Sk, Dh); mask (Sq, Sk) bool, True where attended
        if self.attn == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=None if causal else mask[None, None], is_causal=causal)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.Dh)
        if causal:
            Sq, Sk = q.shape[-2], k.shape[-2]
            mask = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
        return torch.softmax(s.float() if s.dtype == torch.bfloat16 else s, -1).to(v.dtype) @ v

    def layer(self, i, x, cos, sin, at=None, verify=None):
        """One block over x (B, S, D) at positions given by cos/sin rows. at: the decode position (a
        device tensor of one element): K, V written there and attention over the cache up to it;
        None: a prefill from position 0 (K, V written at 0..S-1 unless verify, which instead
        compares them with the cache's rows verify = (lo, hi) and returns the relative error)."""
        b = self.blocks[i]
        B, S, D = x.shape
        H, Dh = self.H, self.Dh
        h = rmsnorm(x, b.ln1)
        q, k, v = F.linear(h, b.wqkv).view(B, S, 3, H, Dh).unbind(2)
        q, k = rope_rotate(q, cos, sin), rope_rotate(k, cos, sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, S, Dh)
        err = None
        if at is not None:
            b.kc[:, :, at] = k
            b.vc[:, :, at] = v
            o = self.attend(q, b.kc, b.vc, mask=self.causal[at])
        else:
            if verify is not None:
                lo, hi = verify
                err = max(rel_err(b.kc[:, :, lo:hi], k[:, :, lo:hi]), rel_err(b.vc[:, :, lo:hi], v[:, :, lo:hi]))
            else:
                b.kc[:, :, :S] = k
                b.vc[:, :, :S] = v
            o = self.attend(q, k, v, causal=True)
        x = x + F.linear(o.transpose(1, 2).reshape(B, S, D), b.wo)
        h2 = rmsnorm(x, b.ln2)
        g, u = F.linear(h2, b.w13).chunk(2, -1)
        return x + F.linear(F.silu(g) * u, b.w2), err

    def head(self, x):
        return F.linear(rmsnorm(x, self.ln_f), self.lm_head)

    def prefill(self, tokens, all_logits=False):
        """tokens (B, P) from position 0: fills the cache's first P rows; the logits of every position
        (all_logits) or of the last."""
        S = tokens.shape[1]
        x = F.embedding(tokens, self.tok_emb)
        for i in range(len(self.blocks)):
            x, _ = self.layer(i, x, self.cos[:S], self.sin[:S])
        return self.head(x if all_logits else x[:, -1:])

    def verify(self, tokens, lo, hi):
        """A prefill of tokens that writes nothing: the worst relative error between the K and V it
        computes at positions lo..hi-1 and what the cache holds there (what the decode steps wrote),
        and its logits at every position."""
        S = tokens.shape[1]
        x = F.embedding(tokens, self.tok_emb)
        worst = 0.0
        for i in range(len(self.blocks)):
            x, e = self.layer(i, x, self.cos[:S], self.sin[:S], verify=(lo, hi))
            worst = max(worst, e)
        return worst, self.head(x)

    def step(self, tok, pos):
        """One decode step: tok (B, 1) the tokens at position pos (a one-element device tensor);
        returns the logits (B, V) of the next token."""
        x = F.embedding(tok, self.tok_emb)
        cos, sin = self.cos[pos], self.sin[pos]
        for i in range(len(self.blocks)):
            x, _ = self.layer(i, x, cos, sin, at=pos)
        return self.head(x)[:, -1]


def rel_err(a, ref):
    a, ref = a.double(), ref.double()
    if torch.isnan(a).any() or torch.isnan(ref).any():
        return math.inf
    den = ref.abs().max().item()
    return (a - ref).abs().max().item() / (den if den > 0 else 1.0)


# ---- the independent full forward (float64, stg's names, nothing cached) -----------------------

def ref_forward(P, tokens, d):
    """Logits (B, S, V) of the CS336 LM over tokens (B, S): written out, one weight per name."""
    B, S = tokens.shape
    H, D = d["n_heads"], d["d_model"]
    Dh = D // H

    def norm(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w

    def rope(x):  # (B, S, H, Dh)
        out = torch.empty_like(x)
        for k in range(Dh // 2):
            ang = torch.arange(S, dtype=torch.float64) * (10000.0 ** (-2.0 * k / Dh))
            c, s = torch.cos(ang)[None, :, None], torch.sin(ang)[None, :, None]
            out[..., 2 * k] = x[..., 2 * k] * c - x[..., 2 * k + 1] * s
            out[..., 2 * k + 1] = x[..., 2 * k] * s + x[..., 2 * k + 1] * c
        return out

    x = P["tok_emb"][tokens]
    future = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    for i in range(d["n_layers"]):
        p = lambda n: P[f"blocks.{i}.{n}"]
        h = norm(x, p("ln1"))
        q = rope((h @ p("wq").T).reshape(B, S, H, Dh)).permute(0, 2, 1, 3)
        k = rope((h @ p("wk").T).reshape(B, S, H, Dh)).permute(0, 2, 1, 3)
        v = (h @ p("wv").T).reshape(B, S, H, Dh).permute(0, 2, 1, 3)
        w = torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(Dh)).masked_fill(future, float("-inf")), -1)
        x = x + (w @ v).permute(0, 2, 1, 3).reshape(B, S, D) @ p("wo").T
        h2 = norm(x, p("ln2"))
        a, b = h2 @ p("w1").T, h2 @ p("w3").T
        x = x + (a / (1 + torch.exp(-a)) * b) @ p("w2").T
    return norm(x, P["ln_f"]) @ P["lm_head"].T


# ---- decoding ------------------------------------------------------------------------------------

def greedy(model, prompt, n, decode_fn, clock, logits_out=None):
    """prompt (B, P) -> the n new tokens (B, n): a prefill, then n - 1 decode steps. Returns the ids,
    the prefill's seconds and the decode steps' (clock: make_clock's pair). decode_fn(tok, pos) -> next tokens (B, 1) or, when
    logits_out is a list, the logits (B, V) (appended there)."""
    B, P = prompt.shape
    dev = prompt.device
    ids = torch.empty(B, n, dtype=torch.long, device=dev)
    pos = torch.full((1,), P, dtype=torch.long, device=dev)
    tok = torch.empty(B, 1, dtype=torch.long, device=dev)
    mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    sync, seconds = clock
    t0 = sync()
    lg = model.prefill(prompt, all_logits=logits_out is not None)
    if logits_out is not None:
        logits_out.append(lg)
        lg = lg[:, -1:]
    tok.copy_(lg[:, -1].argmax(-1, keepdim=True))
    ids[:, 0] = tok[:, 0]
    t1 = sync()
    for k in range(1, n):
        if mark:
            mark()
        out = decode_fn(tok, pos)
        if logits_out is not None:
            logits_out.append(out.clone())
            out = out.argmax(-1, keepdim=True)
        tok.copy_(out)
        ids[:, k] = out[:, 0]
        pos.add_(1)
    t2 = sync()
    return ids, seconds(t0, t1), seconds(t1, t2)


def make_clock(device):
    """(sync, seconds): sync() waits for the device and marks the time (a CUDA event on cuda);
    seconds(a, b) is the time between two marks."""
    if device.type == "cuda":
        def sync():
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            ev.synchronize()
            return ev
        def seconds(a, b):
            return a.elapsed_time(b) / 1e3
    else:
        def sync():
            return time.perf_counter()
        def seconds(a, b):
            return b - a
    return sync, seconds


def run_bench(a, d, device, dtype):
    if a.prompt_ids:
        try:
            with open(a.prompt_ids, "rb") as f:
                raw = f.read()
        except OSError as e:
            die(f"--prompt-ids {a.prompt_ids}: {e.strerror}")
        if len(raw) % 2 or not raw:
            die(f"--prompt-ids {a.prompt_ids}: expected uint16 little-endian tokens (stg tokens), {len(raw)} bytes")
        row = list(struct.unpack(f"<{len(raw) // 2}H", raw))
        if max(row) >= d["vocab"]:
            die(f"--prompt-ids {a.prompt_ids}: token {max(row)} is not below the vocab {d['vocab']}")
        a.prompt = len(row)
    ctx = a.ctx if a.ctx else a.prompt + a.new
    if a.prompt < 1 or a.new < 1:
        die("--prompt and --new must be at least 1")
    if a.prompt + a.new > ctx:
        die(f"the prompt's {a.prompt} tokens + --new {a.new} are more than --ctx {ctx}")
    if a.compile and not hasattr(torch, "compile"):
        die(f"--compile needs torch.compile (PyTorch 2); this is PyTorch {torch.__version__}: use --no-compile")
    if a.attn == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        die(f"--attn sdpa needs PyTorch 2 (this is {torch.__version__}): use --attn math")
    t = time.perf_counter()
    model = LM(d, device, dtype, a.attn)
    if a.init:
        model.load(read_safetensors(a.init, param_shapes(d)))
    else:
        model.load(random_params(d, a.seed, device, dtype))
    init_s = time.perf_counter() - t
    nparams = sum(p.numel() for p in model.parameters())
    clock = make_clock(device)
    gen = torch.Generator().manual_seed(a.seed)
    bad = 0
    for B in a.batches:
        if a.prompt_ids:
            prompt = torch.tensor(row, dtype=torch.long).repeat(B, 1).to(device)
        else:
            prompt = torch.randint(0, d["vocab"], (B, a.prompt), generator=gen).to(device)
        model.setup(B, ctx)
        if a.compile:
            torch._dynamo.reset()
            step = lambda tok, pos: model.step(tok, pos).argmax(-1, keepdim=True)
            decode_fn = torch.compile(step, mode=a.compile_mode, fullgraph=True, dynamic=False)
        else:
            decode_fn = lambda tok, pos: model.step(tok, pos).argmax(-1, keepdim=True)
        with torch.no_grad():
            t = time.perf_counter()
            greedy(model, prompt, min(a.new, a.warmup + 1), decode_fn, clock)  # compiles, records the graph
            warm_s = time.perf_counter() - t
            ids, pf, dc = greedy(model, prompt, a.new, decode_fn, clock)
        rec = dict(peer="torch", mode=(f"compile:{a.compile_mode}" if a.compile else "eager"), attn=a.attn,
                   model=a.size or a.model or "dims", params=nparams, batch=B, prompt=a.prompt, new=a.new, ctx=ctx,
                   dtype=a.dtype, decode_steps=a.new - 1)
        rec.update(prefill_ms=round(pf * 1e3, 3), decode_ms=round(dc * 1e3, 3),
                   decode_tokens_per_s=round(B * (a.new - 1) / dc, 3) if a.new > 1 and dc > 0 else 0.0)
        rec.update(device=(torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"),
                   torch=torch.__version__, init_s=round(init_s, 2), warmup_s=round(warm_s, 2))
        if a.verify:
            with torch.no_grad():
                seq = torch.cat((prompt, ids[:, :-1]), 1)
                err, lg = model.verify(seq, a.prompt, a.prompt + a.new - 1)
                chain = lg[:, a.prompt - 1:].argmax(-1)
                agree = (chain == ids).double().mean().item()
            rec.update(verify_kv_rel_err=float(f"{err:.3e}"), verify_token_agree=round(agree, 4))
        if device.type == "cuda":
            rec["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        if a.print_ids:
            rec["ids"] = ids.tolist()
        print(json.dumps(rec), flush=True)
        if a.verify and not rec["verify_kv_rel_err"] < a.verify_tol:
            print(f"torch_decode.py: batch {B}: the cache the decode steps wrote is not what a prefill of the same tokens "
                  f"computes (rel err {rec['verify_kv_rel_err']:.3e} above {a.verify_tol:g})", file=sys.stderr)
            bad = 1
    return bad


# ---- the checks --------------------------------------------------------------------------------

def check(a):
    """CPU, float64: decode logits vs full forwards at every position; greedy chain vs repeated full
    forwards; the verify path; then (with --stg) the greedy tokens against stg sample's."""
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    dev, dt = torch.device("cpu"), torch.float64
    d = resolve_dims(a)
    B, P, N = 3, 7, d["ctx"] - 7
    fails, tol = 0, 1e-10
    P64 = random_params(d, a.seed, dev, dt)
    paths = ["math"] + (["sdpa"] if hasattr(F, "scaled_dot_product_attention") else [])
    prompt = torch.randint(0, d["vocab"], (B, P), generator=torch.Generator().manual_seed(a.seed + 1))
    # the argmax chain of repeated full forwards
    seq = prompt.clone()
    with torch.no_grad():
        for _ in range(N):
            nxt = ref_forward(P64, seq, d)[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat((seq, nxt), 1)
        full = ref_forward(P64, seq, d)  # (B, P + N, V): row t predicts token t + 1
    for attn in paths:
        model = LM(d, dev, dt, attn)
        model.load(P64)
        model.setup(B, d["ctx"])
        logits = []
        with torch.no_grad():
            ids, _, _ = greedy(model, prompt, N, lambda tok, pos: model.step(tok, pos), make_clock(dev), logits_out=logits)
            e_pre = rel_err(logits[0], full[:, :P])
            e_dec = max(rel_err(lg, full[:, P + k]) for k, lg in enumerate(logits[1:]))
            same = torch.equal(ids, seq[:, P:])
            e_ver, vlg = model.verify(seq[:, :-1], P, P + N - 1)
            e_vlg = rel_err(vlg, full[:, :-1])
        ok = e_pre <= tol and e_dec <= tol and same and e_ver <= tol and e_vlg <= tol
        fails += not ok
        print(f"check attn={attn}: batch {B}, prompt {P}, {N} new, dims {d}: prefill logits rel err {e_pre:.2e}, "
              f"{N - 1} decode steps' logits vs full forwards {e_dec:.2e} (tolerance {tol:g}); greedy tokens "
              f"{'equal' if same else 'DIFFER from'} the argmax chain of repeated full forwards; verify: cache "
              f"{e_ver:.2e}, logits {e_vlg:.2e}: {'ok' if ok else 'FAIL'}")
    if a.stg:
        fails += check_stg(a)
    print(f"torch_decode.py --check: {'FAILED' if fails else 'passed'}")
    return 1 if fails else 0


def check_stg(a):
    """Greedy tokens of stg sample (CPU, fp64) vs this peer's from the same checkpoint and prompt."""
    model_path = os.path.join(ROOT, "models", "tiny.yaml")
    d = model_dims(model_path)
    n, B = 16, 2
    with tempfile.TemporaryDirectory() as tmp:
        def sh(args):
            r = subprocess.run(args, capture_output=True, text=True)
            if r.returncode:
                print(f"check stg: {' '.join(args)}: exit {r.returncode}\n{r.stderr[-2000:]}")
            return r
        ck = os.path.join(tmp, "ck")
        if sh([a.stg, "train", model_path, "--steps", "2", "--ckpt", ck, "--device", "cpu", "--seed", str(a.seed)]).returncode:
            return 1
        ckpt = os.path.join(ck, "ckpt.safetensors")
        row = torch.randint(0, d["vocab"], (11,), generator=torch.Generator().manual_seed(a.seed + 2)).tolist()
        pf = os.path.join(tmp, "prompt.bin")
        with open(pf, "wb") as f:
            f.write(struct.pack(f"<{len(row)}H", *row))
        r = sh([a.stg, "sample", model_path, "--init", ckpt, "--prompt-ids", pf, "-n", str(n), "--batch", str(B),
                "--temperature", "0", "--json", "--device", "cpu", "--precision", "fp64"])
        if r.returncode:
            return 1
        stg_ids = json.loads(r.stdout)["ids"]
        P64 = read_safetensors(ckpt, param_shapes(d))
    model = LM(d, torch.device("cpu"), torch.float64, "math")
    model.load(P64)
    model.setup(B, d["ctx"])
    prompt = torch.tensor(row).repeat(B, 1)
    logits = []
    with torch.no_grad():
        ids, _, _ = greedy(model, prompt, n, lambda tok, pos: model.step(tok, pos), make_clock(torch.device("cpu")), logits_out=logits)
    top2 = [lg[:, -1] if lg.dim() == 3 else lg for lg in logits]
    gap = min((t.topk(2, -1).values[:, 0] - t.topk(2, -1).values[:, 1]).min().item() for t in top2)
    same = ids.tolist() == stg_ids
    print(f"check stg: {a.stg} sample (cpu, fp64, greedy) from a 2-step checkpoint of models/tiny.yaml, prompt {len(row)} ids, "
          f"batch {B}, {n} new: tokens {'equal' if same else 'DIFFER'} (smallest top-2 logit gap {gap:.2e})")
    if not same:
        print(f"  stg   {stg_ids}\n  torch {ids.tolist()}")
    return 0 if same else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", help="small, medium, large, xl, 2.7B (models/cs336/SIZE.yaml) or tiny")
    ap.add_argument("--model", help="a model file (its dims: line; lm.yaml's through include:)")
    for k in DIM_KEYS:
        ap.add_argument("--" + k.replace("_", "-"), dest=k, type=int,
                        help="the KV cache's positions (default prompt + new)" if k == "ctx" else "overrides the model file's")
    ap.add_argument("--batch", default="1", help="sequences decoded together; a comma list runs each in turn (e.g. 1,64)")
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens (random ids from --seed)")
    ap.add_argument("--prompt-ids", help="the prompt from a file of uint16 little-endian ids (stg tokens); every sequence gets it")
    ap.add_argument("--new", type=int, default=512, help="new tokens per sequence (the prefill draws the first)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when there is one")
    ap.add_argument("--dtype", choices=tuple(DTYPES), default=None, help="default bf16 on cuda, fp32 on cpu")
    ap.add_argument("--compile", dest="compile", action="store_true", default=None, help="torch.compile the decode step (default on cuda)")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="eager decode steps")
    ap.add_argument("--compile-mode", default="reduce-overhead", help="torch.compile mode (default reduce-overhead: CUDA graphs)")
    ap.add_argument("--attn", choices=("sdpa", "math"), default="sdpa", help="scaled_dot_product_attention, or written out")
    ap.add_argument("--init", help="parameters from a safetensors file by stg's names (a checkpoint); default random from --seed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=4, help="decode steps of the warm-up pass (default 4)")
    ap.add_argument("--no-verify", dest="verify", action="store_false",
                    help="skip the check that the decode steps' cache equals a prefill of the same tokens")
    ap.add_argument("--verify-tol", type=float, default=None, help="its tolerance (default 5e-2 bf16, 1e-4 fp32, 1e-10 fp64)")
    ap.add_argument("--print-ids", action="store_true", help="add the new ids to the JSON")
    ap.add_argument("--check", action="store_true", help="the correctness checks (CPU, float64, tiny dims)")
    ap.add_argument("--stg", help="with --check: an stg binary to compare the greedy tokens with")
    a = ap.parse_args()
    if a.check:
        return check(a)
    if a.stg:
        die("--stg goes with --check")
    try:
        a.batches = [int(b) for b in a.batch.split(",")]
    except ValueError:
        die(f"--batch {a.batch}: expected a number or a comma list of numbers")
    if min(a.batches) < 1:
        die("--batch must be at least 1")
    if a.device is None:
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.device == "cuda" and not torch.cuda.is_available():
        die("--device cuda: PyTorch sees no CUDA device")
    if a.dtype is None:
        a.dtype = "bf16" if a.device == "cuda" else "fp32"
    if a.compile is None:
        a.compile = a.device == "cuda"
    if a.verify_tol is None:
        a.verify_tol = {"bf16": 5e-2, "fp32": 1e-4, "fp64": 1e-10}[a.dtype]
    d = resolve_dims(a)
    return run_bench(a, d, torch.device(a.device), DTYPES[a.dtype])


if __name__ == "__main__":
    sys.exit(main())
