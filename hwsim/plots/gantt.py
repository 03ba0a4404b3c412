"""Gantt chart of one token (one decode step): when each unit of the device is busy.

Drawn from the units' own busy intervals (hwsim/hw/units.py), not guessed from kernels: an
HBM stack is busy only while a kernel's bytes on that stack are being served, the copy engine
while a copy runs. Bar height is the share of the unit the item used; colour is the kernel's
data component. Lanes of units that did nothing during the run are left out.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from hwsim.plots.breakdown import COLORS  # noqa: E402

COPY_COLOR = "#8c564b"


def plot_gantt(ax: Axes, lanes: dict[str, list], records):
    """lanes: unit name -> (start, end, label, share) intervals; records: the step's kernels.
    All bars go into one PolyCollection (thousands of intervals draw in one call)."""
    if not records:
        return []
    t0, t1 = records[0].t_start, max(r.t_end for r in records)
    color_of = {r.name: COLORS.get(r.data.value, "#888888") for r in records}
    rows = [name for name, spans in lanes.items() if spans]
    boxes, colors = [], []
    for i, lane in enumerate(rows):
        for start, end, label, share in lanes[lane]:
            if end <= t0 or start >= t1:
                continue
            h = 0.8 * min(1.0, max(share, 0.08))
            x0, x1 = (start - t0) * 1e3, (end - t0) * 1e3
            y0, y1 = i + 0.4 - h, i + 0.4
            boxes.append(((x0, y0), (x1, y0), (x1, y1), (x0, y1)))
            colors.append(color_of.get(label, COPY_COLOR))
    bars = PolyCollection(np.array(boxes).reshape(-1, 4, 2) if boxes else [], facecolors=colors,
                          linewidths=0)
    ax.add_collection(bars)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, (t1 - t0) * 1e3)
    ax.set_xlabel("time within the step (ms); bar height: share of the unit used")
    return [bars]


def save_gantt_png(lanes: dict[str, list], records, title: str, path) -> None:
    fig, ax = plt.subplots(figsize=(10, 4.2), layout="constrained")
    plot_gantt(ax, lanes, records)
    names = ["weight_read", "expert_weight_read", "kv_read", "activation_io", "router"]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[c]) for c in names]
    handles.append(plt.Rectangle((0, 0), 1, 1, color=COPY_COLOR))
    ax.legend(handles, [*names, "copy"], loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=7,
              ncols=6, frameon=False)
    ax.set_title(title, fontsize=10, loc="left")
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
