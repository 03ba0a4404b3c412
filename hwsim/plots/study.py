"""Study plots over a sweep's result table: each a function of (axes, table) -> artists."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from hwsim.io.atomic import atomic_write  # noqa: E402
from hwsim.metrics import Component  # noqa: E402
from hwsim.plots.breakdown import COLORS  # noqa: E402


def factor_columns(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if c.startswith("factor.")]


def point_labels(table: pd.DataFrame) -> list[str]:
    """Each point by the factors that vary over the table (one that does not tells no point apart),
    named by their last key segment unless two factors share it."""
    cols = [c for c in factor_columns(table) if table[c].astype(str).nunique() > 1] or factor_columns(table)
    short = [c.split(".")[-1] for c in cols]
    names = [s if short.count(s) == 1 else c[7:] for c, s in zip(cols, short)]
    return [", ".join(f"{n}={row[c]}" for n, c in zip(names, cols)) for _, row in table.iterrows()]


def in_factor_order(table: pd.DataFrame) -> pd.DataFrame:
    """The points in the order of their factors (the first slowest), not of their completion."""
    factors = factor_columns(table)
    try:
        return table.sort_values(factors, kind="stable") if factors else table
    except TypeError:               # a factor of mixed types: as written
        return table


def plot_breakdown_per_point(ax: Axes, table: pd.DataFrame, budget_ms: float):
    """A horizontal stacked bar of ms per component for every point, top to bottom in the
    factors' order, each labelled whole on its row; the budget line."""
    ok = in_factor_order(table[table["status"] == "ok"])
    y = np.arange(len(ok))
    left = np.zeros(len(ok))
    artists = []
    for comp in Component:
        col = f"breakdown_ms.{comp.value}"
        if col not in ok or ok[col].fillna(0).sum() <= 0:
            continue
        w = ok[col].fillna(0).to_numpy()
        artists.append(ax.barh(y, w, left=left, color=COLORS.get(comp.value), label=comp.value))
        left += w
    artists.append(ax.axvline(budget_ms, color="black", linestyle="--", label=f"budget {budget_ms:g} ms"))
    ax.set_yticks(y, point_labels(ok), fontsize=8)
    ax.set_ylim(len(ok) - 0.5, -0.5)            # the first point on top
    ax.set_xlabel("ms per decode step")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7)
    return artists


def plot_heatmap(ax: Axes, table: pd.DataFrame, x: str, y: str, budget_ms: float,
                 value: str = "itl_ms.p50"):
    """ITL over two factors, with the budget contour."""
    ok = table[table["status"] == "ok"]
    grid = ok.pivot_table(index=f"factor.{y}", columns=f"factor.{x}", values=value, aggfunc="mean")
    image = ax.imshow(grid.to_numpy(), origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(grid.shape[1]), [str(v) for v in grid.columns], fontsize=7)
    ax.set_yticks(range(grid.shape[0]), [str(v) for v in grid.index], fontsize=7)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    artists = [image]
    z = grid.to_numpy()
    if np.nanmin(z) < budget_ms < np.nanmax(z) and min(z.shape) > 1:
        artists.append(ax.contour(z, levels=[budget_ms], colors="white", linewidths=2))
        budget = f"white: {budget_ms:g} ms budget"
    else:    # no contour to draw: say where the budget lies rather than leave the reader looking
        budget = (f"no point within the {budget_ms:g} ms budget" if np.nanmin(z) > budget_ms else
                  f"every point within the {budget_ms:g} ms budget" if np.nanmax(z) <= budget_ms else
                  f"budget {budget_ms:g} ms")
    plt.colorbar(image, ax=ax, label=f"{value} (ms); {budget}")
    for (i, j), v in np.ndenumerate(z):
        if not np.isnan(v):
            ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=6, color="white")
    return artists


def plot_pareto(ax: Axes, table: pd.DataFrame, budget_ms: float):
    """Throughput (tokens/s) against latency for every point; the Pareto front joined."""
    ok = table[table["status"] == "ok"].copy()
    lat = ok["itl_ms.p50"].to_numpy()
    thr = (ok["serving.throughput_tok_s"] if "serving.throughput_tok_s" in ok
           else ok["batch_size"] / ok["itl_ms.p50"] * 1e3).to_numpy()
    artists = [ax.scatter(lat, thr, s=18, color="#1f77b4", label="points")]
    order = np.argsort(lat)
    front, best = [], -np.inf
    for i in order:
        if thr[i] > best:
            front.append(i)
            best = thr[i]
    artists += ax.plot(lat[front], thr[front], color="#d62728", label="Pareto front")
    artists.append(ax.axvline(budget_ms, color="black", linestyle="--", label=f"budget {budget_ms:g} ms"))
    ax.set_xlabel("inter-token latency p50 (ms)")
    ax.set_ylabel("tokens per second")
    ax.legend(fontsize=7)
    return artists


def _save(fig, path) -> None:
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=110))
    plt.close(fig)


def save_study_pngs(table: pd.DataFrame, budget_ms: float, out) -> dict:
    """breakdown.png, pareto.png and (with two or more factors) heatmap.png; returns the paths."""
    from pathlib import Path

    out = Path(out)
    paths = {}
    ok = table[table["status"] == "ok"] if "status" in table else table
    if not len(ok):
        return paths
    fig, ax = plt.subplots(figsize=(9, max(3.5, 0.22 * len(ok) + 1.5)), layout="constrained")
    plot_breakdown_per_point(ax, table, budget_ms)
    paths["breakdown.png"] = out / "breakdown.png"
    _save(fig, paths["breakdown.png"])
    fig, ax = plt.subplots(figsize=(5.5, 4), layout="constrained")
    plot_pareto(ax, table, budget_ms)
    paths["pareto.png"] = out / "pareto.png"
    _save(fig, paths["pareto.png"])
    varying = [c[7:] for c in factor_columns(ok) if ok[c].astype(str).nunique() > 1]
    if len(varying) >= 2:
        fig, ax = plt.subplots(figsize=(6, 4.5), layout="constrained")
        plot_heatmap(ax, table, varying[0], varying[1], budget_ms)
        paths["heatmap.png"] = out / "heatmap.png"
        _save(fig, paths["heatmap.png"])
    return paths
