"""What the Gantt chart of one step draws, without matplotlib: `hwsim run` prepares it in the
process that simulated and sends it to the one that draws (hwsim/io/plotter.py)."""

from __future__ import annotations

from typing import NamedTuple


class Item(NamedTuple):
    """What the chart needs of a kernel record."""
    name: str
    data: object            # hwsim.metrics.Component
    t_start: float
    t_end: float


def step_view(lanes: dict[str, list], records) -> tuple[dict[str, list], list[Item]]:
    """What the chart of one step draws, small enough to pickle to another process: the
    step's kernels, and each lane's intervals from the last one that ends by the step's start
    (hidden by the chart's own window, but it keeps a lane that was ever busy as a row)."""
    items = [Item(r.name, r.data, r.t_start, r.t_end) for r in records]
    t0 = items[0].t_start if items else 0.0
    return {lane: _ending_after(spans, t0) for lane, spans in lanes.items()}, items


def _ending_after(spans: list, t0: float) -> list:
    """A lane's intervals that end after t0 (the plotted step's start), and the one before:
    a suffix of the list. Passes run one after another, each recorded after the last, whose
    work all ended by the time the next began; so only the tail is read (a DeepSeek-V3
    batch-64 run records 4.6 million intervals over its steps, and reading all took 8 s)."""
    i = len(spans)
    while i and spans[i - 1][1] > t0:
        i -= 1
    return spans[max(i - 1, 0):]
