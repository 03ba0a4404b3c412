"""Serving plots: latency CDFs with their targets, and iterations over simulated time."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection

from hwsim.plots.breakdown import COLORS
from hwsim.plots.figure import new_axes, save_png


def plot_cdf(ax: Axes, values_ms, target_ms: float | None, label: str, target_label: str):
    """Empirical CDF of `values_ms` with a vertical target line; returns the artists."""
    v = np.sort(np.asarray(values_ms, dtype=float))
    y = np.arange(1, len(v) + 1) / max(len(v), 1)
    artists = ax.step(v, y, where="post", color="#1f77b4", label=label)
    if target_ms is not None:
        artists.append(ax.axvline(target_ms, color="black", linestyle="--", linewidth=1.2,
                                  label=target_label))
    ax.set_ylabel("fraction")
    ax.set_xlabel(f"{label} (ms)")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower right", fontsize=8)
    return artists


def plot_iterations(ax: Axes, iterations, budget_ms: float):
    """Each iteration as a stacked bar at its start time, height = its ms per component."""
    artists = []
    if not iterations:
        return artists
    t = np.array([it.t_start for it in iterations]) * 1e3
    width = np.array([it.duration_s for it in iterations]) * 1e3
    bottom = np.zeros(len(iterations))
    corners = []
    for comp in iterations[0].breakdown_s:
        h = np.array([it.breakdown_s[comp] for it in iterations]) * 1e3
        if h.sum() <= 0:
            continue
        # one PolyCollection per component, not a Rectangle per iteration (a 10,000-request
        # run has ~70,000 iterations)
        boxes = np.stack([t, bottom, t + width, bottom, t + width, bottom + h, t, bottom + h],
                         axis=1).reshape(-1, 4, 2)
        bars = PolyCollection(boxes, facecolors=COLORS.get(comp), linewidths=0, label=comp)
        bars.sticky_edges.y.append(0)
        _add_without_extents(ax, bars, boxes, corners)
        artists.append(bars)
        bottom += h
    if corners:
        ax.update_datalim(np.concatenate(corners))
    artists.append(ax.axhline(budget_ms, color="black", linestyle="--", linewidth=1.2,
                              label=f"budget {budget_ms:g} ms"))
    ax.set_xlabel("simulated time (ms)")
    ax.set_ylabel("iteration time (ms)")
    handles, labels = ax.get_legend_handles_labels()      # the budget first, as with bars
    first = [i for i, label in enumerate(labels) if label.startswith("budget")]
    order = first + [i for i in range(len(labels)) if i not in first]
    ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper left",
              bbox_to_anchor=(1.01, 1), fontsize=7)
    return artists


def _add_without_extents(ax: Axes, bars: PolyCollection, boxes: np.ndarray, corners: list) -> None:
    """ax.add_collection(bars), with the data limits it would take from its paths (an
    extents pass over every box: 5 s for the ~70,000 iterations of 10,000 requests) taken
    from the boxes' corners instead: the smallest and largest vertex, and the smallest
    positive one (dataLim.minpos). The axes come out the same; where matplotlib's private
    hooks are missing, the collection is added as usual."""
    if not (hasattr(bars, "_set_in_autoscale") and hasattr(ax, "_request_autoscale_view")):
        ax.add_collection(bars)
        return
    ax.add_collection(bars, autolim=False)
    bars._set_in_autoscale(True)
    v = boxes.reshape(-1, 2)
    pos = np.where(v > 0, v, np.inf).min(axis=0)
    corners.append(np.stack([v.min(axis=0), v.max(axis=0)] + ([pos] if not np.isinf(pos).all() else [])))
    ax._request_autoscale_view()


def save_cdf_png(values_ms, target_ms: float, label: str, target_label: str, path) -> None:
    fig, ax = new_axes((6, 3.6))
    plot_cdf(ax, values_ms, target_ms, label, target_label)
    save_png(fig, path)


def save_timeline_png(iterations, budget_ms: float, title: str, path) -> None:
    fig, ax = new_axes((9, 3.6))
    plot_iterations(ax, iterations, budget_ms)
    ax.set_title(title, fontsize=10)
    save_png(fig, path)
