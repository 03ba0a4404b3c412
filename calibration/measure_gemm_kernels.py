"""Which cuBLAS kernel (name, grid, block) torch.matmul runs for each calibration GEMM shape.

    python3 calibration/measure_gemm_kernels.py --out $OUT/h200_gemm_kernels.jsonl

The GEMM rows of the calibration data give times; this records what cuBLAS's heuristic chose
for each (m, k, n) of calibration/data/gemm_shapes.json: the kernels of one call (main GEMM,
split-K reduction), their grids and CUPTI device times, inside a replayed CUDA graph, weights
larger than the L2 cycled so each call streams them from HBM as in a step.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_env import jsonl_out, log  # noqa: E402
from measure_small_kernels import profile_op, summarise  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
COPIES_BYTES = 256 * 2 ** 20   # enough distinct weight copies to defeat the 50 MB L2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    shapes = json.load(open(os.path.join(HERE, "data", "gemm_shapes.json")))
    with jsonl_out(args.out, "calibration/measure_gemm_kernels.py") as write:
        for m, k, n in shapes:
            copies = max(1, min(16, COPIES_BYTES // (2 * k * n)))
            ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            fn = lambda ws=ws, x=x: [torch.matmul(x, w.t()) for w in ws]  # noqa: E731
            write({"part": "gemm_kernels", "m": m, "k": k, "n": n, "calls": copies,
                   "kernels": summarise(profile_op(fn))})
            del ws, fn
            torch.cuda.empty_cache()
        log(f"{len(shapes)} shapes done")


if __name__ == "__main__":
    main()
