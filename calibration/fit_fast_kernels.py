"""Fit the `fast` dequant families (profile `dequant_kernels.kv.fast`, `.weights.fast`) to the
measured rows of calibration/measure_fast_kernels.py: one lane-op count per stored width (KV) and
per padded-row count (W4A16), shared by every row of a chip, no per-row factor.

    PYTHONPATH=.:calibration python calibration/fit_fast_kernels.py MEASURED.jsonl --hardware h200-sxm

The counts start at the SASS counts the predictions were made with (fast_predictions.SASS_KV,
SASS_W4) and move, one at a time, over a grid of factors of them (coordinate descent, two
passes), to minimise the median absolute error of hwsim's device time over the family's rows;
then the fitted counts' errors, by layout, are printed beside the SASS counts' errors.
The H100 rows (issue 44) sit 2.5-4x above the SASS counts: the grid reaches 10x.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import fast_predictions as fp
from fast_grid import GQA
from hwsim.config.load import load_profile
from hwsim.hw.chip import ChipSpec

FACTORS = [1.0, 0.9, 1.1, 0.8, 1.25, 0.65, 1.5, 0.5, 2.0, 0.35, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.5, 10.0]   # 1.0 first: ties keep it; up to 10x (the H100 rows sit ~2.4x above SASS)


def kv_rows(measured: list[dict], asm: bool, lean: bool = False) -> list[dict]:
    """The family's rows; fast16 (the 16-bit loop has no inline-PTX variant) in both sets, so that
    the 16-bit count is bounded by plain bf16 tokens, not only by kivi-2's 128-token window.
    `lean`: only the lean kernels' rows (held out of the fit), else only the others."""
    return [r for r in measured if r.get("part") == "kv" and r["impl"].startswith("fast") and "ms" in r
            and (r["impl"].endswith("_asm") == asm or r["impl"] == "fast16")
            and ("_lean" in r["impl"]) == lean]


def kv_error(chip, rows, variant) -> list[float]:
    out = []
    for r in rows:
        base = r["impl"].removesuffix("_asm")
        lean = base.endswith("_lean")              # empty slots at the layout's width (issue 44)
        name = base.removesuffix("_lean").removeprefix("fast_")
        name = name if name in fp.PRESET else base.removesuffix("_lean")
        p = fp.kv_predict(chip, name, r["B"], r["L"], r["H"], GQA["KVH"], GQA["D"], lean=lean)
        out.append(p[f"{variant}_us"] / (r["ms"] * 1e3) - 1)
    return out


def gemm_error(chip, rows, variant) -> list[float]:
    return [fp.gemm_predict(chip, "fast_w4a16", r["m"], r["k"], r["n"])[f"{variant}_us"] / (r["ms"] * 1e3) - 1
            for r in rows]


def med(errs):
    return statistics.median(abs(e) for e in errs) if errs else float("nan")


def loss(errs):
    """The median absolute error, a quarter of the mean's beside it to break ties and weigh outliers."""
    return med(errs) + 0.25 * statistics.mean(abs(e) for e in errs)


def descend(table: dict, keys, score, passes=2):
    """Coordinate descent of table[key] over FACTORS x the starting value."""
    start = dict(table)
    for _ in range(passes):
        for k in keys:
            best = None
            for f in FACTORS:
                table[k] = start[k] * f
                s = score()
                if best is None or s < best[0] - 1e-9:
                    best = (s, table[k])
            table[k] = best[1]
    return table


def fit_kv(chip, measured, variant):
    rows = kv_rows(measured, variant == "asm")
    if not rows:
        return None
    before = kv_error(chip, rows, variant)
    table = fp.SASS_KV[variant]

    def score():
        table[8] = table[4]         # the rows do not fix an 8-bit count (adaptive-2's 4 sink tokens): 4-bit's
        return loss(kv_error(chip, rows, variant))
    descend(table, (2, 4, 16), score)
    table[8] = table[4]
    after = kv_error(chip, rows, variant)
    return {"rows": len(rows), "ops_per_element": {w: round(v, 3) for w, v in table.items()},
            "median_before": med(before), "max_before": max(map(abs, before)),
            "median_after": med(after), "max_after": max(map(abs, after))}


def fit_w4(chip, measured, variant):
    impl = "fast_w4a16" + ("_asm" if variant == "asm" else "")
    rows = [r for r in measured if r.get("part") == "gemm" and r["impl"] == impl and "ms" in r]
    if not rows:
        return None
    before = gemm_error(chip, rows, variant)
    pair = list(fp.SASS_W4[variant])
    table = {0: pair[0], 1: pair[1]}

    def score():
        fp.SASS_W4[variant] = (table[0], table[1])
        return loss(gemm_error(chip, rows, variant))
    descend(table, [0, 1], score)
    fp.SASS_W4[variant] = (table[0], table[1])
    after = gemm_error(chip, rows, variant)
    return {"rows": len(rows), "ops_per_weight_16_64": [round(table[0], 3), round(table[1], 3)],
            "median_before": med(before), "max_before": max(map(abs, before)),
            "median_after": med(after), "max_after": max(map(abs, after))}


def profile_errors(chip, profile, measured) -> list[str]:
    """The KV rows' errors by layout under the profile's fitted counts (no fit: what hwsim runs
    with), inline-PTX rows and fast16: validation/fast_kernels_measured.md section 3b."""
    rows = kv_rows(measured, True)
    fp.SASS_KV["asm"].update(fp.profile_counts(profile))
    by: dict[str, list[float]] = {}
    for r, e in zip(rows, kv_error(chip, rows, "asm")):
        by.setdefault(r["impl"], []).append(e)
    by["all"] = [e for errs in list(by.values()) for e in errs]
    return [f"{impl}: {len(e)} rows, median {med(e):.1%}, max {max(map(abs, e)):.1%}, "
            f"mean {statistics.mean(e):+.1%}" for impl, e in sorted(by.items())]


def held_out(chip, counts: dict[int, float], measured) -> dict[tuple[str, int], list[float]]:
    """Signed errors of the lean kernels' rows (never fitted) by (impl, context), both variants
    costed by `counts` as hwsim runs them (fast_predictions.lean_predictions: the profile's counts
    go to both; each variant keeps its own SASS lanes and compiled program)."""
    saved = {v: dict(t) for v, t in fp.SASS_KV.items()}
    by: dict[tuple[str, int], list[float]] = {}
    try:
        for variant in ("portable", "asm"):
            fp.SASS_KV[variant].update(counts)
            rows = kv_rows(measured, variant == "asm", lean=True)
            for r, e in zip(rows, kv_error(chip, rows, variant)):
                by.setdefault((r["impl"], r["L"]), []).append(e)
    finally:
        for v, t in saved.items():
            fp.SASS_KV[v].clear()
            fp.SASS_KV[v].update(t)
    return by


def predicted_errors(measured, predicted) -> dict[tuple[str, int], list[float]]:
    """Signed errors of the lean rows against a predictions file written before measuring them
    (fast_predictions.py --lean-jsonl), by (impl, context): what hwsim said then."""
    said = {(r["impl"], r["B"], r["L"]): r["us"] for r in predicted if r.get("part") == "kv"}
    by: dict[tuple[str, int], list[float]] = {}
    for r in kv_rows(measured, True, lean=True) + kv_rows(measured, False, lean=True):
        if (r["impl"], r["B"], r["L"]) in said:
            by.setdefault((r["impl"], r["L"]), []).append(said[r["impl"], r["B"], r["L"]] / (r["ms"] * 1e3) - 1)
    return by


def held_out_table(before: dict, after: dict) -> list[str]:
    """Markdown: per lean kernel and context, the mean signed error over the batches (max |err|)."""
    cell = lambda e: f"{statistics.mean(e):+.1%} ({max(map(abs, e)):.1%})"  # noqa: E731
    out = ["| kernel | context | before: mean signed (max abs) | after | rows |", "|---|---:|---:|---:|---:|"]
    for impl, L in sorted(before, key=lambda k: (k[0], k[1])):
        out.append(f"| {impl} | {L // 1024}k | {cell(before[impl, L])} | {cell(after[impl, L])} "
                   f"| {len(after[impl, L])} |")
    for impl in sorted({i for i, _ in before}):
        b = [e for (i, _), v in before.items() if i == impl for e in v]
        a = [e for (i, _), v in after.items() if i == impl for e in v]
        out.append(f"| {impl} | all | median {med(b):.1%}, max {max(map(abs, b)):.1%} "
                   f"| median {med(a):.1%}, max {max(map(abs, a)):.1%} | {len(a)} |")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measured", type=Path)
    ap.add_argument("--hardware", default="h200-sxm")
    ap.add_argument("--held-out", type=Path, help="a measured JSONL whose lean-kernel rows are reported, "
                    "before (the profile's counts) and after the fit (its inline-PTX counts), never fitted")
    ap.add_argument("--before", type=Path, help="with --held-out: the lean predictions written before "
                    "measuring them, the `before` column (default: the profile's counts under today's cost)")
    ap.add_argument("--variants", default="portable,asm", help="the dequant variants to fit (comma-separated)")
    ap.add_argument("--kv-only", action="store_true", help="fit no W4A16 counts (no occupancy in their cost)")
    ap.add_argument("--w4a16-only", action="store_true", help="fit no KV counts (the W4A16 chain alone)")
    ap.add_argument("--errors-only", action="store_true",
                    help="no fit: the KV rows' errors under the profile's counts, by layout")
    args = ap.parse_args()
    profile = load_profile(args.hardware)
    chip = ChipSpec.from_profile(profile)
    measured = [json.loads(x) for x in args.measured.read_text().splitlines() if x.strip()]
    if args.errors_only:
        print("\n".join(profile_errors(chip, profile, measured)))
        return
    held = ([json.loads(x) for x in args.held_out.read_text().splitlines() if x.strip()]
            if args.held_out else [])
    before = held_out(chip, fp.profile_counts(profile), held) if held else {}
    if held and args.before:
        before = predicted_errors(held, [json.loads(x) for x in args.before.read_text().splitlines() if x.strip()])
    for variant in args.variants.split(","):
        if not args.w4a16_only:
            print(variant, "KV", json.dumps(fit_kv(chip, measured, variant)))
        if not args.kv_only:
            print(variant, "W4A16", json.dumps(fit_w4(chip, measured, variant)))
    if held:
        said = f"{args.before} (written before measuring)" if args.before else "the profile's counts"
        print(f"held out ({args.held_out}, lean kernels): before = {said}, after = the fitted asm counts")
        print("\n".join(held_out_table(before, held_out(chip, dict(fp.SASS_KV["asm"]), held))))


if __name__ == "__main__":
    main()
