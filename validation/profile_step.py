"""Per-kernel device times of the measured decode schedule, from torch.profiler (CUPTI).

    python3 validation/profile_step.py --out $OUT/kernels.csv

Runs validation/measure_steps.py's exact schedule with 4 layers (each layer issues the same
kernels, so 4 show the pattern; weights still stream from HBM) for a few cases, once as a
replayed CUDA graph, and writes one row per kernel: case, order, kernel name, device
start and duration (us). Used to calibrate per-kernel costs and to count kernels per op.
"""

import argparse
import csv
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure_steps as ms  # noqa: E402

CASES = [  # model, phase, batch, context, prompt
    ("mixtral-8x7b", "decode", 1, 512, 0),
    ("mixtral-8x7b", "decode", 16, 4096, 0),
    ("mixtral-8x7b", "prefill", 1, 0, 1024),
    ("qwen3-30b-a3b", "decode", 1, 512, 0),
    ("qwen3-30b-a3b", "decode", 8, 512, 0),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    ms.pick_sdpa_backend(dev)
    rows = []
    weights = {}
    for model, phase, b, ctx, prompt in CASES:
        cfg = dict(ms.MODELS[model], L=args.layers)
        if model not in weights:
            weights.clear()
            torch.cuda.empty_cache()
            weights[model] = ms.Weights(cfg, dev)
        W = weights[model]
        ntok = b if phase == "decode" else prompt
        st = {"B": b, "ctx": ctx, "T": prompt,
              "x": torch.randn((ntok, cfg["d"]), dtype=torch.bfloat16, device=dev),
              "route": ms.make_routing(cfg, ntok, dev, seed=1000 + ntok)}
        if phase == "decode":
            st["cache"] = ms.make_cache(cfg, b, ctx, dev)
            fn = lambda: ms.decode_step(W, cfg, st)  # noqa: E731
        else:
            fn = lambda: ms.prefill_step(W, cfg, st)  # noqa: E731
        case = f"{model}-{phase}-b{b}-l{ctx}-t{prompt}"
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), ms.run_ctx():
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g), ms.run_ctx():
            fn()
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            g.replay()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        kernels.sort(key=lambda e: e.time_range.start)
        t0 = kernels[0].time_range.start if kernels else 0
        for i, e in enumerate(kernels):
            rows.append({"case": case, "order": i, "kernel": e.name[:160],
                         "start_us": e.time_range.start - t0,
                         "dur_us": e.time_range.end - e.time_range.start})
        print(f"{case}: {len(kernels)} kernels, span {(kernels[-1].time_range.end - t0) if kernels else 0:.1f} us",
              flush=True)
        del st, g
        torch.cuda.empty_cache()
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["case", "order", "kernel", "start_us", "dur_us"])
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
