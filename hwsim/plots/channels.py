"""Bytes served per HBM channel over a run, one bar per channel, coloured by stack."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection

from hwsim.plots.figure import new_axes, save_png


def plot_channel_bytes(ax: Axes, bytes_per_channel: np.ndarray, channels_per_stack: int):
    """Bars of GB per channel; returns the artists. Uneven bars are hot spots."""
    gb = np.asarray(bytes_per_channel) / 1e9
    stacks = np.arange(len(gb)) // channels_per_stack
    colors = matplotlib.colormaps["tab10"](stacks % 10)
    # one PolyCollection, not a Rectangle patch per channel (192 patches took most of a second)
    x = np.arange(len(gb), dtype=float)
    boxes = np.stack([x - 0.5, np.zeros_like(gb), x + 0.5, np.zeros_like(gb), x + 0.5, gb, x - 0.5, gb],
                     axis=1).reshape(-1, 4, 2)
    bars = PolyCollection(boxes, facecolors=colors, linewidths=0)
    bars.sticky_edges.y.append(0)        # as bars: the y axis starts at zero
    ax.add_collection(bars)
    ax.autoscale_view()
    mean = ax.axhline(gb.mean(), color="black", linestyle="--", linewidth=1, label="mean")
    ax.set_xlabel(f"HBM pseudo-channel ({channels_per_stack} per stack, colour = stack)")
    ax.set_ylabel("GB served over the run")
    ax.set_xlim(-0.5, len(gb) - 0.5)
    ax.legend(loc="upper right", fontsize=8)
    return [bars, mean]


def save_channel_png(bytes_per_channel: np.ndarray, channels_per_stack: int, title: str, path) -> None:
    fig, ax = new_axes((8, 3.2))
    plot_channel_bytes(ax, bytes_per_channel, channels_per_stack)
    ax.set_title(title, fontsize=10)
    save_png(fig, path)
