"""What the model-family references (gpt2_ref.py, llama3_ref.py) share: safetensors in and out,
the batch, parameter initialisation and the comparison with a `stg step --dump`.

Plain PyTorch and numpy; float64 on the CPU by default (--dtype float32 and --device cuda for timing).
"""
import argparse, json, math, struct, sys
import numpy as np
import torch

SAFETENSORS_TYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32, "BF16": None}


def read_safetensors(path):
    """name -> numpy array (float32, float64, float16 or int32; bf16 widened to float32)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        a, b = d["data_offsets"]
        if d["dtype"] == "BF16":
            u = np.frombuffer(data[a:b], dtype=np.uint16).astype(np.uint32) << 16
            out[name] = u.view(np.float32).reshape(d["shape"]).copy()
        else:
            out[name] = np.frombuffer(data[a:b], dtype=SAFETENSORS_TYPES[d["dtype"]]).reshape(d["shape"]).copy()
    return out


def write_safetensors(path, tensors):
    """tensors: name -> numpy array (float64 written as F64, float32 as F32), in the given order."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dt = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[a.dtype]
        b = a.tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def parse_dims(s):
    return {k: int(v) for k, v in (kv.split("=") for kv in s.split(",") if kv)}


def init_params(shapes, seed, perturb=0.0):
    """shapes: name -> (shape, init) with init ("normal", std) | ("ones",) | ("zeros",): the model
    files' initialisers (N(0, std²), ones, zeros), in float64, from numpy's generator `seed`.
    perturb > 0 adds N(0, perturb²) to the ones and zeros (norm gains and biases), so that a
    comparison exercises them."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (shape, init) in shapes.items():
        if init[0] == "normal":
            out[name] = rng.normal(0.0, init[1], size=shape)
        elif init[0] in ("ones", "zeros"):
            out[name] = np.full(shape, 1.0 if init[0] == "ones" else 0.0)
            if perturb > 0:
                out[name] += rng.normal(0.0, perturb, size=shape)
        else:
            raise ValueError(f"unknown init {init}")
    return out


def common_args(doc):
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--dims", required=True, help="the model's dims, e.g. vocab=256,d_model=64,... (as --set gives stg)")
    ap.add_argument("--params", help="parameters by stg name (safetensors)")
    ap.add_argument("--batch", help="int32 [2, B, S] .npy: tokens, targets")
    ap.add_argument("--dump", help="a `stg step --dump` to compare with")
    ap.add_argument("--tol", type=float, default=1e-10, help="largest relative error accepted (default 1e-10: fp64)")
    ap.add_argument("--make-params", metavar="P.safetensors", help="write parameters of the family's init (float64) and exit")
    ap.add_argument("--make-batch", metavar="B.npy", help="write a random batch and exit")
    ap.add_argument("--batch-shape", default="2,37", help="B,S for --make-batch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--perturb", type=float, default=0.0, help="--make-params: add N(0, x^2) to the ones and zeros")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--fused-head", action="store_true", help="the stg step ran with fused_head=on (no logits in the dump)")
    return ap


def run(family, doc):
    """The command line of a family module: `family` has shapes(d) -> {name: (shape, init)} and
    forward(P, tokens, targets, d) -> (loss, logits)."""
    a = common_args(doc).parse_args()
    d = family.complete_dims(parse_dims(a.dims))
    if a.make_params or a.make_batch:
        if a.make_params:
            write_safetensors(a.make_params, init_params(family.shapes(d), a.seed, a.perturb))
        if a.make_batch:
            B, S = (int(t) for t in a.batch_shape.split(","))
            rng = np.random.default_rng(a.seed + 1)
            np.save(a.make_batch, rng.integers(0, d["vocab"], size=(2, B, S), dtype=np.int32))
        return 0
    if not a.params or not a.batch:
        print("need --params and --batch (or --make-params / --make-batch)", file=sys.stderr)
        return 2
    dt = torch.float64 if a.dtype == "float64" else torch.float32
    raw = read_safetensors(a.params)
    want = family.shapes(d)
    P = {}
    for n, (shape, _) in want.items():
        if n not in raw:
            print(f"{a.params} has no tensor '{n}'", file=sys.stderr)
            return 2
        if list(raw[n].shape) != list(shape):
            print(f"{a.params}: '{n}' is {list(raw[n].shape)}, expected {list(shape)}", file=sys.stderr)
            return 2
        P[n] = torch.tensor(raw[n], dtype=dt, requires_grad=True)
    bt = np.load(a.batch)
    tokens, targets = torch.tensor(bt[0], dtype=torch.long), torch.tensor(bt[1], dtype=torch.long)
    loss, logits = family.forward(P, tokens, targets, d)
    loss.backward()
    print(f"reference loss {loss.item():.12f}")
    if not a.dump:
        return 0
    got = read_safetensors(a.dump)
    worst, bad, n_cmp = 0.0, [], 0

    def cmp(name, ref, val):
        nonlocal worst, n_cmp
        ref = np.asarray(ref, dtype=np.float64)
        val = np.asarray(val, dtype=np.float64).reshape(ref.shape)
        err = float(np.max(np.abs(ref - val)) / max(float(np.max(np.abs(ref))), 1e-300))
        worst = max(worst, err)
        n_cmp += 1
        if not err <= a.tol:
            bad.append((name, err))
        return err

    print(f"loss   rel err {cmp('loss', loss.item(), got['loss']):.3e}")
    if "logits" in got:
        print(f"logits rel err {cmp('logits', logits.detach().numpy(), got['logits']):.3e}")
    elif not a.fused_head:
        bad.append(("logits (missing from the dump)", math.inf))
    for n, p in P.items():
        if n not in got:
            bad.append((f"{n} (missing from the dump)", math.inf))
            continue
        cmp(n, p.grad.numpy(), got[n])
    what = "loss, logits" if "logits" in got else "loss (no logits: fused head)"
    print(f"worst relative error over {n_cmp} tensors ({what}, {len(P)} gradients): {worst:.3e} (tolerance {a.tol:g})")
    for n, e in bad:
        print(f"  FAIL {n}: {e:.3e}")
    return 1 if bad else 0


def causal_attention(q, k, v):
    """q (B, Hq, S, Dh), k and v (B, Hkv, S, Dh) with Hq a multiple of Hkv: query head h reads kv
    head h // (Hq / Hkv); softmax(q kᵀ / sqrt(Dh)) v under a causal mask, written out."""
    B, Hq, S, Dh = q.shape
    g = Hq // k.shape[1]
    if g > 1:
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    sc = (q @ k.transpose(-1, -2)) / math.sqrt(Dh)
    return torch.softmax(sc.masked_fill(mask, float("-inf")), -1) @ v


def mean_cross_entropy(logits, targets):
    """The mean over rows of logsumexp(row) - row[target], written out."""
    V = logits.shape[-1]
    z = logits.reshape(-1, V)
    t = targets.reshape(-1)
    lse = torch.logsumexp(z, -1)
    return (lse - z.gather(1, t[:, None])[:, 0]).mean()
