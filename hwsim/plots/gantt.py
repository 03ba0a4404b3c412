"""Gantt chart of resource occupancy during one token (one decode step)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from hwsim.plots.breakdown import COLORS  # noqa: E402

SM_GROUP = 16


def plot_gantt(ax: Axes, records, sms: int, stacks: int):
    """Bars where each resource is busy, coloured by the kernel's data component."""
    groups = math.ceil(sms / SM_GROUP)
    rows = [f"SMs {g * SM_GROUP}-{min((g + 1) * SM_GROUP, sms) - 1}" for g in range(groups)]
    rows += [f"HBM stack {s}" for s in range(stacks)] + ["bus", "decoder"]
    lanes: dict[str, list] = {r: [] for r in rows}
    colors: dict[str, list] = {r: [] for r in rows}
    t0 = records[0].t_start if records else 0.0
    for r in records:
        span = ((r.t_start - t0) * 1e3, (r.t_end - r.t_start) * 1e3)
        c = COLORS.get(r.data.value, "#888888")
        busy = [rows[g] for g in range(math.ceil(min(sms, r.tiles) / SM_GROUP))]
        if r.hbm_read_bytes + r.hbm_write_bytes:
            busy += [f"HBM stack {s}" for s in range(stacks)]
        if r.hbm_read_bytes + r.hbm_write_bytes + r.l2_bytes:
            busy.append("bus")
        if r.decoded:
            busy.append("decoder")
        for lane in busy:
            lanes[lane].append(span)
            colors[lane].append(c)
    artists = []
    for i, lane in enumerate(rows):
        if lanes[lane]:
            artists.append(ax.broken_barh(lanes[lane], (i - 0.4, 0.8), facecolors=colors[lane]))
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time within the step (ms)")
    return artists


def save_gantt_png(records, sms: int, stacks: int, title: str, path) -> None:
    fig, ax = plt.subplots(figsize=(10, 4.2), layout="constrained")
    plot_gantt(ax, records, sms, stacks)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[c]) for c in
               ("weight_read", "expert_weight_read", "kv_read", "activation_io", "router")]
    ax.legend(handles, ["weight_read", "expert_weight_read", "kv_read", "activation_io", "router"],
              loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=7, ncols=5, frameon=False)
    ax.set_title(title, fontsize=10, loc="left")
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
