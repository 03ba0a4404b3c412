"""Gantt chart of one token (one decode step): when each unit of the device is busy.

Drawn from the units' own busy intervals (hwsim/hw/units.py), not guessed from kernels: an
HBM stack is busy only while a kernel's bytes on that stack are being served, the copy engine
while a copy runs. Bar height is the share of the unit the item used; colour is the kernel's
data component. Lanes of units that did nothing during the run are left out. SM lanes are
slot lanes: thread-block slots taken in fill order, not physical SMs (gantt_view.lane_label).
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from hwsim.plots.breakdown import COLORS
from hwsim.plots.figure import new_axes, save_png
from hwsim.plots.gantt_view import _ending_after, gpu_of, lane_label

COPY_COLOR = "#8c564b"
# a collective's bars (labels such as "L3.dispatch", "L3.all-reduce setup", "logits all-gather")
# in its breakdown component's colour
COMM_KINDS = (("dispatch", "all_to_all"), ("combine", "all_to_all"), ("all-reduce", "all_reduce"),
              ("all-gather", "all_gather"))


# a port's transfers last microseconds in a step of milliseconds (under a pixel): drawn with an
# outline of their colour, so each shows as at least a hairline where it happened
PORTS = ("NVLink out", "NVLink in", "NIC out", "NIC in")
PORT_EDGE = 0.6


def _color(label: str, kernels: dict[str, str]) -> str:
    if label in kernels:
        return kernels[label]
    return next((COLORS[c] for word, c in COMM_KINDS if word in label), COPY_COLOR)


def plot_gantt(ax: Axes, lanes: dict[str, list], records):
    """lanes: unit name -> (start, end, label, share) intervals; records: the step's kernels.
    All bars go into one PolyCollection (thousands of intervals draw in one call)."""
    if not records:
        return []
    t0, t1 = records[0].t_start, max(r.t_end for r in records)
    color_of = {r.name: COLORS.get(r.data.value, "#888888") for r in records}
    code_of: dict = {}                    # label -> its colour's row in `palette`
    rows = [name for name, spans in lanes.items() if spans]
    boxes, codes, edges = [], [], []
    for i, lane in enumerate(rows):
        spans = _ending_after(lanes[lane], t0)            # columns of the lane's intervals
        start, end, share = (np.fromiter(map(itemgetter(k), spans), float, len(spans)) for k in (0, 1, 3))
        label = list(map(itemgetter(2), spans))
        keep = ~((end <= t0) | (start >= t1))
        h = 0.8 * np.minimum(1.0, np.maximum(share[keep], 0.08))
        x0, x1 = (start[keep] - t0) * 1e3, (end[keep] - t0) * 1e3
        y0, y1 = i + 0.4 - h, np.full(len(h), i + 0.4)
        boxes.append(np.stack([x0, y0, x1, y0, x1, y1, x0, y1], axis=1))
        kept = [label[j] for j in np.flatnonzero(keep)] if not keep.all() else label
        codes.append(np.array([code_of.setdefault(x, len(code_of)) for x in kept], dtype=np.int64))
        edges.append(np.full(len(kept), PORT_EDGE if lane.endswith(PORTS) else 0.0))
    palette = np.array([to_rgba(_color(x, color_of)) for x in code_of]).reshape(-1, 4)
    box_array = np.concatenate(boxes).reshape(-1, 4, 2) if boxes else np.empty((0, 4, 2))
    colors = palette[np.concatenate(codes)] if boxes else []
    bars = PolyCollection(box_array if len(box_array) else [], facecolors=colors, edgecolors=colors,
                          linewidths=np.concatenate(edges) if boxes else 0)
    ax.add_collection(bars, autolim=False)     # the limits are set below: no extents pass over every box
    _shade_gpus(ax, rows)
    ax.set_yticks(range(len(rows)), [lane_label(r) for r in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, (t1 - t0) * 1e3)
    slots = "\nslot lanes: the SMs' thread-block slots, taken in fill order (not physical SMs)" \
        if any(lane_label(r) != r for r in rows) else ""
    ax.set_xlabel(f"time within the step (ms); bar height: share of the unit used{slots}")
    return [bars]


def _shade_gpus(ax: Axes, rows: list[str]) -> None:
    """Several GPUs: every other GPU's lane group on a grey band, so the groups read apart."""
    gpus = [gpu_of(r) for r in rows]
    for i, g in enumerate(gpus):
        if g is not None and g % 2 and (i == 0 or gpus[i - 1] != g):
            end = i + gpus[i:].count(g)
            ax.axhspan(i - 0.5, end - 0.5, color="#efefef", zorder=0, linewidth=0)


def draw_gantt(lanes: dict[str, list], records, title: str):
    """The gantt figure: the legend below the lanes, where the title (above, left) cannot cover it
    nor it the title (above them, at the right, a long title ran under it on every run)."""
    rows = sum(1 for spans in lanes.values() if spans)
    fig, ax = new_axes((10, max(4.2, 1.6 + 0.15 * rows)))
    plot_gantt(ax, lanes, records)
    names = ["weight_read", "expert_weight_read", "kv_read", "activation_io", "router"]
    if any(gpu_of(lane) is not None for lane in lanes):          # several GPUs: the collectives' colours
        names += ["all_to_all", "all_reduce"]
    handles = [Rectangle((0, 0), 1, 1, color=COLORS[c]) for c in names]
    handles.append(Rectangle((0, 0), 1, 1, color=COPY_COLOR))
    fig.legend(handles, [*names, "copy"], loc="outside lower center", fontsize=7, ncols=len(handles),
               frameon=False)
    ax.set_title(title, fontsize=10, loc="left")
    return fig


def save_gantt_png(lanes: dict[str, list], records, title: str, path) -> None:
    save_png(draw_gantt(lanes, records, title), path)
