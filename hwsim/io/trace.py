"""Chrome / Perfetto trace-event export of a run (load it in ui.perfetto.dev).

Tracks:
- the kernel stream, with a slice per kernel (its tiles, waves, bytes and attribution);
- one track per SM group (the chip's SMs split into groups of SM_GROUP), busy while a
  kernel's tiles occupy any SM of the group;
- one track per HBM stack, busy while a kernel streams bytes from it;
- the on-chip bus;
- the expert-prefetch copy engine;
- the native decoder, when attention expands compressed KV on it.
"""

from __future__ import annotations

import json
import math

from hwsim.run import RunResult

SM_GROUP = 16     # SMs per track, about one GPC


def trace_events(result: RunResult, built) -> dict:
    chip = built.chip
    stacks = chip.hbm_stacks
    groups = math.ceil(chip.sms / SM_GROUP)
    tracks = ["kernels"] + [f"SMs {g * SM_GROUP}-{min((g + 1) * SM_GROUP, chip.sms) - 1}"
                            for g in range(groups)]
    tracks += [f"HBM stack {s}" for s in range(stacks)] + ["bus", "prefetch copy engine", "decoder"]
    tid = {name: i + 1 for i, name in enumerate(tracks)}
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"{chip.name}"}}]
    events += [{"ph": "M", "name": "thread_name", "pid": 1, "tid": tid[n], "args": {"name": n}}
               for n in tracks]
    events += [{"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid[n],
                "args": {"sort_index": tid[n]}} for n in tracks]

    def slice_(track, name, start_s, end_s, **args):
        events.append({"ph": "X", "pid": 1, "tid": tid[track], "name": name, "ts": start_s * 1e6,
                       "dur": max(end_s - start_s, 0) * 1e6, "args": args})

    for r in result.records:
        attribution = {c.value: round(v * 1e6, 3) for c, v in r.attribution.items() if v}
        slice_("kernels", r.name, r.t_start, r.t_end, step=r.step, tiles=r.tiles, waves=r.waves,
               hbm_read_bytes=r.hbm_read_bytes, l2_bytes=r.l2_bytes, attribution_us=attribution)
        busy_sms = min(chip.sms, r.tiles)
        for g in range(math.ceil(busy_sms / SM_GROUP)):
            slice_(tracks[1 + g], r.name, r.t_start, r.t_end)
        moved = r.hbm_read_bytes + r.hbm_write_bytes
        if moved:
            for s in range(stacks):
                slice_(f"HBM stack {s}", r.name, r.t_start, r.t_end, bytes=moved / stacks)
        if moved or r.l2_bytes:
            slice_("bus", r.name, r.t_start, r.t_end, bytes=moved + r.l2_bytes)
        if r.decoded:
            slice_("decoder", r.name, r.t_start, r.t_end, elements=r.decoded)
    for key, start, end, nbytes, stack in built.system.copy_records:
        slice_("prefetch copy engine", f"prefetch {key}", start, end, bytes=nbytes,
               stack="all" if stack < 0 else stack)
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_trace(result: RunResult, built, path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(trace_events(result, built), fh)
