"""The device side of a profiled burst of the HF engine (validation/measure_hf_serving.py --phase
profile), as a small table that can be kept where the trace cannot: per CUDA-graph replay (the
replays after the first `--skip`), each kernel's calls and device ms; and the eager launches'
kernels, all together.

    python validation/hf_profile_kernels.py TRACE.json.gz [--skip 5] > kernels.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from hwsim.ktrace.reader import read_trace


def _table(events) -> list[dict]:
    calls, ms = Counter(), Counter()
    for e in events:
        calls[e.name] += 1
        ms[e.name] += e.dur / 1e3
    return [{"kernel": k, "calls": calls[k], "ms": round(v, 3)} for k, v in ms.most_common()]


def summary(path: str, skip: int) -> dict:
    t = read_trace(path, simulated=False)
    replays = [c for c in t.calls if c.name == "cudaGraphLaunch"][skip:]
    eager = [c for c in t.calls if c.name.startswith(("cudaLaunchKernel", "cuLaunchKernel"))]
    in_graphs = [e for c in replays for e in t.device.get(c.correlation, [])]
    n = max(len(replays), 1)
    per_replay = [dict(row, calls=row["calls"] / n, ms=round(row["ms"] / n, 3)) for row in _table(in_graphs)]
    return {"trace": path, "graph_replays": len(replays), "skipped": skip,
            "ms_per_replay": round(sum(e.dur for e in in_graphs) / 1e3 / n, 3),
            "per_replay": per_replay[:40],
            "eager_launches": len(eager),
            "eager": _table(e for c in eager for e in t.device.get(c.correlation, []))[:40]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=5, help="graph replays skipped at the start (the first steps)")
    args = ap.parse_args()
    print(json.dumps(summary(args.trace, args.skip), indent=1))


if __name__ == "__main__":
    main()
