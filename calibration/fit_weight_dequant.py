"""Fit the software-dequant cost of a weight-only int4 GEMM on the H200 (hwsim.model.weight_format).

    python calibration/fit_weight_dequant.py

torch._weight_int4pack_mm (tinygemm, group 128) at decode shapes, from
calibration/data/h200_moe_kernels.jsonl.xz: on the two large shapes (4096 x 28672, 14336 x 4096)
with 4 or more rows the kernel is ALU-bound, so its time converts to integer-lane ops per
weight and 16-row tile (132 SMs x 64 lanes x 1.98 GHz). A least-squares line in the rows of a
tile, ops = a + b x rows, gives DEQUANT_OPS_PER_WEIGHT (a: expanding each code once per tile)
and DEQUANT_OPS_PER_WEIGHT_ROW (b: the mma.sync issue per row that shares the ALU slots).
"""

import lzma
import json
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "h200_moe_kernels.jsonl.xz"   # xz: 2.6 MB of JSON lines
LANE_OPS_S = 132 * 64 * 1.98e9
TILE_ROWS = 16


def points():
    for line in lzma.open(DATA, "rt"):
        r = json.loads(line)
        if r["part"] == "quant_gemm" and r["format"] == "int4_tinygemm" and r["m"] >= 4 \
                and (r["k"], r["n"]) in ((4096, 28672), (14336, 4096)):
            us = sum(p["us"] for p in r["positions"])
            tiles = -(-r["m"] // TILE_ROWS)
            yield min(r["m"], TILE_ROWS), us * 1e-6 * LANE_OPS_S / (r["k"] * r["n"] * tiles)


def main():
    pts = list(points())
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    a = my - b * mx
    for x, y in pts:
        print(f"rows/tile {x:3d}: {y:5.2f} ops/weight measured, {a + b * x:5.2f} fitted")
    print(f"DEQUANT_OPS_PER_WEIGHT = {a:.2f}, DEQUANT_OPS_PER_WEIGHT_ROW = {b:.3f} ({n} rows)")


if __name__ == "__main__":
    main()
