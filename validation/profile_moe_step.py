"""Per-kernel device times of 4-layer decode steps of the MoE schedules and weight formats
(CUPTI), so a whole-step error can be traced to its kernels (validation/compare_moe_steps.py).

    python3 validation/profile_moe_step.py --out $OUT/h200_moe_step_kernels.csv

validation/measure_moe_steps.py's step (same variants, same routing draws) with 4 layers,
captured as a CUDA graph and profiled once. Only `cal` points of validation/moe_grid.md.
Writes one row per kernel (case, order, kernel, start_us, dur_us, grid, block, smem, regs)
and, beside it (.routing.json), the tokens each expert got in each profiled layer.
"""

import argparse
import csv
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "calibration"))
import measure_moe_steps as mms  # noqa: E402
import measure_steps as ms  # noqa: E402
from device_env import profile_graph  # noqa: E402

CASES = [("mixtral-8x7b", "grouped-bf16", 1, 512), ("mixtral-8x7b", "grouped-bf16", 16, 512),
         ("mixtral-8x7b", "fused-bf16", 1, 512), ("mixtral-8x7b", "fused-bf16", 16, 512),
         ("mixtral-8x7b", "per-expert-fp8", 1, 512), ("mixtral-8x7b", "per-expert-int4", 1, 512),
         ("qwen3-30b-a3b", "grouped-bf16", 1, 512), ("qwen3-30b-a3b", "grouped-bf16", 32, 512),
         ("qwen3-30b-a3b", "fused-bf16", 1, 512), ("qwen3-30b-a3b", "fused-bf16", 32, 512),
         ("qwen3-30b-a3b", "per-expert-fp8", 1, 512), ("qwen3-30b-a3b", "per-expert-int4", 1, 512)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    ms.pick_sdpa_backend(dev)
    rows, routing = [], {}
    orig_moe, orig_mm = ms.moe, ms.mm
    for model, variant, b, ctx in CASES:
        cfg = dict(ms.MODELS[model], L=args.layers)
        sched, fmt = variant.rsplit("-", 1)
        W = ms.Weights(cfg, dev, seed=0)
        if fmt != "bf16":
            mms.quantize(W, fmt)
        for lw in W.layers:
            if isinstance(lw["w13"], torch.Tensor):
                lw["w13_t"], lw["w2_t"] = lw["w13"].transpose(1, 2), lw["w2"].transpose(1, 2)
        ms.moe = mms.make_moe(sched) if sched in ("grouped", "fused") else orig_moe
        ms.mm = mms.qmm if fmt != "bf16" else orig_mm
        grouped = sched in ("grouped", "fused")
        route = (mms.fixed_topk(cfg, b, dev, 1000 + b) if grouped else ms.make_routing(cfg, b, dev, seed=1000 + b))
        st = {"B": b, "ctx": ctx, "T": 0, "route": route, "cache": ms.make_cache(cfg, b, ctx, dev),
              "x": torch.randn((b, cfg["d"]), dtype=torch.bfloat16, device=dev)}
        case = f"{model}-{variant}-decode-b{b}-l{ctx}"
        if grouped:
            routing[case] = [torch.bincount(t.reshape(-1).cpu(), minlength=cfg["E"]).tolist() for t, _ in route]
        else:
            routing[case] = [[0] * cfg["E"] for _ in route]
            for li, lay in enumerate(route):
                for e, idx, _ in lay:
                    routing[case][li][e] = int(idx.numel())
        kernels = profile_graph(lambda: ms.decode_step(W, cfg, st), ms.run_ctx, warm_eager=2)
        t0 = kernels[0]["ts"] if kernels else 0
        for i, e in enumerate(kernels):
            rows.append({"case": case, "order": i, "kernel": e["name"][:400], "start_us": e["ts"] - t0,
                         "dur_us": e["dur"], "grid": e["grid"], "block": e["block"], "smem": e["smem"],
                         "regs": e["regs"]})
        print(f"{case}: {len(kernels)} kernels, device sum {sum(k['dur'] for k in kernels):.1f} us", flush=True)
        del st, W
        ms.moe, ms.mm = orig_moe, orig_mm
        torch.cuda.empty_cache()
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["case", "order", "kernel", "start_us", "dur_us", "grid", "block",
                                          "smem", "regs"])
        w.writeheader()
        w.writerows(rows)
    json.dump(routing, open(os.path.splitext(args.out)[0] + ".routing.json", "w"))


if __name__ == "__main__":
    main()
