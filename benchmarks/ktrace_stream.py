"""How much memory and time reading a large kernel trace takes (hwsim/ktrace/reader.py streams it).

    python benchmarks/ktrace_stream.py [--copies 400]

Writes a trace of `copies` synthetic Mixtral decode steps back to back (~0.3 MB of JSON each)
to a temporary file, reads it with the streaming reader, and prints the file size, the events
kept, the wall time and the peak of Python's allocations (tracemalloc) during the read.
"""

import argparse
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

from hwsim.ktrace import reader, synthetic


def big_trace(path: Path, copies: int) -> int:
    one = synthetic.decode_step("mixtral-8x7b", 8, 4096)
    events = one["traceEvents"]
    span = max(e["ts"] + e.get("dur", 0) for e in events) + 100
    with open(path, "w") as fh:
        fh.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceEvents": [')
        first = True
        for c in range(copies):
            for e in events:
                e2 = dict(e, ts=e["ts"] + c * span)
                args = dict(e.get("args", {}))
                for key in ("correlation", "External id"):
                    if key in args:
                        args[key] += c * 10_000_000
                e2["args"] = args
                fh.write(("" if first else ",") + json.dumps(e2))
                first = False
        fh.write("]}")
    return path.stat().st_size


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--copies", type=int, default=400)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.json"
        size = big_trace(path, a.copies)
        t0 = time.perf_counter()
        reader.read_trace(path)
        wall = time.perf_counter() - t0
        tracemalloc.start()                  # a second read, traced (tracemalloc slows it 10x)
        trace = reader.read_trace(path)
        _, peak = tracemalloc.get_traced_memory()
        kept = trace.kernels + len(trace.calls) + len(trace.ops)
        print(f"trace {size / 1e6:.0f} MB, {kept:,} events kept, read in {wall:.1f} s, "
              f"peak allocations {peak / 1e6:.0f} MB ({peak / max(kept, 1):.0f} B per kept event)")


if __name__ == "__main__":
    main()
