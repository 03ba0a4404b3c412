"""The figures that the README, docs/ and scenario comments quote about this repo's own runs and
datasets, computed in one place (issue 28: quoted figures had drifted from what hwsim prints).

    python docs/figures.py            # recompute every figure, write docs/figures.json
    python docs/figures.py --check    # recompute and list every quote that no longer holds

QUOTES says where each figure is quoted and how; tests/test_doc_figures.py checks every quote
against docs/figures.json and recomputes the cheap figures live. After a change to the model,
run this script, and edit each text --check names to the new figure.
Whole-step tables of docs/validation.md are validation/write_tables.py's.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures.json"
DATA = ROOT / "validation" / "data"

# (file, text): `text`, formatted with the figures, must appear in the file (whitespace and YAML
# comment marks aside)
QUOTES = [
    ("README.md", "inter-token latency p50 {default[itl_p50_ms]:.3f} ms"),
    ("README.md", "with a median error of {steps_graph[median]:.1f}% (max {steps_graph[max]:.1f}%, "
                  "{steps_graph[rows]} cases), and {steps_extra[median]:.1f}% (max {steps_extra[max]:.1f}%)"),
    ("README.md", "median {general_test[median]:.1f}%, max {general_test[max]:.1f}%, mean signed error "
                  "{general_test[mean_signed]:.1f}%; on {general_fresh[rows]} points measured after the GEMM "
                  "model's last change: {general_fresh[median]:.1f}%, {general_fresh[max]:.1f}%, "
                  "{general_fresh[mean_signed]:.1f}%"),
    ("README.md", "within median {ep_steps[median]:.1f}% (max {ep_steps[max]:.1f}%, {ep_steps[rows]} steps) and, on "
                  "grids predicted before they were measured, {ep_fresh[median]:.1f}% (max {ep_fresh[max]:.1f}%, "
                  "{ep_fresh[rows]} decode steps) and {ep_prefill[median]:.1f}% (max {ep_prefill[max]:.1f}%, "
                  "{ep_prefill[rows]} prefills"),
    ("README.md", "`hwsim validate validation/data/h200_steps.csv` prints these for its graph rows and, "
                  "over all {steps_all[rows]} rows, median {steps_all[median]:.1f}% and max {steps_all[max]:.1f}%"),
    ("docs/serving.md", "| `voice-agent.yaml` | Qwen3-30B-A3B, bursty gamma arrivals (CV 3), short prompts and "
                        "replies, 10 ms ITL target | ITL p50 {voice_agent[itl_p50_ms]:.1f} ms, p90 "
                        "{voice_agent[itl_p90_ms]:.1f} ms; {voice_agent[within_budget_pct]:.0f}% of tokens "
                        "within budget |"),
    ("docs/serving.md", "Poisson 4 req/s, lognormal lengths, grouped MoE | ITL p50 "
                        "{serving_poisson[4][itl_p50_ms]:.1f} ms, {serving_poisson[4][within_budget_pct]:.1f}% "
                        "of tokens within the 10 ms budget (at 2 req/s: {serving_poisson[2][itl_p50_ms]:.1f} ms, "
                        "{serving_poisson[2][within_budget_pct]:.1f}%)"),
    ("scenarios/serving-poisson.yaml", "At 2 requests/s its ITL p50 is already {serving_poisson[2][itl_p50_ms]:.1f} "
                                       "ms and {serving_poisson[2][within_budget_pct]:.1f}% of tokens are within the "
                                       "10 ms budget; at 4 (below) {serving_poisson[4][itl_p50_ms]:.1f} ms and "
                                       "{serving_poisson[4][within_budget_pct]:.1f}%, with p90 "
                                       "{serving_poisson[4][itl_p90_ms]:.1f} ms"),
    ("docs/sweeps.md", "The 10 ms budget is met by {frontier[within_budget]} of the {frontier[points]} points: the "
                       "fastest, batch 1 at {frontier[best_gbps]:.0f} GB/s, takes {frontier[best_ms]:.2f} ms"),
    ("docs/sweeps.md", "At batch 1, {frontier[b1_3350_ms]:.2f} ms at 3.35 TB/s and {frontier[b1_22000_ms]:.2f} ms "
                       "at 22 TB/s"),
    ("docs/sweeps.md", "({frontier[b32_8000_ms]:.1f} -> {frontier[b32_22000_ms]:.1f} ms at batch 32 from 8 to 22 TB/s)"),
]
QUOTES += [
    ("docs/validation.md", "**Whole steps, graph mode (the accuracy targets): median |error| {steps_graph[median]:.1f}%, "
                           "max {steps_graph[max]:.1f}%, mean signed {steps_graph[mean_signed]:+.1f}% over "
                           "{steps_graph[rows]} rows**"),
    ("docs/validation.md", "strided-kernel chain to: **median |error| {steps_extra[median]:.1f}%, max "
                           "{steps_extra[max]:.1f}%, mean signed {steps_extra[mean_signed]:+.1f}%**"),
    ("docs/validation.md", "`hwsim validate validation/data/h200_steps_cudnn.csv`: **median |error| "
                           "{steps_cudnn[median]:.1f}%, max {steps_cudnn[max]:.1f}%, mean signed "
                           "{steps_cudnn[mean_signed]:+.1f}%**"),
]
MOE_GROUPS = {"grouped bf16": "grouped-bf16", "fused bf16": "fused-bf16", "per-expert FP8": "per-expert-fp8",
              "per-expert int4": "per-expert-int4"}


def _moe_cell(group: str, split: str) -> str:
    g = f"moe_grid[groups][{group} {split}]"
    return f"{{{g}[median_abs_error_pct]:.1f}}% / {{{g}[max_abs_error_pct]:.1f}}% ({{{g}[rows]}})"


def _moe_row(name: str) -> str:
    return f"{{moe_grid[rows][{name}]:+.1f}}%"


QUOTES += [("docs/weights.md", f"| {label} | {_moe_cell(g, 'cal')} | {_moe_cell(g, 'held')} |")
           for label, g in MOE_GROUPS.items()]
QUOTES += [
    ("docs/weights.md", "| all held-out | | **{moe_grid[held_out][median_abs_error_pct]:.1f}% / "
                        "{moe_grid[held_out][max_abs_error_pct]:.1f}% ({moe_grid[held_out][rows]})** |"),
    ("docs/weights.md", "under-predicted at 1-8 tokens (Mixtral b1 " + _moe_row("mixtral-8x7b-fused-bf16-decode-b1-l512-graph")
     + ", b4 " + _moe_row("mixtral-8x7b-fused-bf16-decode-b4-l4096-graph") + ", Qwen3 b8 "
     + _moe_row("qwen3-30b-a3b-fused-bf16-decode-b8-l4096-graph") + ")"),
    ("docs/weights.md", "Qwen3's per-expert FP8 rows are predicted slow: "
     + _moe_row("qwen3-30b-a3b-per-expert-fp8-decode-b1-l512-graph") + " at b1, "
     + _moe_row("qwen3-30b-a3b-per-expert-fp8-decode-b8-l4096-graph") + " at b8"),
]
# the figures tests/test_doc_figures.py recomputes live (a few seconds); the rest it reads here
CHEAP = ("default", "voice_agent", "steps_extra")
DATASETS = {"steps_extra": "h200_steps_extra.csv", "general_fresh": "h200_general_fresh.csv",
            "ep_steps": "h200x2_ep_steps.csv", "ep_fresh": "h200x2_ep_fresh.csv",
            "ep_prefill": "h200x2_ep_prefill.csv", "steps_all": "h200_steps.csv",
            "steps_cudnn": "h200_steps_cudnn.csv"}


def dataset(path: Path, keep=None, split: str | None = None) -> dict:
    """`hwsim validate`'s summary of a dataset (its rows that `keep`, or of one split)."""
    from hwsim.validate import load_dataset, validate_rows
    rows = [r for r in load_dataset(path) if keep is None or keep(r)]
    report = validate_rows(rows)
    s = report["by_split"][split] if split else report
    return {"rows": s["rows_predicted"], "median": s["median_abs_error_pct"], "max": s["max_abs_error_pct"],
            "mean_signed": s["mean_signed_error_pct"]}


def run(scenario: str | None, sets: list[str] = ()) -> dict:
    """`hwsim run`'s summary of a scenario (None: the default one)."""
    from hwsim.pipeline import system
    from hwsim.config.load import load_scenario
    from hwsim.run import run_scenario
    cfg = load_scenario(ROOT / "scenarios" / f"{scenario}.yaml" if scenario else None, list(sets))
    s = run_scenario(cfg, system(cfg)).summary
    out = {"itl_p50_ms": s["itl_ms"]["p50"], "within_budget_pct": 100 * s["within_budget"]}
    if "p90" in s["itl_ms"]:          # a serving run's
        out["itl_p90_ms"] = s["itl_ms"]["p90"]
    return out


def moe_grid() -> dict:
    """validation/check_accuracy.py's report of the MoE schedules and weight formats grid, and
    each row's signed error."""
    sys.path.insert(0, str(ROOT / "validation"))
    import check_accuracy
    rows = check_accuracy.moe_rows()
    return {**check_accuracy.moe_report(rows), "rows": {r["name"]: r["error_pct"] for r in rows}}


def frontier() -> dict:
    """scenarios/sweep-frontier.yaml, point by point (in this process: the figures, not Dask,
    are the point here)."""
    from hwsim.sweep.point import run_point
    from hwsim.sweep.spec import load_sweep
    spec, points = load_sweep(ROOT / "scenarios" / "sweep-frontier.yaml")
    itl = {}
    for point in points:
        row = run_point(point)
        assert row["status"] == "ok", row["error"]
        f = point["factors"]
        itl[(f["hardware_overrides.hbm.peak_bandwidth_gbps"], f["workload.batch_size"])] = row["itl_ms.p50"]
    budget = spec.base["budget_ms"]
    (best_gbps, _), best_ms = min(((k, v) for k, v in itl.items() if k[1] == 1), key=lambda kv: kv[1])
    return {"points": len(itl), "within_budget": sum(v <= budget for v in itl.values()),
            "best_gbps": best_gbps, "best_ms": best_ms, "b1_3350_ms": itl[(3350, 1)], "b1_22000_ms": itl[(22000, 1)],
            "b32_8000_ms": itl[(8000, 32)], "b32_22000_ms": itl[(22000, 32)]}


def compute(names=None) -> dict:
    """The figures called `names` (default: all)."""
    makers = {
        "default": lambda: run(None),
        "voice_agent": lambda: run("voice-agent"),
        "serving_poisson": lambda: {rate: run("serving-poisson", [f"workload.arrivals.rate_per_s={rate}"])
                                    for rate in (2, 4)},
        "frontier": frontier,
        "moe_grid": moe_grid,
        "steps_graph": lambda: dataset(DATA / "h200_steps.csv", keep=lambda r: r["launch"] == "graph"),
        "general_test": lambda: dataset(DATA / "h200_general.csv", split="test"),
        **{name: (lambda f=file: dataset(DATA / f)) for name, file in DATASETS.items()},
    }
    return {name: makers[name]() for name in (names or makers)}


def text_of(path: Path) -> str:
    """A file's text as one line: whitespace runs and YAML comment marks made one space."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".yaml":
        text = re.sub(r"(?m)^\s*#\s?", " ", text)
    return re.sub(r"\s+", " ", text)


def stale_quotes(figures: dict) -> list[str]:
    """The quotes whose text, with these figures, is not in their file."""
    out = []
    for file, template in QUOTES:
        expected = re.sub(r"\s+", " ", template.format(**_keyed(figures)))
        if expected not in text_of(ROOT / file):
            out.append(f"{file}: expected \"{expected}\"")
    return out


def _keyed(figures: dict) -> dict:
    """JSON's string keys back to numbers where they were (serving_poisson's rates)."""
    return {k: {int(r) if str(r).isdigit() else r: v for r, v in val.items()} for k, val in figures.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the texts; write nothing")
    args = ap.parse_args()
    figures = json.loads(json.dumps(compute()))
    stale = stale_quotes(figures)
    print("\n".join(stale) or f"all {len(QUOTES)} quotes hold")
    if not args.check:
        FIGURES.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
