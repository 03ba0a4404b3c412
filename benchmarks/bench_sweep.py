"""Sweep speed (issue 33): a sweep-frontier-like study (Mixtral-8x7B, grouped MoE kernels,
context 4096, 2 decode steps; HBM bandwidth x batch size) on an embedded Dask LocalCluster,
end to end (cluster start-up included), at a baseline git revision and in the working tree,
in one run.

    python benchmarks/bench_sweep.py [--baseline REV] [--bandwidths 20] [--workers 2] [--sm-clock MHZ]

Prints, for each, the points, wall seconds, points per wall second, and the CPU seconds of the
whole process tree (the client, the scheduler and the workers: the machine is shared and its
wall time noisy), and the estimate for 10,000 points at the measured rate. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline import ROOT, export, run_timed  # noqa: E402

BEFORE = "0285f71"      # main before issue 33's sweep work
BATCHES = [1, 2, 4, 8, 16, 32]

SPEC = textwrap.dedent("""\
    name: bench-frontier
    base:
      hardware: h200-sxm
      model: mixtral-8x7b
      budget_ms: 10
      workload: {{batch_size: 1, context_tokens: 4096, decode_steps: 2}}
      runtime: {{launch: graph, moe_schedule: grouped{clock}}}
    factors:
      - key: hardware_overrides.hbm.peak_bandwidth_gbps
        values: {bandwidths}
      - key: workload.batch_size
        values: {batches}
    """)

RUN = textwrap.dedent("""\
    import json, sys, time
    from pathlib import Path
    from hwsim.sweep.runner import run_sweep
    from hwsim.sweep.spec import load_sweep
    _, points = load_sweep(Path(sys.argv[1]))
    t0 = time.perf_counter()
    s = run_sweep(points, Path(sys.argv[2]), workers=int(sys.argv[3]))
    print(json.dumps({"points": s["points"], "computed": s["computed"], "failed": s["failed"],
                      "sweep_wall_s": time.perf_counter() - t0}))
    """)


def measure(tree: Path, spec: Path, out: Path, workers: int) -> dict:
    """One sweep in a fresh interpreter with `tree` as its hwsim: its figures and the CPU
    seconds of its whole process tree."""
    done, wall, cpu = run_timed([sys.executable, "-c", RUN, str(spec), str(out), str(workers)], tree)
    if done.returncode:
        raise SystemExit(f"sweep in {tree} exited {done.returncode}: {done.stderr.strip()[-800:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"], result["cpu_s"] = wall, cpu
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default=BEFORE, help=f"git revision to compare with (default {BEFORE}; "
                                                       "'none': the working tree only)")
    ap.add_argument("--bandwidths", type=int, default=20, help="HBM bandwidths (x 6 batch sizes = points)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sm-clock", type=float, default=None,
                    help="lock the SM clock (MHz; the H200's maximum is 1980): no power governor re-runs "
                         "a throttled point at each clock it tries (issue 33 item 4), the sweep's own cost shows")
    args = ap.parse_args()
    bandwidths = [round(3350 + i * (22000 - 3350) / max(1, args.bandwidths - 1)) for i in range(args.bandwidths)]
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "bench.yaml"
        clock = f", sm_clock: {args.sm_clock}" if args.sm_clock else ""
        spec.write_text(SPEC.format(bandwidths=bandwidths, batches=BATCHES, clock=clock))
        trees = {}
        if args.baseline != "none":
            trees[f"before ({args.baseline})"] = export(args.baseline, Path(tmp) / "base")
        trees["now"] = ROOT
        rows = {label: measure(tree, spec, Path(tmp) / f"out-{i}", args.workers)
                for i, (label, tree) in enumerate(trees.items())}
    print(f"{len(bandwidths) * len(BATCHES)} sweep-frontier-like points on {args.workers} workers "
          f"{'at ' + str(args.sm_clock) + ' MHz ' if args.sm_clock else ''}"
          f"(wall: whole process, Dask start-up included; CPU: every process of it)")
    print(f"{'':24}{'wall s':>9}{'points/s':>10}{'CPU s':>9}{'CPU ms/pt':>11}{'10k pts, min':>14}")
    for label, r in rows.items():
        rate = r["points"] / r["wall_s"]
        print(f"{label:24}{r['wall_s']:>9.1f}{rate:>10.1f}{r['cpu_s']:>9.1f}"
              f"{1e3 * r['cpu_s'] / r['points']:>11.1f}{10_000 / rate / 60:>14.1f}"
              + (f"   ({r['failed']} failed)" if r["failed"] else ""))


if __name__ == "__main__":
    main()
