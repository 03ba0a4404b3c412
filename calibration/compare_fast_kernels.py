"""Measured fast-kernel rows (calibration/measure_fast_kernels.py) against the predictions written
before the call (calibration/fast_predictions.py --jsonl), row by row and by family.

    python calibration/compare_fast_kernels.py MEASURED.jsonl PREDICTED.jsonl [--markdown]

A row's key: part, impl, B, L, H (attention) or part, impl, model, shape, m (GEMMs). Its error is
hwsim's `us` over the measured median (`ms` x 1000) minus one; `naive_us` and `ideal_us` of the
fast rows are the other two costings of the same kernel. It also prints the measured speed-ups
the issue asks about: fast2 against the fastest bf16 attention at contexts >= 32k, and the fast
W4A16 against bf16 and FP8.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

KEYS = {"kv": ("impl", "B", "L", "H"), "floor": ("impl", "B", "L", "H"), "gemm": ("impl", "model", "shape", "m")}


def key(row: dict) -> tuple | None:
    fields = KEYS.get(row.get("part"))
    return (row["part"], *(row.get(f) for f in fields)) if fields else None


def load(path: Path) -> dict[tuple, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {key(r): r for r in rows if key(r) and ("ms" in r or "us" in r)}


def errors(measured: dict, predicted: dict, field: str = "us") -> dict[str, list[float]]:
    """Signed errors by (part, impl), for the rows both files have."""
    by = defaultdict(list)
    for k, m in measured.items():
        p = predicted.get(k)
        if p is None or p.get(field) is None:
            continue
        by[f"{k[0]}/{k[1]}"].append(p[field] / (m["ms"] * 1e3) - 1)
    return by


def table(by: dict[str, list[float]]) -> list[str]:
    out = ["| part/impl | rows | median abs err | max abs err | mean signed |", "|---|---:|---:|---:|---:|"]
    for name, errs in sorted(by.items()):
        a = [abs(e) for e in errs]
        out.append(f"| {name} | {len(errs)} | {statistics.median(a):.1%} | {max(a):.1%} | {statistics.mean(errs):+.1%} |")
    return out


def speedups(measured: dict) -> list[str]:
    kv = {k: r["ms"] for k, r in measured.items() if k[0] == "kv"}
    out = []
    for impl in ("fast2", "fast2_asm", "fast_adaptive2", "fast_adaptive2_asm", "fast4", "fast_kivi2",
                 "fast2_lean", "fast2_lean_asm", "fast4_lean", "fast4_lean_asm"):
        x = []
        for (part, i, B, L, H), ms in kv.items():
            if i != impl or L < 32768:
                continue
            bf16 = [kv[k] for k in kv if k[2:] == (B, L, H) and k[1] in ("sdpa_flash", "sdpa_cudnn", "flash_attn")]
            if bf16:
                x.append(min(bf16) / ms)
        if x:
            out.append(f"{impl} vs the fastest bf16 attention at >= 32k: median {statistics.median(x):.2f}x, "
                       f"range {min(x):.2f}-{max(x):.2f}x ({len(x)} points)")
    gem = {k: r["ms"] for k, r in measured.items() if k[0] == "gemm"}
    for impl in ("fast_w4a16", "fast_w4a16_asm", "int4_tinygemm"):
        for ref in ("bf16", "fp8"):
            x = [gem[(p, ref, *rest)] / ms for (p, i, *rest), ms in gem.items() if i == impl and (p, ref, *rest) in gem]
            if x:
                out.append(f"{impl} vs {ref}: median {statistics.median(x):.2f}x, range {min(x):.2f}-{max(x):.2f}x")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measured", type=Path)
    ap.add_argument("predicted", type=Path)
    args = ap.parse_args()
    measured, predicted = load(args.measured), load(args.predicted)
    print(f"{len(measured)} measured rows, {len(predicted)} predicted, "
          f"{len(measured.keys() & predicted.keys())} in both\n")
    for field in ("us", "naive_us", "ideal_us"):
        by = errors(measured, predicted, field)
        if by:
            print(f"hwsim's `{field}` against the measurement:\n" + "\n".join(table(by)) + "\n")
    print("\n".join(speedups(measured)))


if __name__ == "__main__":
    main()
