"""cuDNN SDPA with Q > 1 query tokens a sequence (a speculative verification), alone: which
kernel runs, on which grid, and how long, over the context, Q, the batch, a mask or none, GQA or
K/V expanded to every query head (issue 45 item 2).

    python3 calibration/measure_cudnn_verify.py --out $OUT/h100_cudnn_verify.jsonl [--dry]
    python3 calibration/measure_cudnn_verify.py --cpu-check      # the cases' shapes, on the CPU

Why: transformers' assisted generation on the H100 (validation/data/assisted_h100, Llama-8B,
batch 1, Q = 5 over 517 keys, a bf16 mask, K/V expanded to 32 heads) ran cuDNN's
sm90_flash_fprop_wgmma 64x128x128 kernel on a grid of 32 (a program per query head, unsplit)
at 27.2 us a call; hwsim models that grid (hwsim/model/multi_query_attention.py) at 10.5 us.
One shape cannot tell a fixed cost from a cost per 128-key block, nor whether cuDNN picks the
same kernel without a mask or with GQA. Each case runs REPS calls in one CUDA graph (as in a
step) and CUPTI gives each kernel's name, grid, block, shared memory, registers and duration.
"""

import argparse
import itertools
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

REPS = 20
H, KVH, HD = 32, 8, 128                      # Llama-3.1-8B
CONTEXTS = [512, 1024, 2048, 4096, 8192]     # cached tokens; the keys are these + Q
QUERIES = [2, 5, 8]
BATCHES = [1, 8]
DRY = dict(contexts=[512], queries=[5], batches=[1])


def cases(contexts, queries, batches):
    """(batch, context, Q, mask, expanded): the traced case (mask, expanded) and its three neighbours."""
    for b, ctx, q, mask, expanded in itertools.product(batches, contexts, queries, (True, False), (True, False)):
        yield b, ctx, q, mask, expanded


def inputs(b, ctx, q, mask, expanded, dev, heads=H, kv_heads=KVH, hd=HD):
    """q, k, v (BHSD) and the additive bf16 mask transformers builds for a verification: each
    query sees the cache and the drafted tokens up to its own."""
    keys = ctx + q
    kvh = heads if expanded else kv_heads
    qt = torch.randn(b, heads, q, hd, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(b, kvh, keys, hd, device=dev, dtype=torch.bfloat16) for _ in range(2))
    m = None
    if mask:
        allowed = torch.ones(q, keys, dtype=torch.bool, device=dev).tril(diagonal=ctx)
        m = torch.zeros(b, 1, q, keys, device=dev, dtype=torch.bfloat16).masked_fill(~allowed, float("-inf"))
    return qt, k, v, m


def call(qt, k, v, m, expanded):
    return F.scaled_dot_product_attention(qt, k, v, attn_mask=m, enable_gqa=not expanded)


def cpu_check() -> None:
    for b, ctx, q, mask, expanded in cases(**{k: v for k, v in DRY.items()}):
        qt, k, v, m = inputs(b, 64, q, mask, expanded, "cpu", heads=4, kv_heads=2, hd=16)
        out = call(qt, k, v, m, expanded)
        assert out.shape == qt.shape and torch.isfinite(out.float()).all()
        print(f"ok b={b} ctx=64 q={q} mask={mask} expanded={expanded} out={tuple(out.shape)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--dry", action="store_true", help="one case set (b1, 512 tokens, Q = 5)")
    ap.add_argument("--cpu-check", action="store_true", help="build and run every case kind on the CPU")
    args = ap.parse_args()
    if args.cpu_check:
        cpu_check()
        return 0
    if not args.out:
        ap.error("--out is needed on the GPU")
    from device_env import jsonl_out, log, profile_graph
    from measure_small_kernels import summarise
    from torch.nn.attention import SDPBackend, sdpa_kernel
    grid = DRY if args.dry else dict(contexts=CONTEXTS, queries=QUERIES, batches=BATCHES)
    cudnn = lambda: sdpa_kernel([SDPBackend.CUDNN_ATTENTION])  # noqa: E731
    with jsonl_out(args.out, "calibration/measure_cudnn_verify.py", reps=REPS, heads=H, kv_heads=KVH,
                   head_dim=HD) as write:
        for b, ctx, q, mask, expanded in cases(**grid):
            qt, k, v, m = inputs(b, ctx, q, mask, expanded, "cuda")
            try:
                kernels = summarise(profile_graph(lambda: [call(qt, k, v, m, expanded) for _ in range(REPS)], cudnn))
            except RuntimeError as exc:          # cuDNN refused the case: say so, go on
                kernels = [{"error": str(exc).splitlines()[0][:200]}]
            write({"part": "cudnn_verify", "B": b, "context": ctx, "Q": q, "keys": ctx + q, "mask": mask,
                   "expanded_kv": expanded, "reps": REPS, "kernels": kernels})
            log(f"b={b} ctx={ctx} q={q} mask={mask} expanded={expanded}")
            del qt, k, v, m
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
