"""Device time and launch shape of the small PyTorch kernels of the measured MoE schedule.

    python3 calibration/measure_small_kernels.py --out $OUT/h200_small_kernels.jsonl [--dry]
    python3 calibration/measure_small_kernels.py --blocks-sweep --out $OUT/h200_blocks_sweep.jsonl

The per-expert loop of validation/measure_steps.py issues, per expert, index_select, SiLU on
the gate half of the gate+up output (a strided view), the multiply by the up half, the scale
by the router weight (a [rows, 1] broadcast) and index_add_. Their cost at many rows decides
the large-batch and prefill steps, and the isolated element-wise rows of
measure_microbench.py use contiguous tensors, which PyTorch runs on a different (vectorised)
kernel. Here each op runs on the exact in-step layouts at 1..1024 rows, REPS times back to
back inside one CUDA graph (as in the step), and CUPTI gives each kernel's device time and
grid. Also FlashAttention decode (SDPA, GQA) over batch x context, with its split-KV combine.

One JSON object a line: part "small_kernel" or "decode_attention", the op and shape, and per
kernel name: count, median/p10/p90 device us, grid and block.
"""

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_env import flash_sdpa, jsonl_out, log, profile_graph  # noqa: E402

REPS = 20
ROWS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
MODELS = {"mixtral-8x7b": dict(d=4096, ff=14336, H=32, KVH=8, hd=128),
          "qwen3-30b-a3b": dict(d=2048, ff=768, H=32, KVH=4, hd=128)}
DRY = {"mixtral-8x7b": dict(d=256, ff=512, H=4, KVH=2, hd=64)}
ATTN_BATCH = [1, 4, 16, 64, 128]
ATTN_CTX = [128, 512, 2048, 4096, 16384]
SWEEP_BLOCKS_PER_SM = [0.5, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 32, 40, 48]
TI_BLOCK_ELEMS = 512      # elements per block of PyTorch's non-vectorised elementwise_kernel<128, 4>
SHARED_ATTENTION = [(1, 16384), (8, 4096), (8, 16384), (32, 4096), (32, 16384), (64, 8192)]


def profile_op(fn, sdpa_ctx=None):
    """Kernels of one replay of a graph holding `fn` (which issues the op REPS times)."""
    return profile_graph(fn, sdpa_ctx or torch.no_grad)


def summarise(kernels):
    """Per kernel name: count, median/p10/p90 duration (us), launch shape."""
    by = {}
    for k in kernels:
        by.setdefault(k["name"][:120], []).append(k)
    out = []
    for name, ks in by.items():
        d = sorted(k["dur"] for k in ks)
        out.append({"kernel": name, "count": len(ks), "us": statistics.median(d),
                    "p10": d[len(d) // 10], "p90": d[(9 * len(d)) // 10],
                    "grid": ks[0]["grid"], "block": ks[0]["block"],
                    "smem": ks[0]["smem"], "regs": ks[0]["regs"]})
    return out


def expert_ops(cfg, rows, dev):
    """The per-expert element-wise ops on in-step layouts, each as a closure issuing it REPS times."""
    d, ff = cfg["d"], cfg["ff"]
    src_rows = max(64, 2 * rows)
    h = torch.randn(src_rows, d, device=dev, dtype=torch.bfloat16)
    idx = torch.randperm(src_rows, device=dev)[:rows].sort().values
    gu = torch.randn(rows, 2 * ff, device=dev, dtype=torch.bfloat16)
    a = torch.randn(rows, ff, device=dev, dtype=torch.bfloat16)
    z = torch.randn(rows, d, device=dev, dtype=torch.bfloat16)
    w = torch.rand(rows, 1, device=dev, dtype=torch.bfloat16)
    y = torch.zeros(src_rows, d, device=dev, dtype=torch.bfloat16)
    rep = lambda f: (lambda: [f() for _ in range(REPS)])  # noqa: E731
    return {
        "index_select": rep(lambda: h.index_select(0, idx)),
        "silu_gate_half": rep(lambda: F.silu(gu[:, :ff])),
        "mul_up_half": rep(lambda: a * gu[:, ff:]),
        "scale_rows": rep(lambda: z * w),
        "index_add": rep(lambda: y.index_add_(0, idx, z)),
    }


def attention_op(cfg, batch, ctx, dev):
    H, KVH, hd = cfg["H"], cfg["KVH"], cfg["hd"]
    cache = torch.randn(2, batch, KVH, ctx + 1, hd, device=dev, dtype=torch.bfloat16)
    q = torch.randn(batch, H, 1, hd, device=dev, dtype=torch.bfloat16)
    kv_bytes = cache.numel() * 2
    reps = REPS if kv_bytes < 2 ** 30 else 5
    return kv_bytes, reps, (lambda: [F.scaled_dot_product_attention(q, cache[0], cache[1], enable_gqa=True)
                                     for _ in range(reps)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true", help="tiny shapes (a CPU-less smoke run still needs CUDA)")
    ap.add_argument("--blocks-sweep", action="store_true",
                    help="only the strided SiLU, multiply and broadcast scale (Qwen3's in-step layouts) "
                         "at 0.5-48 blocks per SM: how their time grows with the blocks an SM holds")
    ap.add_argument("--backends", action="store_true",
                    help="only decode attention at the shared calibration's sdpa_bf16 shapes, with "
                         "PyTorch's default backend choice and with flash forced: which kernel ran there")
    args = ap.parse_args()
    dev = "cuda"
    models = DRY if args.dry else MODELS
    sdpa_ctx, backend = flash_sdpa(dev)
    with jsonl_out(args.out, "calibration/measure_small_kernels.py", sdpa_backend=backend,
                   reps=REPS) as write:
        if args.blocks_sweep:
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            cfg = MODELS["qwen3-30b-a3b"]
            for per_sm in SWEEP_BLOCKS_PER_SM:
                for op, width in (("silu_gate_half", cfg["ff"]), ("mul_up_half", cfg["ff"]), ("scale_rows", cfg["d"])):
                    rows = max(1, round(per_sm * sms * TI_BLOCK_ELEMS / width))
                    fn = expert_ops(cfg, rows, dev)[op]
                    write({"part": "blocks_sweep", "model": "qwen3-30b-a3b", "op": op, "rows": rows,
                           "blocks_per_sm": per_sm, "d": cfg["d"], "ff": cfg["ff"],
                           "kernels": summarise(profile_op(fn))})
                log(f"blocks sweep {per_sm} per SM done")
            return
        if args.backends:
            cfg = MODELS["mixtral-8x7b"]
            for batch, ctx in SHARED_ATTENTION:
                for backend, ctx_factory in (("default", None), ("flash", sdpa_ctx)):
                    kv_bytes, reps, fn = attention_op(cfg, batch, ctx, dev)
                    write({"part": "decode_attention_backend", "backend": backend, "B": batch, "L": ctx,
                           "H": cfg["H"], "KVH": cfg["KVH"], "D": cfg["hd"], "kv_bytes": kv_bytes,
                           "reps": reps, "kernels": summarise(profile_op(fn, ctx_factory))})
                    torch.cuda.empty_cache()
            return
        for model, cfg in models.items():
            for rows in (ROWS if not args.dry else ROWS[:3]):
                for op, fn in expert_ops(cfg, rows, dev).items():
                    write({"part": "small_kernel", "model": model, "op": op, "rows": rows,
                           "d": cfg["d"], "ff": cfg["ff"], "kernels": summarise(profile_op(fn))})
                log(f"{model} rows {rows} done")
            for batch in (ATTN_BATCH if not args.dry else [1]):
                for ctx in (ATTN_CTX if not args.dry else [128]):
                    kv_bytes, reps, fn = attention_op(cfg, batch, ctx, dev)
                    write({"part": "decode_attention", "model": model, "B": batch, "L": ctx, "H": cfg["H"],
                           "KVH": cfg["KVH"], "D": cfg["hd"], "kv_bytes": kv_bytes, "reps": reps,
                           "kernels": summarise(profile_op(fn, sdpa_ctx))})
                    torch.cuda.empty_cache()
                log(f"{model} attention batch {batch} done")


if __name__ == "__main__":
    main()
