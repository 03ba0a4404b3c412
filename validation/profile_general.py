"""Per-kernel device times (CUPTI) of validation/measure_general.py's schedule, for the cases whose
whole-step errors point at a missing mechanism (validation/general_grid.md, `cal` rows only).

    python3 validation/profile_general.py --out $OUT/h200_general_kernels.csv [--layers 4]

Each case runs with `--layers` decoder layers (every layer issues the same kernels) as one
replayed CUDA graph; one row per kernel: case, order, name, device start and duration (us),
grid, block, shared memory, registers.
"""

import argparse
import csv
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import measure_general as mg  # noqa: E402
import measure_steps as ms  # noqa: E402
from device_env import profile_graph  # noqa: E402

CASES = [  # model, phase, batch, context, prompt: cal rows of the grid
    ("deepseek-v2-lite", "decode", 1, 512, 0),
    ("deepseek-v2-lite", "decode", 4, 32768, 0),
    ("deepseek-v2-lite", "decode", 32, 4096, 0),
    ("gpt-oss-20b", "decode", 1, 512, 0),
    ("gpt-oss-20b", "decode", 32, 4096, 0),
    ("llama-3.1-8b", "decode", 32, 4096, 0),
    ("llama-3.1-8b", "prefill", 1, 0, 512),
    ("olmoe-1b-7b", "prefill", 1, 0, 512),
    ("olmoe-1b-7b", "decode", 32, 4096, 0),
    ("qwen3-30b-a3b", "decode", 256, 1024, 0),
    ("qwen1.5-moe-a2.7b", "prefill", 1, 0, 512),
    ("mixtral-8x7b", "prefill", 1, 0, 8192),
    ("qwen3-30b-a3b", "prefill", 1, 0, 256),
    ("qwen3-30b-a3b", "prefill", 1, 0, 8192),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    ms.pick_sdpa_backend("cuda")
    fields = ["case", "order", "kernel", "start_us", "dur_us", "grid", "block", "smem", "regs"]
    rows = []
    for model, phase, b, ctx, prompt in CASES:
        cfg = dict(mg.MODELS[model], L=args.layers)
        if cfg.get("dense_layers", 0) > args.layers:
            cfg["dense_layers"] = args.layers
        W = mg.Weights(cfg, "cuda")
        ntok = b if phase == "decode" else prompt
        st = {"B": b, "ctx": ctx, "T": prompt,
              "x": torch.randn((ntok, cfg["d"]), dtype=torch.bfloat16, device="cuda"),
              "route": (ms.make_routing(cfg, ntok, "cuda", seed=1000 + ntok) if cfg["E"]
                        else [[] for _ in range(cfg["L"])])}
        if phase == "decode":
            st["cache"] = mg.make_cache(cfg, b, ctx, "cuda")
        case = mg.case_name(model, phase, b, ctx, prompt)
        kernels = profile_graph(lambda: mg.step(W, cfg, st, phase), ms.run_ctx, warm_eager=2)
        t0 = kernels[0]["ts"] if kernels else 0
        for i, e in enumerate(kernels):
            rows.append({"case": case, "order": i, "kernel": e["name"][:160], "start_us": e["ts"] - t0,
                         "dur_us": e["dur"], "grid": e["grid"], "block": e["block"], "smem": e["smem"],
                         "regs": e["regs"]})
        span = (kernels[-1]["ts"] + kernels[-1]["dur"] - t0) if kernels else 0
        print(f"{case}: {len(kernels)} kernels, span {span:.1f} us", flush=True)
        del st, W
        torch.cuda.empty_cache()
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
