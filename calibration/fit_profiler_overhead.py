"""The profiler's own host time per host event it records (hardware_profiles/hosts/as-traced.yaml
profiler_event_us), from the H100 and H200 calls of issue 30:

    python calibration/fit_profiler_overhead.py > calibration/data/fit_profiler_overhead.txt

For each traced point that was also measured, the measure phase of the same call ran the point's
steps unprofiled (median of 10) and then one profiled step, in one process
(calibration/capture_hf_traces.py measure: `wall_ms`, `profiled_step_ms`); the difference is the
profiler's, and the captured trace of that point says how many events a step records: host
events (ops, runtime and driver calls, annotations) and device activities (kernels, copies:
CUPTI's records, which a CUDA-graph launch pays for in its own duration). Per point:
(profiled - unprofiled) / events; the
median is the profile's number. The traces' own step times are not used (the validation compares
them with the measured walls)."""

from __future__ import annotations

import json
import statistics
import sys
from bisect import bisect_left
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from hwsim.ktrace.reader import read_trace  # noqa: E402
from hwsim.ktrace.timeline import step_window  # noqa: E402

sys.path.insert(0, str(ROOT / "validation"))
from trace_store import trace_path, traces_in  # noqa: E402  (the traces are archived)

CALLS = [ROOT / "validation/data/hf_traces_h100/call_3", ROOT / "validation/data/hf_traces_h100/call_4",
         ROOT / "validation/data/hf_traces_h200/call_1", ROOT / "validation/data/hf_traces_h200/call_2",
         ROOT / "validation/data/hf_traces_h200/call_3"]


def events_in_step(path: Path) -> int:
    """Host events (ops, runtime and driver calls, annotations) and device activities (kernels,
    copies) the profiler recorded in the step: each costs the host its own time."""
    trace = read_trace(path)
    start, end, _ = step_window(trace)
    host = sum(bisect_left(m, end) - bisect_left(m, start) for m in trace.marks.values())
    device = sum(start <= e.ts <= end for evs in trace.device.values() for e in evs)
    return host + device


def main() -> int:
    per_event, by_chip = [], {}
    print("| call | model | stack | point | events | unprofiled ms | profiled ms | us/event |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    for folder in CALLS:
        measured = {(r["model"], r["stack"], r["batch"], r["context_tokens"]): r
                    for r in map(json.loads, (folder / "steps.jsonl").read_text().splitlines())}
        for cap in map(json.loads, (folder / "captured.jsonl").read_text().splitlines()):
            key = (cap["model"], cap["stack"], cap["batch"], cap["context_tokens"])
            if key not in measured or cap["trace"] not in traces_in(folder / "traces"):
                continue
            path = trace_path(folder / "traces" / cap["trace"])
            m = measured[key]
            n = events_in_step(path)
            us = (m["profiled_step_ms"] - m["wall_ms"]) * 1e3 / n
            per_event.append(us)
            by_chip.setdefault(folder.parent.name[-4:], []).append(us)
            print(f"| {folder.parent.name[-4:]}/{folder.name} | {key[0]} | {key[1]} | {key[2]}x{key[3]} | {n} | {m['wall_ms']:.1f} | "
                  f"{m['profiled_step_ms']:.1f} | {us:.2f} |")
    print(f"\nmedian {statistics.median(per_event):.2f} us per recorded event over {len(per_event)} points "
          f"(range {min(per_event):.2f}-{max(per_event):.2f})")
    for chip, us in by_chip.items():
        print(f"{chip}'s machine: median {statistics.median(us):.2f} us over {len(us)} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
