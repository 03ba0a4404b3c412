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
from device_env import profile_graph  # noqa: E402  (on the path measure_steps set)

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
    ap.add_argument("--cases", nargs="*", default=None,
                    help="model:phase:batch:context:prompt (default: the built-in CASES)")
    args = ap.parse_args()
    cases = CASES
    if args.cases:
        cases = [(m, ph, int(b), int(c), int(t)) for m, ph, b, c, t in (x.split(":") for x in args.cases)]
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    ms.pick_sdpa_backend(dev)
    rows = []
    weights = {}
    for model, phase, b, ctx, prompt in cases:
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
        kernels = profile_graph(fn, ms.run_ctx, warm_eager=2)
        t0 = kernels[0]["ts"] if kernels else 0
        for i, e in enumerate(kernels):
            rows.append({"case": case, "order": i, "kernel": e["name"][:160],
                         "start_us": e["ts"] - t0, "dur_us": e["dur"],
                         "grid": e["grid"], "block": e["block"], "smem": e["smem"], "regs": e["regs"]})
        print(f"{case}: {len(kernels)} kernels, span {(kernels[-1]['ts'] + kernels[-1]['dur'] - t0) if kernels else 0:.1f} us",
              flush=True)
        del st
        torch.cuda.empty_cache()
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["case", "order", "kernel", "start_us", "dur_us",
                                          "grid", "block", "smem", "regs"])
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
