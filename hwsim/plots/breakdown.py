"""Stacked bar of one token's latency by component, with the budget line."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

# A fixed colour per component, so every plot of every run reads the same way.
COLORS = {
    "launch_overhead": "#9e9e9e", "kernel_overhead": "#cfcfcf", "weight_read": "#1f77b4",
    "expert_weight_read": "#6baed6", "kv_read": "#d62728", "kv_write": "#ff9896",
    "dequant": "#9467bd", "attention_compute": "#e377c2", "gemm_compute": "#2ca02c",
    "router": "#bcbd22", "activation_io": "#17becf", "expert_load_wait": "#ff7f0e", "idle": "#f7f7f7",
}


def plot_breakdown(ax: Axes, breakdown_ms: dict[str, float], budget_ms: float, label: str = "token"):
    """One stacked bar (ms per component) and a dashed budget line; returns the artists."""
    artists = []
    bottom = 0.0
    for comp, ms in breakdown_ms.items():
        if ms <= 0:
            continue
        artists.append(ax.bar([label], [ms], bottom=bottom, color=COLORS.get(comp), label=comp,
                              edgecolor="white", linewidth=0.5))
        bottom += ms
    artists.append(ax.axhline(budget_ms, color="black", linestyle="--", linewidth=1.2,
                              label=f"budget {budget_ms:g} ms"))
    ax.set_ylabel("ms per decode step (one token per sequence)")
    ax.set_ylim(0, max(bottom, budget_ms) * 1.15)
    return artists


def save_breakdown_png(summary: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 5.2), layout="constrained")
    plot_breakdown(ax, summary["breakdown_ms"], summary["budget_ms"],
                   label=f"batch {summary['batch_size']}, ctx {summary['context_tokens']}")
    ax.set_title(f"{summary['model']} on {summary['hardware']}: "
                 f"ITL p50 {summary['itl_ms']['p50']:.2f} ms", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
