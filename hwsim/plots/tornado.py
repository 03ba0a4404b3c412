"""The what-if figures (docs/whatif.md): a tornado of the token's sensitivity to each number,
and the frontier of two numbers that meet a target."""

from __future__ import annotations

from matplotlib.axes import Axes

from hwsim.plots.figure import new_axes, save_png

TORNADO_ROWS = 15


def tornado_bars(rows: list[dict], base_ms: float, metric: str = "itl") -> list[tuple[str, float, float]]:
    """(key, ms change at -10%, ms change at +10%) of the rows with the largest elasticity,
    read off each elasticity e as base (0.9^e - 1) and base (1.1^e - 1)."""
    ranked = sorted((r for r in rows if r.get(f"{metric}_elasticity") is not None),
                    key=lambda r: -abs(r[f"{metric}_elasticity"]))[:TORNADO_ROWS]
    return [(r["key"], base_ms * (0.9 ** r[f"{metric}_elasticity"] - 1),
             base_ms * (1.1 ** r[f"{metric}_elasticity"] - 1)) for r in ranked]


def plot_tornado(ax: Axes, bars: list[tuple[str, float, float]], base_ms: float, label: str = "ITL"):
    """Horizontal bars, the most sensitive number on top: each number's -10% (light) and +10%
    (dark) change of the metric, in ms, around its present value."""
    keys = [k for k, _, _ in bars][::-1]
    down = [d for _, d, _ in bars][::-1]
    up = [u for _, _, u in bars][::-1]
    artists = [ax.barh(keys, down, color="#9ecae1", label="number -10%"),
               ax.barh(keys, up, color="#3182bd", label="number +10%")]
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel(f"change of {label} (ms) around {base_ms:.3f} ms")
    ax.legend(loc="lower right", fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
    return artists


def save_tornado_png(report: dict, path) -> None:
    bars = tornado_bars(report["rows"], report["itl_ms"])
    fig, ax = new_axes((7.2, 0.32 * max(len(bars), 4) + 1.6))
    plot_tornado(ax, bars, report["itl_ms"])
    ax.set_title(f"{report['model']} on {report['hardware']}: what moves the token", fontsize=10)
    save_png(fig, path)


def plot_frontier(ax: Axes, front: dict):
    """The pairs of two numbers that meet the target (points where none can are left out)."""
    a, b = front["keys"]
    pts = [(p[a], p[b]) for p in front["points"] if p[b] is not None]
    artists = [ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", color="#3182bd",
                       label=f"{front['target']['metric']} = {front['target']['value']:g}")]
    artists.append(ax.plot([front["present"][a]], [front["present"][b]], marker="*", markersize=12,
                           color="#d62728", linestyle="none", label="present"))
    ax.set_xlabel(a)
    ax.set_ylabel(b)
    ax.legend(fontsize=8)
    return artists


def save_frontier_png(front: dict, path, title: str = "") -> None:
    fig, ax = new_axes((6.4, 4.8))
    plot_frontier(ax, front)
    if title:
        ax.set_title(title, fontsize=10)
    save_png(fig, path)
