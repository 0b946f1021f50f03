#!/usr/bin/env python3
"""The PyTorch side of tools/bench_suite.py: the model of ../shared/peers/torch_lm.py (copied to
peer/torch_lm.py) timed the way `stg bench` times stg: forward (with the loss), forward+backward, and
the full step (forward, cross-entropy, backward, fused AdamW), a pair of CUDA events around every
iteration, every iteration's time kept (times_ms, warm-up ones first).

One process per model size: the model and its AdamW state are made once, on the GPU, and reused for
every ctx and mode. Modes: fp32 (eager, TF32 off), bf16 (eager, autocast to bf16), bf16c (autocast,
the whole model torch.compile'd with static shapes: one compilation per ctx), bf16cg (the same with
mode="reduce-overhead": the compiled step replayed as CUDA graphs). bf16c and bf16cg are the
strongest peer of ../shared/peers/NUMBERS.md; the report takes the faster of the two per cell.
Attention is scaled_dot_product_attention (torch_lm.py --flash) with its backend pinned by --sdpa
(default cudnn, cuDNN's fused attention) in the bf16 modes; fp32 runs on PyTorch's default backends
(cuDNN's fused attention takes no fp32). Out-of-memory cells are caught and written as {"error": "OOM"}.

Usage: tools/bench_peer.py --peer peer/torch_lm.py --size small --ctx 128,256,512,1024
         --modes fp32,bf16,bf16c,bf16cg --what forward,forward-backward,step [--step-only bf16] [--sdpa cudnn]
         [--warmup 5 --iters 10] [--fp32-warmup N --fp32-iters N] [--mem-ctx 128,256,512] --out F.jsonl
--mem-ctx: before anything else, the peak bytes of an inference forward (torch.no_grad) at those
ctx values, fp32 and bf16 autocast (CS336's "forward only" memory question).
"""
import argparse, gc, importlib.util, json, math, statistics, sys, time


def load_peer(path):
    spec = importlib.util.spec_from_file_location("torch_lm", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", default="peer/torch_lm.py")
    ap.add_argument("--size", required=True)
    ap.add_argument("--ctx", default="512")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--modes", default="fp32,bf16,bf16c,bf16cg")
    ap.add_argument("--sdpa", default="cudnn", choices=["default", "flash", "cudnn", "efficient"],
                    help="the fused attention backend of the bf16 modes")
    ap.add_argument("--what", default="forward,forward-backward,step")
    ap.add_argument("--step-only", default="", help="modes measured for the full step only")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--fp32-warmup", type=int, default=None)
    ap.add_argument("--fp32-iters", type=int, default=None)
    ap.add_argument("--mem-ctx", default="")
    ap.add_argument("--demo", action="store_true", help="mark the records as the out-of-memory demonstration")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t_start = time.perf_counter()
    try:
        peer = load_peer(a.peer)
    except ImportError as e:  # no PyTorch here: say so, as data, and let the suite carry on
        with open(a.out, "a") as f:
            f.write(json.dumps({"size": a.size, "error": f"PyTorch peer unavailable: {e}"}) + "\n")
        print(f"bench_peer: PyTorch peer unavailable: {e}", file=sys.stderr)
        return 3
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        with open(a.out, "a") as f:
            f.write(json.dumps({"size": a.size, "error": "PyTorch sees no CUDA device"}) + "\n")
        return 3
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    V = peer.VOCAB
    dev = torch.device("cuda")
    out = open(a.out, "a")
    base = dict(size=a.size, batch=a.batch, device=torch.cuda.get_device_name(), torch=torch.__version__, flash=True)

    def pin_sdpa(mode):
        """The attention backends a mode runs with (global flags, read at call and at trace time)."""
        b = a.sdpa if mode.startswith("bf16") else "default"
        torch.backends.cuda.enable_flash_sdp(b in ("default", "flash"))
        torch.backends.cuda.enable_mem_efficient_sdp(b in ("default", "efficient"))
        torch.backends.cuda.enable_cudnn_sdp(b in ("default", "cudnn"))
        torch.backends.cuda.enable_math_sdp(b == "default")
        return b
    if a.demo:
        base["demo"] = True

    def emit(r):
        out.write(json.dumps(r) + "\n")
        out.flush()
        print(json.dumps({k: v for k, v in r.items() if k not in ("times_ms",)}), flush=True)

    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device(dev):
        model = peer.LM(**peer.SIZES[a.size], flash=True)
    torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    base.update(params=nparams)
    emit(dict(base, kind="setup", import_and_init_s=t0 - t_start, build_s=build_s))

    compiled = {}

    def forward_fn(mode):
        """The model as the mode runs it: eager, or compiled whole (static shapes; bf16cg with CUDA graphs)."""
        if mode not in ("bf16c", "bf16cg"):
            return model
        if mode not in compiled:
            compiled[mode] = (torch.compile(model, dynamic=False, mode="reduce-overhead") if mode == "bf16cg"
                              else torch.compile(model, dynamic=False))
        return compiled[mode]

    def tokens(ctx):
        g = torch.Generator(device=dev)
        g.manual_seed(ctx)
        x = torch.randint(0, V, (a.batch, ctx), device=dev, generator=g)
        y = torch.randint(0, V, (a.batch, ctx), device=dev, generator=g)
        return x, y

    def free():
        model.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.empty_cache()

    # CS336's "forward only" memory: an inference forward, before any gradient or AdamW state exists.
    for c in [int(s) for s in a.mem_ctx.split(",") if s]:
        x, y = tokens(c)
        for mode in ("fp32", "bf16"):
            r = dict(base, kind="forward_memory", ctx=c, mode=mode, sdpa=pin_sdpa(mode))
            try:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
                with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
                    logits = model(x)
                    loss = F.cross_entropy(logits.float().view(-1, V), y.view(-1))
                    del logits
                torch.cuda.synchronize()
                r.update(peak_alloc_bytes=torch.cuda.max_memory_allocated(), params_bytes=before,
                         peak_reserved_bytes=torch.cuda.max_memory_reserved(), loss=float(loss))
                del loss
            except torch.OutOfMemoryError:
                r.update(error="OOM")
            free()  # outside the handler: the failed forward's tensors are gone
            emit(r)

    step_only = set(s for s in a.step_only.split(",") if s)
    for c in [int(s) for s in a.ctx.split(",")]:
        x, y = tokens(c)
        for mode in a.modes.split(","):
            amp = mode.startswith("bf16")
            sdpa = pin_sdpa(mode)
            f = forward_fn(mode)
            warm = a.fp32_warmup if mode == "fp32" and a.fp32_warmup is not None else a.warmup
            iters = a.fp32_iters if mode == "fp32" and a.fp32_iters is not None else a.iters
            whats = ["step"] if mode in step_only else a.what.split(",")
            for what in whats:
                r = dict(base, kind="bench", ctx=c, mode=mode, what=what, warmup=warm, iters=iters, sdpa=sdpa)

                def it():
                    if mode == "bf16cg":  # a new replay: the previous iteration's outputs may be overwritten
                        torch.compiler.cudagraph_mark_step_begin()
                    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                        logits = f(x)
                    loss = F.cross_entropy(logits.float().view(-1, V), y.view(-1))
                    if what != "forward":
                        loss.backward()
                    if what == "step":
                        opt.step()
                        opt.zero_grad(set_to_none=True)
                    return loss

                try:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    times = []
                    w0 = time.perf_counter()
                    for i in range(warm + iters):
                        e0 = torch.cuda.Event(enable_timing=True)
                        e1 = torch.cuda.Event(enable_timing=True)
                        e0.record()
                        loss = it()
                        e1.record()
                        torch.cuda.synchronize()
                        times.append(e0.elapsed_time(e1))
                        del loss
                        if what == "forward-backward":
                            model.zero_grad(set_to_none=True)
                    wall = time.perf_counter() - w0
                    t = times[warm:]
                    mean = statistics.fmean(t)
                    d, L = peer.SIZES[a.size]["d_model"], peer.SIZES[a.size]["num_layers"]
                    flops = 6 * nparams * a.batch * c + 12 * L * a.batch * c * c * d
                    if what == "forward":
                        flops /= 3
                    med = statistics.median(t)
                    r.update(times_ms=times, mean_ms=mean, std_ms=statistics.stdev(t) if len(t) > 1 else 0.0,
                             median_ms=med, min_ms=min(t), max_ms=max(t), first_ms=times[0], wall_s=wall,
                             tflops=flops / (med * 1e-3) / 1e12, peak_alloc_bytes=torch.cuda.max_memory_allocated(),
                             peak_reserved_bytes=torch.cuda.max_memory_reserved())
                except torch.OutOfMemoryError:
                    r.update(error="OOM")
                if mode in ("bf16c", "bf16cg"):  # how many graphs dynamo made so far in this process (one per ctx and mode)
                    try:
                        from torch._dynamo.utils import counters
                        r["dynamo_unique_graphs"] = int(counters["stats"]["unique_graphs"])
                    except (ImportError, KeyError, TypeError):
                        pass
                if "error" in r:  # outside the handler, so the failed iteration's tensors are gone
                    free()
                if what == "forward-backward":
                    model.zero_grad(set_to_none=True)
                emit(r)
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
