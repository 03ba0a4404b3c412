"""Predicted vs measured, whole steps and operators, as one scatter plot (docs/img/validation.png).

    python validation/plot_validation.py

Whole steps come from validation/results_h200.json (`hwsim validate --json` over
validation/data/h200_steps.csv); operators from the microbenchmark comparison
(calibration/compare_h200.py's rows).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "calibration"))

import compare_h200  # noqa: E402

from hwsim.config.load import load_profile  # noqa: E402
from hwsim.hw.chip import ChipSpec  # noqa: E402


def main():
    steps = json.loads((HERE / "results_h200.json").read_text())["rows"]
    chip = ChipSpec.from_profile(load_profile("h200-sxm"))
    ops = []
    for r in compare_h200.rows(compare_h200.DEFAULT_DATA):
        sim = compare_h200.simulate(chip, r)
        if sim is not None:
            ops.append((compare_h200.measured_s(r) * 1e3, sim * 1e3, r["part"]))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6), layout="constrained")
    ax = axes[0]
    for launch, color in (("graph", "#1f77b4"), ("eager", "#ff7f0e")):
        pts = [(r["measured_ms"], r["predicted_ms"]) for r in steps if r["name"].endswith(launch)]
        ax.scatter(*zip(*pts), s=22, color=color, label=f"whole steps, {launch}")
    ax.set_title("whole decode steps and prefills (H200)", fontsize=10)
    ax = axes[1]
    colors = {"gemm": "#2ca02c", "gemm_ctas": "#2ca02c", "attention": "#d62728", "memory": "#9467bd",
              "launch": "#7f7f7f"}
    seen = set()
    for m, p, part in ops:
        label = {"gemm_ctas": "gemm"}.get(part, part)
        ax.scatter([m], [p], s=12, color=colors.get(part, "k"), label=None if label in seen else label)
        seen.add(label)
    ax.set_title("operators (microbenchmarks)", fontsize=10)
    for ax in axes:
        lo, hi = ax.get_xlim()
        lim = (min(lo, ax.get_ylim()[0]), max(hi, ax.get_ylim()[1]))
        ax.plot(lim, lim, color="black", linewidth=0.8)
        ax.fill_between(lim, [v * 0.95 for v in lim], [v * 1.05 for v in lim], color="grey", alpha=0.2,
                        label="±5%")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured (ms)")
        ax.set_ylabel("predicted (ms)")
        ax.legend(fontsize=7)
    out = HERE.parent / "docs" / "img" / "validation.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
