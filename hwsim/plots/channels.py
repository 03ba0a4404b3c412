"""Bytes served per HBM channel over a run: a stack-by-channel grid coloured by how far each
channel is from the mean. Bars of GB were flat blocks for interleaved addresses (every channel
within 0.1%): the grid says how even they are, and a hot spot stands out red."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes

from hwsim.plots.figure import new_axes, save_png

# a spread under 1% is drawn as such, not stretched to the full colour range (it is noise)
_LEAST_RANGE_PCT = 1.0


def channel_grid(bytes_per_channel, channels_per_stack: int) -> np.ndarray:
    """% above (+) or below (-) the mean, a row per stack, a column per channel of the stack."""
    b = np.asarray(bytes_per_channel, dtype=float)
    mean = b.mean()
    pct = (b / mean - 1.0) * 100.0 if mean > 0 else np.zeros_like(b)
    return pct.reshape(-1, channels_per_stack)


def plot_channel_bytes(ax: Axes, bytes_per_channel, channels_per_stack: int):
    """The grid as an image with its colour bar; returns the artists."""
    grid = channel_grid(bytes_per_channel, channels_per_stack)
    span = max(_LEAST_RANGE_PCT, float(np.abs(grid).max()))
    image = ax.imshow(grid, cmap="RdBu_r", vmin=-span, vmax=span, aspect="auto", interpolation="nearest")
    ax.figure.colorbar(image, ax=ax, label="% from the mean channel")
    stacks = grid.shape[0]
    ax.set_yticks(range(stacks), [f"stack {s}" for s in range(stacks)], fontsize=8)
    mean_gb = float(np.mean(bytes_per_channel)) / 1e9
    ax.set_xlabel(f"pseudo-channel within the stack; mean {mean_gb:.3g} GB a channel over the run, "
                  f"spread {grid.min():+.2f}% .. {grid.max():+.2f}%")
    return [image]


def save_channel_png(bytes_per_channel, channels_per_stack: int, title: str, path) -> None:
    stacks = len(bytes_per_channel) // channels_per_stack
    fig, ax = new_axes((8, max(2.6, 1.4 + 0.35 * stacks)))
    plot_channel_bytes(ax, bytes_per_channel, channels_per_stack)
    ax.set_title(title, fontsize=10)
    save_png(fig, path)
