"""Fit gemlite's kernel costs (hwsim/model/gemlite_gemm.py, issue 44 item 2) to an H100's rows,
with a held-out split: fitted on one model's shapes, reported on the other's separately.

    PYTHONPATH=. python calibration/fit_gemlite.py [--fit-model mixtral-8x7b] [--out FILE]

Rows: calibration/data/h100_gemlite.jsonl (calibration/measure_gemlite.py; each row names the launch
config gemlite ran). Five numbers, no per-row factor: the ALU lanes per weight of the GEMVs (dequant
and fp32 dot) and of the GEMMs (dequant; the MMA does the dot), and per kernel kind with a K loop the
round trips one K step waits on (GEMV_REVSPLITK's one step, GEMV_SPLITK, GEMM_SPLITK, GEMM). Each is
chosen on the fit rows by coordinate descent over a grid, minimising the mean absolute log error.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hwsim import operators as mb  # noqa: E402
from hwsim.config.load import load_profile  # noqa: E402
from hwsim.hw.chip import ChipSpec  # noqa: E402
from hwsim.metrics import Component  # noqa: E402
from hwsim.model.gemlite_gemm import H100_COSTS, GemliteCosts, LaunchConfig, gemlite_gemm  # noqa: E402

ROWS = ROOT / "calibration" / "data" / "h100_gemlite.jsonl"
FAST = ROOT / "calibration" / "data" / "h100_fast_kernels.jsonl"
KINDS = ("GEMV_REVSPLITK", "GEMV_SPLITK", "GEMM_SPLITK", "GEMM")
GRID_OPS = [x / 4 for x in range(8, 81)]          # 2.0 .. 20.0 lanes a weight
GRID_TRIPS = [x / 8 for x in range(0, 49)]         # 0 .. 6 round trips a step


def gemlite_rows(path: Path = ROWS) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("part") == "gemm" and r.get("impl", "").startswith("gemlite") and "ms" in r]


def predict_us(chip, costs: GemliteCosts, r: dict) -> float:
    ks = gemlite_gemm("gemlite", 0, r["m"], r["k"], r["n"], r["bits"], r["group"],
                      LaunchConfig.from_gemlite(r["config"]), costs, chip,
                      weight_addr=mb.GEMM_WEIGHT_ADDR, data=Component.WEIGHT_READ)
    return mb.device_time_s(chip, ks) * 1e6


def errors(chip, costs: GemliteCosts, rows: list[dict]) -> list[float]:
    return [predict_us(chip, costs, r) / (r["ms"] * 1e3) - 1 for r in rows]


def loss(chip, costs, rows) -> float:
    return statistics.mean(abs(math.log1p(e)) for e in errors(chip, costs, rows))


def as_costs(x: list[float]) -> GemliteCosts:
    return GemliteCosts(x[0], x[1], tuple(zip(KINDS, x[2:])))


def fit(chip, rows: list[dict], start: list[float], sweeps: int = 3) -> list[float]:
    """Coordinate descent: each number in turn set to its grid's best, the others held."""
    x = list(start)
    for _ in range(sweeps):
        for i in range(len(x)):
            grid = GRID_OPS if i < 2 else GRID_TRIPS
            best = min(grid, key=lambda v: loss(chip, as_costs(x[:i] + [v] + x[i + 1:]), rows))
            x[i] = best
    return x


def summary(name: str, errs: list[float]) -> str:
    if not errs:
        return f"{name}: no rows"
    return (f"{name}: {len(errs)} rows, median abs {statistics.median(map(abs, errs)):.1%}, "
            f"max abs {max(map(abs, errs)):.1%}")


def compare_markdown(chip, costs: GemliteCosts, path: Path = ROWS) -> str:
    """Every measured row (gemlite and bf16) against hwsim before (main: a gemlite row costed as the
    fast W4A16 family at its bytes, validation/predict_library_stacks.gemm_row) and after (the
    gemlite kernel family at `costs`); medians and maxima per impl, kind and split."""
    from predict_library_stacks import gemm_row
    from hwsim.model.dequant_kernels import from_profile
    families = from_profile(load_profile("h100-sxm"))
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r.get("part") == "gemm" and "ms" in r]
    table = ["| impl | kernel | model | GEMM (k x n) | m | measured µs | before µs | err | after µs | err |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    by: dict[str, tuple[list[float], list[float]]] = {}
    for r in sorted(rows, key=lambda r: (r["impl"], r["model"], r["k"], r["n"], r["m"])):
        us = r["ms"] * 1e3
        before = gemm_row(chip, families, r["impl"], r["model"], r["shape"], r["m"], r["k"], r["n"])["us"]
        after = before if r["impl"] == "bf16" else predict_us(chip, costs, r)
        eb, ea = before / us - 1, after / us - 1
        kind = r.get("matmul_type", "cuBLAS")
        split = "fit" if r["model"] == "mixtral-8x7b" else "held-out"
        for key in (r["impl"], f"{r['impl']} {kind}", f"{r['impl']} ({split})"):
            by.setdefault(key, ([], []))
            by[key][0].append(eb)
            by[key][1].append(ea)
        table.append(f"| {r['impl']} | {kind} | {r['model']} | {r['shape']} ({r['k']} x {r['n']}) | {r['m']} | "
                     f"{us:.1f} | {before:.1f} | {eb:+.0%} | {after:.1f} | {ea:+.0%} |")
    head = ["| rows | n | before median | before max | after median | after max |", "|---|---:|---:|---:|---:|---:|"]
    med = lambda e: statistics.median(map(abs, e))  # noqa: E731
    for key in sorted(by):
        b, a = by[key]
        head.append(f"| {key} | {len(a)} | {med(b):.1%} | {max(map(abs, b)):.1%} | {med(a):.1%} | {max(map(abs, a)):.1%} |")
    return "\n".join(head) + "\n\n" + "\n".join(table) + "\n"


def choice_markdown(chip, path: Path = ROWS) -> str:
    """At every shape both were measured: which 4-bit kernel was quicker (gemlite A16W4, group 64,
    or the fast W4A16 kernel, fast_w4a16_asm of calibration/data/h100_fast_kernels.jsonl) and
    which hwsim picks (hwsim/speedups/gemlite_choice.py)."""
    from hwsim.model.dequant_kernels import from_profile
    from hwsim.model.gemlite_configs import load_configs
    from hwsim.speedups.gemlite_choice import w4_times_us
    families, configs = from_profile(load_profile("h100-sxm")), load_configs("h100")
    fast_rows = [json.loads(x) for x in FAST.read_text().splitlines() if x.strip()]
    fast = {(r["k"], r["n"], r["m"]): r for r in fast_rows if r.get("impl") == "fast_w4a16_asm" and "ms" in r}
    out = ["| model | GEMM (k x n) | m | measured fast µs | measured gemlite µs | quicker | hwsim fast µs "
           "| hwsim gemlite µs | hwsim picks |", "|---|---|---:|---:|---:|---|---:|---:|---|"]
    agree = total = 0
    for r in sorted(gemlite_rows(path), key=lambda r: (r["model"], r["k"], r["n"], r["m"])):
        f = fast.get((r["k"], r["n"], r["m"]))
        if r["impl"] != "gemlite_a16w4" or f is None:
            continue
        g_us, f_us = r["ms"] * 1e3, f["ms"] * 1e3
        quicker = "gemlite" if g_us < f_us else "fast"
        p = w4_times_us(chip, families, configs, r["m"], r["k"], r["n"])
        agree, total = agree + (p["quicker"] == quicker), total + 1
        out.append(f"| {r['model']} | {r['shape']} ({r['k']} x {r['n']}) | {r['m']} | {f_us:.1f} | {g_us:.1f} | "
                   f"{quicker} | {p['fast_us']:.1f} | {p['gemlite_us']:.1f} | {p['quicker']} |")
    out.append(f"\nhwsim picks the measured quicker kernel at {agree} of {total} shapes.")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit-model", default="mixtral-8x7b", help="rows of this model are fitted, the rest held out")
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--rows", type=Path, default=ROWS, help="measure_gemlite.py's JSONL (another set: "
                    "--compare predicts it at the committed costs)")
    ap.add_argument("--out", type=Path, help="also write the report here")
    ap.add_argument("--compare", type=Path, help="write every row before/after (markdown tables) here, after "
                    "the text above its '## The tables', at gemlite_gemm.H100_COSTS, and skip the fit")
    args = ap.parse_args()
    if not args.rows.is_file():
        print(f"fit_gemlite: --rows {args.rows}: no such file", file=sys.stderr)
        return 2
    chip = ChipSpec.from_profile(load_profile(args.hardware))
    if args.compare:
        sys.path.insert(0, str(ROOT / "validation"))
        head = args.compare.read_text().split("## The tables")[0] if args.compare.exists() else ""
        args.compare.write_text(head + "## The tables\n\n" + compare_markdown(chip, H100_COSTS, args.rows) + "\n"
                                + choice_markdown(chip, args.rows))
        return 0
    rows = gemlite_rows(args.rows)
    fit_rows = [r for r in rows if r["model"] == args.fit_model]
    held = [r for r in rows if r["model"] != args.fit_model]
    x = fit(chip, fit_rows, [5.5, 9.5, 1.0, 1.0, 1.0, 1.0])
    lines = [f"fitted on {args.fit_model} ({len(fit_rows)} rows), held out the rest ({len(held)} rows), {args.hardware}",
             f"gemv_ops_per_weight {x[0]}, gemm_ops_per_weight {x[1]}, step_trips "
             + ", ".join(f"{k} {v}" for k, v in zip(KINDS, x[2:]))]
    costs = as_costs(x)
    for name, part in (("fit", fit_rows), ("held-out", held)):
        lines.append(summary(name, errors(chip, costs, part)))
        for impl in sorted({r["impl"] for r in part}):
            lines.append("  " + summary(impl, errors(chip, costs, [r for r in part if r["impl"] == impl])))
        for kind in KINDS:
            lines.append("  " + summary(kind, errors(chip, costs, [r for r in part if r["matmul_type"] == kind])))
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
