"""Gantt chart of one token (one decode step): when each unit of the device is busy.

Drawn from the units' own busy intervals (hwsim/hw/units.py), not guessed from kernels: an
HBM stack is busy only while a kernel's bytes on that stack are being served, the copy engine
while a copy runs. Bar height is the share of the unit the item used; colour is the kernel's
data component. Lanes of units that did nothing during the run are left out.
"""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from hwsim.plots.breakdown import COLORS
from hwsim.plots.figure import new_axes, save_png

COPY_COLOR = "#8c564b"


def plot_gantt(ax: Axes, lanes: dict[str, list], records):
    """lanes: unit name -> (start, end, label, share) intervals; records: the step's kernels.
    All bars go into one PolyCollection (thousands of intervals draw in one call)."""
    if not records:
        return []
    t0, t1 = records[0].t_start, max(r.t_end for r in records)
    color_of = {r.name: COLORS.get(r.data.value, "#888888") for r in records}
    rgba_of: dict[str, tuple] = {}        # one colour conversion per kernel, not per bar
    rows = [name for name, spans in lanes.items() if spans]
    boxes, colors = [], []
    for i, lane in enumerate(rows):
        start, end, label, share = zip(*lanes[lane])     # columns of the lane's intervals
        start, end, share = np.array(start, float), np.array(end, float), np.array(share, float)
        keep = ~((end <= t0) | (start >= t1))
        h = 0.8 * np.minimum(1.0, np.maximum(share[keep], 0.08))
        x0, x1 = (start[keep] - t0) * 1e3, (end[keep] - t0) * 1e3
        y0, y1 = i + 0.4 - h, np.full(len(h), i + 0.4)
        boxes.append(np.stack([x0, y0, x1, y0, x1, y1, x0, y1], axis=1))
        for name in np.asarray(label, dtype=object)[keep]:
            if name not in rgba_of:
                rgba_of[name] = to_rgba(color_of.get(name, COPY_COLOR))
            colors.append(rgba_of[name])
    box_array = np.concatenate(boxes).reshape(-1, 4, 2) if boxes else np.empty((0, 4, 2))
    bars = PolyCollection(box_array if len(box_array) else [], facecolors=colors, linewidths=0)
    ax.add_collection(bars)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, (t1 - t0) * 1e3)
    ax.set_xlabel("time within the step (ms); bar height: share of the unit used")
    return [bars]


def save_gantt_png(lanes: dict[str, list], records, title: str, path) -> None:
    fig, ax = new_axes((10, 4.2))
    plot_gantt(ax, lanes, records)
    names = ["weight_read", "expert_weight_read", "kv_read", "activation_io", "router"]
    handles = [Rectangle((0, 0), 1, 1, color=COLORS[c]) for c in names]
    handles.append(Rectangle((0, 0), 1, 1, color=COPY_COLOR))
    ax.legend(handles, [*names, "copy"], loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=7,
              ncols=6, frameon=False)
    ax.set_title(title, fontsize=10, loc="left")
    save_png(fig, path)
