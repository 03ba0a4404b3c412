"""Bytes served per HBM channel over a run, one bar per channel, coloured by stack."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402


def plot_channel_bytes(ax: Axes, bytes_per_channel: np.ndarray, channels_per_stack: int):
    """Bars of GB per channel; returns the artists. Uneven bars are hot spots."""
    gb = np.asarray(bytes_per_channel) / 1e9
    stacks = np.arange(len(gb)) // channels_per_stack
    colors = plt.get_cmap("tab10")(stacks % 10)
    bars = ax.bar(np.arange(len(gb)), gb, width=1.0, color=colors, linewidth=0)
    mean = ax.axhline(gb.mean(), color="black", linestyle="--", linewidth=1, label="mean")
    ax.set_xlabel(f"HBM pseudo-channel ({channels_per_stack} per stack, colour = stack)")
    ax.set_ylabel("GB served over the run")
    ax.set_xlim(-0.5, len(gb) - 0.5)
    ax.legend(loc="upper right", fontsize=8)
    return [bars, mean]


def save_channel_png(bytes_per_channel: np.ndarray, channels_per_stack: int, title: str, path) -> None:
    fig, ax = plt.subplots(figsize=(8, 3.2), layout="constrained")
    plot_channel_bytes(ax, bytes_per_channel, channels_per_stack)
    ax.set_title(title, fontsize=10)
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
