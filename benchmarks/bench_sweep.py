"""Sweep scaling: the same 64-point study on 1 and on 2 Dask workers.

    python benchmarks/bench_sweep.py

Prints wall time for each and the speed-up. Not a pass/fail test.
"""

from __future__ import annotations

import tempfile
import textwrap
import time
from pathlib import Path

from hwsim.sweep.runner import run_sweep
from hwsim.sweep.spec import load_sweep

SPEC = textwrap.dedent("""\
    name: bench-64
    base:
      hardware: h200-sxm
      model: qwen3-30b-a3b
      workload: {decode_steps: 2, context_tokens: 2048}
      runtime: {moe_schedule: grouped}
    factors:
      - key: workload.batch_size
        values: [1, 2, 4, 8, 16, 32, 48, 64]
      - key: hardware_overrides.hbm.peak_bandwidth_gbps
        values: [3000, 4000, 4800, 6000, 8000, 10000, 12000, 16000]
    """)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "bench.yaml"
        spec.write_text(SPEC)
        _, points = load_sweep(spec)
        walls = {}
        for workers in (1, 2):
            t0 = time.perf_counter()
            summary = run_sweep(points, Path(tmp) / f"out{workers}", workers=workers)
            walls[workers] = time.perf_counter() - t0
            print(f"{workers} worker(s): {summary['points']} points in {walls[workers]:.1f} s "
                  f"({summary['computed']} computed, {summary['failed']} failed)")
        print(f"speed-up on 2 workers: {walls[1] / walls[2]:.2f}x")


if __name__ == "__main__":
    main()
