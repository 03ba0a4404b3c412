#!/usr/bin/env python3
"""Whole graph-mode decode steps with the grouped and fused MoE schedules and with FP8 and int4
weights (issue 16): the validation targets of validation/moe_grid.md.

    python3 validation/measure_moe_steps.py --out $OUT/h200_moe_steps.csv [--dry] [--budget-s 400]

The step is validation/measure_steps.py's decode step (same model shapes, random weights,
flash SDPA, fixed uniform top-k routing, no RoPE) with one thing changed per variant:
- `grouped-bf16`: the MoE block is calibration/moe_impls.grouped_moe (torchtitan's schedule);
- `fused-bf16`: calibration/moe_impls.fused_moe (the Triton fused MoE, vLLM's design);
- `per-expert-fp8`: the per-expert loop with every attention and expert linear in FP8
  (cast + torch._scaled_mm, per-tensor scales); router and LM head bf16;
- `per-expert-int4`: the same linears int4 weight-only, group 128 (torch._weight_int4pack_mm).
Writes the public CSV (the validation columns plus moe_schedule, weights, split) and a JSONL
beside it with every replay. The grid and its held-out third were fixed before calibrating.
"""

import argparse
import csv
import gc
import json
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "calibration"))
import measure_steps as ms  # noqa: E402
import moe_impls as mi  # noqa: E402
from device_env import T_START, log, smi_line, triton_version  # noqa: E402

# (variant, batch, context, split): fixed in validation/moe_grid.md before any calibration
GRID = {
    "mixtral-8x7b": [
        ("grouped-bf16", 1, 512, "cal"), ("grouped-bf16", 4, 4096, "held"), ("grouped-bf16", 16, 512, "cal"),
        ("grouped-bf16", 64, 4096, "cal"), ("grouped-bf16", 128, 512, "held"), ("grouped-bf16", 256, 512, "cal"),
        ("fused-bf16", 1, 512, "cal"), ("fused-bf16", 4, 4096, "held"), ("fused-bf16", 16, 512, "cal"),
        ("fused-bf16", 64, 4096, "cal"), ("fused-bf16", 128, 512, "held"), ("fused-bf16", 256, 512, "cal"),
        ("per-expert-fp8", 1, 512, "cal"), ("per-expert-fp8", 8, 4096, "held"), ("per-expert-fp8", 32, 512, "cal"),
        ("per-expert-int4", 1, 512, "cal"), ("per-expert-int4", 4, 2048, "held"), ("per-expert-int4", 16, 512, "cal"),
    ],
    "qwen3-30b-a3b": [
        ("grouped-bf16", 1, 512, "cal"), ("grouped-bf16", 8, 4096, "held"), ("grouped-bf16", 32, 512, "cal"),
        ("grouped-bf16", 64, 2048, "cal"), ("grouped-bf16", 128, 2048, "held"), ("grouped-bf16", 256, 512, "cal"),
        ("fused-bf16", 1, 512, "cal"), ("fused-bf16", 8, 4096, "held"), ("fused-bf16", 32, 512, "cal"),
        ("fused-bf16", 64, 2048, "cal"), ("fused-bf16", 128, 2048, "held"), ("fused-bf16", 256, 512, "cal"),
        ("per-expert-fp8", 1, 512, "cal"), ("per-expert-fp8", 8, 4096, "held"), ("per-expert-fp8", 32, 512, "cal"),
        ("per-expert-int4", 1, 512, "cal"), ("per-expert-int4", 4, 2048, "held"), ("per-expert-int4", 16, 512, "cal"),
    ],
}
# --extra: a second grid chosen after the model was calibrated on GRID's `cal` rows and never
# used to set it (a test, as validation/data/h200_steps_extra.csv is for the per-expert rows);
# OLMoE-1B-7B (hwsim's olmoe-1b-7b shape) only here
EXTRA_GRID = {
    "mixtral-8x7b": [("grouped-bf16", 2, 2048, "extra"), ("grouped-bf16", 32, 8192, "extra"),
                     ("fused-bf16", 2, 2048, "extra"), ("fused-bf16", 32, 8192, "extra"),
                     ("per-expert-fp8", 4, 16384, "extra"), ("per-expert-fp8", 64, 2048, "extra"),
                     ("per-expert-int4", 2, 8192, "extra"), ("per-expert-int4", 8, 1024, "extra")],
    "qwen3-30b-a3b": [("grouped-bf16", 4, 8192, "extra"), ("grouped-bf16", 16, 1024, "extra"),
                      ("fused-bf16", 4, 8192, "extra"), ("fused-bf16", 16, 1024, "extra"),
                      ("per-expert-fp8", 2, 2048, "extra"), ("per-expert-fp8", 16, 8192, "extra"),
                      ("per-expert-int4", 2, 8192, "extra"), ("per-expert-int4", 8, 1024, "extra")],
    "olmoe-1b-7b": [("grouped-bf16", 1, 1024, "extra"), ("grouped-bf16", 16, 4096, "extra"),
                    ("grouped-bf16", 64, 1024, "extra"), ("fused-bf16", 1, 1024, "extra"),
                    ("fused-bf16", 16, 4096, "extra"), ("fused-bf16", 64, 1024, "extra")],
}
OLMOE = dict(L=16, d=2048, H=16, KVH=16, hd=128, vocab=50304, E=64, k=8, ff=1024, qk_norm=True, eps=1e-5)
DRY_GRID = [("grouped-bf16", 2, 16, "cal"), ("fused-bf16", 2, 16, "held"),
            ("per-expert-fp8", 2, 16, "cal"), ("per-expert-int4", 2, 16, "cal")]
VARIANT_ORDER = ["grouped-bf16", "fused-bf16", "per-expert-fp8", "per-expert-int4"]


def fixed_topk(cfg, ntok, dev, seed):
    """Per layer the (topi [T, k], topw [T, k]) of validation/measure_steps.make_routing's draw."""
    g = torch.Generator()
    g.manual_seed(seed)
    E, k = cfg["E"], cfg["k"]
    out = []
    for _ in range(cfg["L"]):
        choice = torch.rand(ntok, E, generator=g).argsort(dim=1)[:, :k]
        w = torch.rand(ntok, k, generator=g) + 0.05
        w = w / w.sum(1, keepdim=True)
        out.append((choice.to(dev), w.to(torch.bfloat16).to(dev)))
    return out


def make_moe(kind):
    def moe(x, h, lw, route, cfg):
        topi, topw = route
        ms.OPS("moe_" + kind)
        if kind == "grouped":
            y = mi.grouped_moe(h, lw["wr"], lw["w13_t"], lw["w2_t"], topi, topw, cfg["E"], cfg["k"], cfg["ff"])
        else:
            y = mi.fused_moe(h, lw["wr"], lw["w13"], lw["w2"], topi, topw, cfg["E"], cfg["k"], cfg["ff"])
        ms.OPS("add")
        return x + y
    return moe


def qmm(x, w):
    ms.OPS("gemm")
    if isinstance(w, mi.Fp8Weight):
        return mi.fp8_linear(x, w)
    if isinstance(w, mi.Int4Weight):
        return mi.int4_linear(x, w)
    return torch.matmul(x, w.t())


def quantize(W, fmt):
    """Attention (QKV, O) and expert linears to `fmt`, in place, freeing the bf16 copies;
    returns the stored bytes of all weights."""
    conv = (lambda w: mi.Fp8Weight(w)) if fmt == "fp8" else (lambda w: mi.Int4Weight(w, 128, triton_pack=False))
    total = 2 * (W.lnf.numel() + W.lm.numel())
    for lw in W.layers:
        for name in ("wqkv", "wo"):
            lw[name] = conv(lw[name])
        for name in ("w13", "w2"):
            lw[name] = [conv(w) for w in lw[name]]
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
        for v in lw.values():
            for t in (v if isinstance(v, list) else [v]):
                total += t.nbytes if not isinstance(t, torch.Tensor) else 2 * t.numel()
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--dry", action="store_true")
    ap.add_argument("--models", default="mixtral-8x7b,qwen3-30b-a3b")
    ap.add_argument("--variants", default=",".join(VARIANT_ORDER))
    ap.add_argument("--replays", type=int, default=15)
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--extra", action="store_true", help="the second grid (EXTRA_GRID), a test set")
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if not args.dry and dev != "cuda":
        sys.exit("no CUDA device: use --dry")
    if args.out is None:
        args.out = "/tmp/hwsim_dry/moe_steps_dry.csv" if args.dry else os.path.join(HERE, "h200_moe_steps.csv")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    jf = open(os.path.splitext(args.out)[0] + ".jsonl", "w")

    def jwrite(o):
        jf.write(json.dumps(o) + "\n")
        jf.flush()

    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        backend = ms.pick_sdpa_backend(dev)
    else:
        backend = "default (CPU)"
    jwrite({"part": "meta", "script": "validation/measure_moe_steps.py", "torch": torch.__version__,
            "triton": triton_version(), "sdpa_backend": backend, "dry": args.dry,
            "gpu": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
            "smi_before": smi_line() if dev == "cuda" else None, "grid_file": "validation/moe_grid.md"})
    fields = ["name", "hardware", "model", "phase", "batch", "context_tokens", "prompt_tokens", "kv_bits",
              "launch", "measured_ms", "moe_schedule", "weights", "split", "notes"]
    rows = []

    def write_csv():
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)

    models = ms.DRY_MODELS if args.dry else {**ms.MODELS, "olmoe-1b-7b": OLMOE}
    grids = EXTRA_GRID if args.extra else GRID
    orig_moe, orig_mm = ms.moe, ms.mm
    for model in args.models.split(","):
        cfg = models[model]
        grid = DRY_GRID if args.dry else grids.get(model, [])
        for variant in args.variants.split(","):
            cases = [c for c in grid if c[0] == variant]
            if not cases:
                continue
            if time.perf_counter() - T_START > args.budget_s:
                for c in cases:
                    jwrite({"part": "skipped", "model": model, "case": c, "reason": "time budget"})
                log(f"budget: skipping {model} {variant}")
                continue
            sched, fmt = variant.rsplit("-", 1)
            W = ms.Weights(cfg, dev, seed=0)
            wbytes = W.nbytes()
            try:
                if fmt != "bf16":
                    wbytes = quantize(W, fmt)
                for lw in W.layers:
                    if isinstance(lw["w13"], torch.Tensor):
                        lw["w13_t"], lw["w2_t"] = lw["w13"].transpose(1, 2), lw["w2"].transpose(1, 2)
            except Exception as e:
                log(f"FAIL {model} {variant} weights: {e!r}"[:300])
                jwrite({"part": "error", "model": model, "variant": variant, "error": repr(e)[:1500]})
                W = None
                gc.collect()
                continue
            ms.moe = make_moe(sched) if sched in ("grouped", "fused") else orig_moe
            ms.mm = qmm if fmt != "bf16" else orig_mm
            log(f"{model} {variant}: weights {wbytes / 1e9:.1f} GB")
            for _, b, ctx, split in cases:
                name = f"{model}-{variant}-decode-b{b}-l{ctx}-graph"
                if time.perf_counter() - T_START > args.budget_s:
                    jwrite({"part": "skipped", "name": name, "reason": "time budget"})
                    continue
                try:
                    g = torch.Generator(device=dev)
                    g.manual_seed(7)
                    route = (fixed_topk(cfg, b, dev, 1000 + b) if sched in ("grouped", "fused")
                             else ms.make_routing(cfg, b, dev, seed=1000 + b))
                    st = {"B": b, "ctx": ctx, "T": 0, "route": route,
                          "x": torch.randn((b, cfg["d"]), dtype=torch.bfloat16, device=dev, generator=g),
                          "cache": ms.make_cache(cfg, b, ctx, dev)}
                    fn = lambda: ms.decode_step(W, cfg, st)  # noqa: E731
                    if dev == "cuda":
                        times, info = ms.time_graph(fn, args.replays)
                    else:
                        times, info = ms.time_cpu(fn, 2)
                except Exception as e:
                    log(f"FAIL {name}: {e!r}"[:300])
                    jwrite({"part": "error", "name": name, "error": repr(e)[:2000]})
                    st = None
                    gc.collect()
                    torch.cuda.empty_cache() if dev == "cuda" else None
                    continue
                med, p10, p90 = ms.pct(times)
                jwrite({"part": "step", "name": name, "model": model, "variant": variant, "batch": b,
                        "context_tokens": ctx, "split": split, "ms": med, "p10": p10, "p90": p90,
                        "replays_ms": times, "weight_bytes": wbytes, **info})
                rows.append({"name": name, "hardware": "h200-sxm" if not args.dry else f"dry-{dev}",
                             "model": model, "phase": "decode", "batch": b, "context_tokens": ctx,
                             "prompt_tokens": 0, "kv_bits": 16, "launch": "graph",
                             "measured_ms": f"{med:.4f}", "moe_schedule": sched, "weights": fmt,
                             "split": split,
                             "notes": f"graph median of {len(times)} (p10 {p10:.3f} p90 {p90:.3f} ms); "
                                      f"ops {info['ops']}; fixed uniform top-k routing; no RoPE"
                                      + ("; attention and expert linears " + fmt + ", router and LM head bf16"
                                         if fmt != "bf16" else "")})
                write_csv()
                log(f"{name}: {med:.3f} ms (p10 {p10:.3f} p90 {p90:.3f}) ops {info['ops']}")
                st = None
                gc.collect()
                torch.cuda.empty_cache() if dev == "cuda" else None
            W = None
            ms.moe, ms.mm = orig_moe, orig_mm
            gc.collect()
            torch.cuda.empty_cache() if dev == "cuda" else None
    jwrite({"part": "meta_end", "smi_after": smi_line() if dev == "cuda" else None,
            "total_s": round(time.perf_counter() - T_START, 1)})
    jf.close()
    log(f"done: {len(rows)} rows -> {args.out}")


if __name__ == "__main__":
    main()
