"""Engine speed: simulated tokens and events per wall second, next to SimPy's raw event rate.

    python benchmarks/bench_engine.py [--steps 100] [--scenario scenarios/default.yaml]
        [--fidelity tile|wave] [--set KEY=VALUE ...] [--repeat 3]

Issue 8's figures: `--steps 100` (the default step), `--steps 1000 --set
workload.batch_size=8` (1,000 Mixtral batch-8 steps), `--steps 3 --fidelity tile`. The
machine's speed moves by 10-30% from run to run, so `--repeat N` reports the fastest of N.

Not a pass/fail test: it prints numbers. SimPy's raw rate is measured in the same process
(a chain of bare timeouts), so the ratio says how much of the engine's time is SimPy itself.
"""

from __future__ import annotations

import argparse
import time
import resource

import simpy

from hwsim.config.load import load_scenario
from hwsim.run import run_scenario


def simpy_raw_rate(n: int = 200_000) -> float:
    env = simpy.Environment()

    def ticker():
        for _ in range(n):
            yield env.timeout(1)

    env.process(ticker())
    t0 = time.perf_counter()
    env.run()
    return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--scenario", default=None)
    ap.add_argument("--fidelity", default=None, choices=["tile", "wave"])
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    sets = [f"workload.decode_steps={args.steps}", *args.sets]
    if args.fidelity:
        sets.append(f"runtime.fidelity={args.fidelity}")
    cfg = load_scenario(args.scenario, sets)
    raw = simpy_raw_rate()
    wall = float("inf")
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        result = run_scenario(cfg)
        wall = min(wall, time.perf_counter() - t0)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    s = result.summary
    events = s["sim"]["events"]
    print(f"scenario            {cfg.name} ({cfg.model} on {cfg.hardware}, batch {cfg.workload.batch_size}, "
          f"fidelity {cfg.runtime.fidelity})")
    print(f"decode steps        {args.steps}")
    print(f"wall                {wall:.3f} s  ({wall / args.steps * 1e3:.1f} ms per decode step)")
    print(f"simulated tokens/s  {s['sim']['simulated_tokens'] / wall:.1f}")
    print(f"events              {events}  ({events / wall:,.0f} per wall second)")
    print(f"SimPy raw timeouts  {raw:,.0f} per wall second (same process)")
    print(f"events/raw ratio    {events / wall / raw:.2f}")
    print(f"peak RSS            {peak_kib / 1024:.0f} MiB (whole process)")


if __name__ == "__main__":
    main()
