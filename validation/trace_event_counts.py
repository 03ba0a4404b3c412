"""Counts a torch.profiler trace's events by category, and its host span: what the profiler itself
recorded, so that its own cost (profiled burst against its unprofiled twin) can be charged per event.

    python validation/trace_event_counts.py TRACE.json[.gz] [...]   # one JSON line per trace
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter


def counts(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    by_cat = Counter(e.get("cat", "?") for e in events if e.get("ph") == "X")
    host = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime", "python_function")]
    span_us = (max(e["ts"] + e.get("dur", 0) for e in host) - min(e["ts"] for e in host)) if host else 0.0
    runtime = Counter(e["name"] for e in events if e.get("cat") == "cuda_runtime")
    return {"trace": path, "events": sum(by_cat.values()), "by_cat": dict(by_cat), "host_span_us": span_us,
            "runtime_top": dict(runtime.most_common(8))}


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(json.dumps(counts(p)))
