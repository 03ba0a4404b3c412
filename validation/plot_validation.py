"""Predicted vs measured, whole steps and operators, as one scatter plot (docs/img/validation.png).

    python validation/plot_validation.py

Whole steps come from validation/results_h200.json, results_h200_extra.json and
results_h200_cudnn.json (`hwsim validate --json` over validation/data/h200_steps.csv,
h200_steps_extra.csv, the second grid measured after calibration, and h200_steps_cudnn.csv with
`--set runtime.attention_kernel=cudnn`); operators from calibration/compare_h200.py.
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
    extra = json.loads((HERE / "results_h200_extra.json").read_text())["rows"]
    cudnn = json.loads((HERE / "results_h200_cudnn.json").read_text())["rows"]
    chip = ChipSpec.from_profile(load_profile("h200-sxm"))
    ops = [(r["measured_us"] * 1e-3, r["simulated_us"] * 1e-3, r["part"])
           for r in compare_h200.compare(chip, compare_h200.DEFAULT_DATA)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6), layout="constrained")
    ax = axes[0]
    for rows, launch, color, marker, what in ((steps, "graph", "#1f77b4", "o", "graph"),
                                              (steps, "eager", "#ff7f0e", "o", "eager (host-bound)"),
                                              (extra, "graph", "#2ca02c", "^", "graph, test grid"),
                                              (cudnn, "graph", "#9467bd", "s", "graph, cuDNN attention")):
        pts = [(r["measured_ms"], r["predicted_ms"]) for r in rows if r["name"].endswith(launch)]
        if pts:
            ax.scatter(*zip(*pts), s=22, color=color, marker=marker, label=f"whole steps, {what}")
    ax.set_title("whole decode steps and prefills (H200)", fontsize=10)
    ax = axes[1]
    colors = {"gemm": "#2ca02c", "attention_default_backend": "#ff9896", "flash_decode_attention": "#d62728",
              "memory": "#9467bd", "launch": "#7f7f7f", "small_kernel": "#17becf"}
    seen = set()
    for m, p, part in ops:
        ax.scatter([m], [p], s=10, color=colors.get(part, "k"), label=None if part in seen else part)
        seen.add(part)
    ax.set_title("operators (microbenchmarks, device time)", fontsize=10)
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
