"""Chrome / Perfetto trace-event export of a run (load it in ui.perfetto.dev).

Tracks:
- the kernel stream, with a slice per kernel (its tiles, waves, bytes and attribution);
- one track per unit of the device that was busy during the recorded steps (SM groups, the L2,
  the HBM stacks, the bus, the copy engine, a native decoder, ports), with the slices the
  unit recorded itself and the share of it each item used (hwsim/hw/units.py). An SM group's
  track is named as the Gantt chart names its row, a slot lane ("slot lane 0 (16 SMs' slots,
  fill order)"): thread blocks take slots in order, so these are not physical SMs.
"""

from __future__ import annotations

import json

from hwsim.plots.gantt_view import lane_label
from hwsim.results import RunResult


def trace_events(result: RunResult, built) -> dict:
    tracks = ["kernels"] + [name for name, spans in result.lanes.items() if spans]
    tid = {name: i + 1 for i, name in enumerate(tracks)}
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": built.device.name}}]
    events += [{"ph": "M", "name": "thread_name", "pid": 1, "tid": tid[n], "args": {"name": lane_label(n)}}
               for n in tracks]
    events += [{"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid[n],
                "args": {"sort_index": tid[n]}} for n in tracks]

    def slice_(track, name, start_s, end_s, **args):
        events.append({"ph": "X", "pid": 1, "tid": tid[track], "name": name, "ts": start_s * 1e6,
                       "dur": max(end_s - start_s, 0) * 1e6, "args": args})

    for r in result.records:
        attribution = {c.value: round(v * 1e6, 3) for c, v in r.attribution.items() if v}
        slice_("kernels", r.name, r.t_start, r.t_end, step=r.step, tiles=r.tiles, waves=r.waves,
               hbm_read_bytes=r.hbm_read_bytes, l2_bytes=r.l2_bytes, attribution_us=attribution,
               shared=r.shared)
    for lane in tracks[1:]:
        for start, end, label, share in result.lanes[lane]:
            slice_(lane, label, start, end, share=float(f"{share:.4g}"))
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_trace(result: RunResult, built, path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(trace_events(result, built), fh)
