"""Stacked bar of one token's latency by component, with the budget line."""

from __future__ import annotations

from matplotlib.axes import Axes

from hwsim.metrics import CommComponent, Component
from hwsim.plots.figure import new_axes, save_png

# A fixed colour per component, so every plot of every run reads the same way; keyed by the
# Component enum itself, so a new component without a colour fails here, not in a plot.
_COMPONENT_COLORS = {
    Component.LAUNCH_OVERHEAD: "#9e9e9e", Component.HOST: "#6b6b6b", Component.KERNEL_OVERHEAD: "#cfcfcf",
    Component.WEIGHT_READ: "#1f77b4", Component.EXPERT_READ: "#6baed6", Component.KV_READ: "#d62728",
    Component.KV_WRITE: "#ff9896", Component.DEQUANT: "#9467bd", Component.ATTENTION_COMPUTE: "#e377c2",
    Component.GEMM_COMPUTE: "#2ca02c", Component.ROUTER: "#bcbd22", Component.ACTIVATION_IO: "#17becf",
    Component.EXPERT_LOAD_WAIT: "#ff7f0e", Component.IDLE: "#f7f7f7",
}
assert set(_COMPONENT_COLORS) == set(Component), set(Component) - set(_COMPONENT_COLORS)
# several GPUs (docs/metrics.md): collectives in browns, waiting for the slowest GPU in black
_COMM_COLORS = {CommComponent.ALL_REDUCE: "#8c6d31", CommComponent.ALL_TO_ALL: "#bd9e39",
                CommComponent.ALL_GATHER: "#e7cb94", CommComponent.GPU_WAIT: "#252525"}
assert set(_COMM_COLORS) == set(CommComponent)
COLORS = {c.value: colour for c, colour in (*_COMPONENT_COLORS.items(), *_COMM_COLORS.items())}


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


def save_breakdown_png(summary, path) -> None:
    """breakdown.png of a run's summary (hwsim.summary.RunSummary, read by attribute)."""
    fig, ax = new_axes((6.4, 5.2))
    plot_breakdown(ax, summary.breakdown_ms, summary.budget_ms,
                   label=(f"batch {summary.batch_size}, ctx {summary.context_tokens}"
                          if summary.batch_size is not None else "mean serving iteration"))
    ax.set_title(f"{summary.model} on {summary.hardware}: "
                 f"ITL p50 {summary.itl_ms['p50']:.2f} ms", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    save_png(fig, path)
