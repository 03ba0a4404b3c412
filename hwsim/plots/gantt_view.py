"""What the Gantt chart of one step draws, without matplotlib: `hwsim run` prepares it in the
process that simulated and sends it to the one that draws (hwsim/io/plotter.py)."""

from __future__ import annotations

import re
from typing import NamedTuple

GPU_LANE = re.compile(r"GPU(\d+) (.+)")
SM_GROUP_LANE = re.compile(r"(GPU\d+ )?SMs (\d+)-(\d+)")
# what the chart draws of each GPU when there are several (the trace keeps every unit): its
# first SM group and HBM stack, which each kernel's tiles and bytes spread over like the
# others, and its ports (the links), so that 8 GPUs stay readable (~5 rows each, not 22)
CHART_UNITS = ("SMs 0-", "HBM stack 0", "NVLink out", "NVLink in", "NIC out", "NIC in")


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
    return {lane: _ending_after(spans, t0) for lane, spans in chart_lanes(lanes).items()}, items


def chart_lanes(lanes: dict[str, list]) -> dict[str, list]:
    """The lanes the chart draws: all of one device's; on several GPUs (lanes named
    'GPU<g> <unit>', hwsim/parallel/multi.py) each GPU's CHART_UNITS, GPU by GPU."""
    if not any(GPU_LANE.match(name) for name in lanes):
        return lanes
    return {name: spans for name, spans in lanes.items()
            if (m := GPU_LANE.match(name)) and m.group(2).startswith(CHART_UNITS)}


def lane_label(lane: str) -> str:
    """A lane's name as the trace and the chart show it. An SM group's lane ("SMs 0-15",
    hwsim/hw/device.py) holds the thread-block slots of that many SMs taken in fill order, not
    those physical SMs: a 132-block GEMM fills the first lanes' slots while, on the chip, each
    of 132 SMs runs one block. So it is labelled for what it is: "slot lane 0 (16 SMs' slots,
    fill order)" (issue 28)."""
    m = SM_GROUP_LANE.fullmatch(lane)
    if not m:
        return lane
    from hwsim.hw.device import SM_GROUP

    first, last = int(m.group(2)), int(m.group(3))
    return f"{m.group(1) or ''}slot lane {first // SM_GROUP} ({last - first + 1} SMs' slots, fill order)"


def gpu_of(lane: str) -> int | None:
    """The GPU a lane belongs to, None on a single device."""
    m = GPU_LANE.match(lane)
    return int(m.group(1)) if m else None


def _ending_after(spans: list, t0: float) -> list:
    """A lane's intervals that end after t0 (the plotted step's start), and the one before:
    a suffix of the list. Passes run one after another, each recorded after the last, whose
    work all ended by the time the next began; so only the tail is read (a DeepSeek-V3
    batch-64 run records 4.6 million intervals over its steps, and reading all took 8 s)."""
    i = len(spans)
    while i and spans[i - 1][1] > t0:
        i -= 1
    return spans[max(i - 1, 0):]
