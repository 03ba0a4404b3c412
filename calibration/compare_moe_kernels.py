"""Hold the grouped and fused MoE kernels and the quantized GEMMs against their H200 traces.

    python calibration/compare_moe_kernels.py [--profile h200-sxm] [--json]

Reads calibration/data/h200_moe_kernels.jsonl.xz (calibration/measure_moe_kernels.py) and builds
each measured kernel with the builders the schedule itself uses (hwsim.model.moe_kernels,
hwsim.model.ops): the two grouped GEMMs of torch._grouped_mm, the two Triton fused-MoE GEMMs,
FP8 (cast + torch._scaled_mm) and int4 weight-only (tinygemm) decode GEMMs. The tokens of a
measured layer are spread evenly over the experts it activated (the trace records how many).
Prints measured vs simulated device time per row and the median / max absolute error per kind.
"""

from __future__ import annotations

import lzma
import argparse
import json
import statistics
from pathlib import Path

from hwsim import operators as mb
from hwsim.config.load import load_profile
from hwsim.hw.chip import ChipSpec
from hwsim.metrics import Component
from hwsim.model import moe_kernels, ops
from hwsim.model.weight_format import WeightFormat

DATA = Path(__file__).resolve().parent / "data" / "h200_moe_kernels.jsonl.xz"   # xz: 2.6 MB of JSON lines
ADDR = 1 << 34


def even_counts(tokens: int, k: int, active: int) -> list[int]:
    n = tokens * k
    return [n // active + (i < n % active) for i in range(active)]


def moe_rows(chip: ChipSpec, r: dict) -> list[dict]:
    d, ff, E, k, T = r["d"], r["ff"], r["E"], r["k"], r["tokens"]
    counts = even_counts(T, k, r["active_experts"])
    tag = {"grouped": "device_kernel", "fused": "_fused_moe_kernel"}[r["schedule"]]
    measured = [p for p in r["positions"] if tag in p["kernel"]]
    out = []
    for p, (proj, kk, n) in zip(measured, (("gate_up", d, 2 * ff), ("down", ff, d))):
        if r["schedule"] == "grouped":
            kern = moe_kernels.grouped_gemm("g", 0, counts, kk, n, chip, weight_addr=ADDR, weight_bytes=2,
                                            data=Component.EXPERT_READ)
        else:
            kern = moe_kernels.fused_moe_gemm("f", 0, counts, T, E, kk, n, chip, weight_addr=ADDR,
                                              weight_bytes=2, data=Component.EXPERT_READ)
        out.append({"kind": f"{r['schedule']} {proj}", "case": f"{r['model']} T={T}",
                    "measured_us": p["us"], "simulated_us": mb.device_time_s(chip, [kern]) * 1e6})
    return out


def quant_row(chip: ChipSpec, r: dict) -> dict | None:
    m, k, n, fmt = r["m"], r["k"], r["n"], r["format"]
    if fmt == "fp8":
        f = WeightFormat("fp8", 0, "fp32", "native")
        ks = [ops.elementwise("cast", 0, m * k * 2, m * k, 1.0, chip)]
        ks += ops.gemm("g", 0, m, k, n, chip, weight_addr=ADDR, weight_bytes=f.bytes_per_weight,
                       data=Component.WEIGHT_READ, dtype="fp8")
    elif fmt == "int4_tinygemm":
        f = WeightFormat("int4", 128, "bf16", "software")
        ks = [moe_kernels.weight_only_gemm("q", 0, m, k, n, chip, weight_addr=ADDR,
                                           weight_bytes=f.bytes_per_weight, data=Component.WEIGHT_READ)]
    elif fmt == "bf16":
        ks = ops.gemm("g", 0, m, k, n, chip, weight_addr=ADDR, weight_bytes=2, data=Component.WEIGHT_READ)
    else:
        return None          # the naive Triton W4A16 kernel is recorded, not modelled
    measured = sum(p["us"] for p in r["positions"])
    return {"kind": fmt, "case": f"m={m} k={k} n={n}", "measured_us": measured,
            "simulated_us": mb.device_time_s(chip, ks) * 1e6}


def compare(chip: ChipSpec) -> list[dict]:
    out = []
    for line in lzma.open(DATA, "rt"):
        r = json.loads(line)
        if r["part"] == "moe" and r["schedule"] in ("grouped", "fused"):
            out += moe_rows(chip, r)
        elif r["part"] == "quant_gemm":
            row = quant_row(chip, r)
            if row:
                out.append(row)
    for row in out:
        row["error_pct"] = (row["simulated_us"] - row["measured_us"]) / row["measured_us"] * 100
    return out


def summary(rows: list[dict]) -> dict:
    kinds = {}
    for r in rows:
        kinds.setdefault(r["kind"].split()[0], []).append(abs(r["error_pct"]))
    return {k: {"rows": len(v), "median_abs_error_pct": statistics.median(v), "max_abs_error_pct": max(v)}
            for k, v in kinds.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h200-sxm")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = compare(ChipSpec.from_profile(load_profile(args.profile)))
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary(rows)}, indent=1))
        return
    for r in rows:
        print(f"{r['kind']:16s} {r['case']:28s} measured {r['measured_us']:8.1f} us  "
              f"simulated {r['simulated_us']:8.1f} us  {r['error_pct']:+6.1f}%")
    for k, s in summary(rows).items():
        print(f"{k:16s} {s['rows']:3d} rows: median |error| {s['median_abs_error_pct']:.1f}%, "
              f"max {s['max_abs_error_pct']:.1f}%")


if __name__ == "__main__":
    main()
